"""``resverify replay``: a saved vector runs on a backend and is diffed, element by
element, against the exact specification within the error budget."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from impl import NumpyBackend
from reports.cli import main
from spec import Result, dumps
from spec.fixtures import linear_block_request, stack_request
from spec.ir import Input, Node, Program
from spec.request import Request


class OffByOneUlpBackend(NumpyBackend):
    """The reference, but the first gradient element of x is pushed far beyond budget."""

    name = "off"

    def run(self, request):
        result = super().run(request)
        grads = {k: np.array(v, copy=True) for k, v in result.grads.items()}
        grads["x"].flat[0] = np.nextafter(grads["x"].flat[0], np.inf) * (1 + 2**-40)
        return Result(output=result.output, grads=grads)


class BroadcastingBackend(NumpyBackend):
    """Accepts every residual merge NumPy can broadcast (the classic bug)."""

    name = "broadcasting"

    def run(self, request):
        return Result(output=np.zeros((2, 2)), grads={"a": np.zeros((2, 2)), "b": np.zeros(2)})


def _vector(tmp_path, request: Request):
    path = tmp_path / "vector.json"
    path.write_text(dumps(request))
    return str(path)


def test_reference_run_of_a_seed_vector_is_within_budget(tmp_path, capsys):
    assert main(["replay", _vector(tmp_path, stack_request(4, True, "float32"))]) == 0
    out = capsys.readouterr().out
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line)
                                              for line in out.splitlines())
            if cells[0].startswith(("output", "grad"))}
    assert rows["grad x[0]"][:2] == ["0.31640625", "0.31640625"], rows["grad x[0]"]
    assert len(rows) == 20 and all(r[-1] == "ok" for r in rows.values()), out
    assert out.rstrip().endswith("20 ok, 0 FAIL"), out


def test_element_beyond_budget_is_reported_and_exits_1(tmp_path, capsys):
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:OffByOneUlpBackend"])
    out = capsys.readouterr().out
    assert code == 1, out
    failing = [line for line in out.splitlines() if line.endswith(" FAIL") and "ok," not in line]
    assert len(failing) == 1 and failing[0].startswith("grad x[0]"), out


def test_shape_mismatch_vector_needs_the_same_typed_error(tmp_path, capsys):
    program = Program((Input("a", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    vector = _vector(tmp_path, Request(program, {"a": np.ones((2, 2)), "b": np.ones(2)},
                                       "float64", None))
    assert main(["replay", vector]) == 0
    assert "shape_mismatch [[2, 2], [2]]" in capsys.readouterr().out
    assert main(["replay", vector, "--backend", f"{__name__}:BroadcastingBackend"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, "not json", json.dumps({"resverify": 1})])
def test_unreadable_or_invalid_vector_is_a_usage_error(tmp_path, capsys, content):
    path = tmp_path / "vector.json"
    if content is not None:
        path.write_text(content)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err
