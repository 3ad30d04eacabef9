"""``resverify replay``: a saved vector runs on a backend and is diffed, element by
element, against the exact specification within the error budget."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from resverify.cli.main import build_parser, main
from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities
from resverify.impl.registry import BUILTIN
from resverify.spec import Result, dumps
from resverify.spec.fixtures import linear_block_request, stack_request
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, ResultError, Value


class OffByOneUlpBackend(NumpyBackend):
    """The reference, but the first gradient element of x is pushed far beyond budget."""

    name = "off"

    def run(self, request: Request) -> Result:
        result = super().run(request)
        assert isinstance(result, Value)
        grads = {k: np.array(v, copy=True) for k, v in result.grads.items()}
        grads["x"].flat[0] = np.nextafter(grads["x"].flat[0], np.inf) * (1 + 2**-40)
        return Value(result.output, grads=grads)


class BroadcastingBackend(NumpyBackend):
    """Accepts every residual merge NumPy can broadcast (the classic bug)."""

    name = "broadcasting"

    def run(self, request: Request) -> Result:
        return Value(np.zeros((2, 2)), grads={"a": np.zeros((2, 2)), "b": np.zeros(2)})


def _vector(tmp_path: Path, request: Request) -> str:
    path = tmp_path / "vector.json"
    path.write_text(dumps(request))
    return str(path)


def test_reference_run_of_a_seed_vector_is_within_budget(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", _vector(tmp_path, stack_request(4, True, "float32"))]) == 0
    out = capsys.readouterr().out
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line)
                                              for line in out.splitlines())
            if cells[0].startswith(("output", "grad"))}
    assert rows["grad x[0]"][:2] == ["0.31640625", "0.31640625"], rows["grad x[0]"]
    assert len(rows) == 20 and all(r[-1] == "ok" for r in rows.values()), out
    assert out.rstrip().endswith("20 ok, 0 FAIL"), out


def test_element_beyond_budget_is_reported_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:OffByOneUlpBackend"])
    out = capsys.readouterr().out
    assert code == 1, out
    failing = [line for line in out.splitlines() if line.endswith(" FAIL") and "ok," not in line]
    assert len(failing) == 1 and failing[0].startswith("grad x[0]"), out


def test_shape_mismatch_vector_needs_the_same_typed_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = Program((Input("a", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    vector = _vector(tmp_path, Request(program, {"a": np.ones((2, 2)), "b": np.ones(2)},
                                       "float64", None))
    assert main(["replay", vector]) == 0
    assert "shape_mismatch [[2, 2], [2]]" in capsys.readouterr().out
    assert main(["replay", vector, "--backend", f"{__name__}:BroadcastingBackend"]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, "not json", json.dumps({"resverify": 1}),
                                     json.dumps({"resverify-corpus": 1, "id": "0001-x"})])
def test_unreadable_or_invalid_vector_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None) -> None:
    path = tmp_path / "vector.json"
    if content is not None:
        path.write_text(content)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err


# ----------------------------------------------------------------------------------------
# several runs, the recorded failure, inputs, big vectors, unsupported, help, pipes


class FlakyBackend(NumpyBackend):
    """Every other answer has the output's first element one ulp up (within budget)."""

    name = "flaky"
    calls = 0

    def run(self, request: Request) -> Result:
        result = super().run(request)
        FlakyBackend.calls += 1
        if FlakyBackend.calls % 2 or isinstance(result, ResultError):
            return result
        output = np.array(result.output, copy=True)
        output.flat[0] = np.nextafter(output.flat[0], np.inf)
        return Value(output, grads=result.grads)


def test_a_backend_answering_differently_from_run_to_run_is_non_deterministic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FlakyBackend.calls = 0
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:FlakyBackend"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "non-deterministic" in out and "output[0]: 1.0 then 1.0000000000000002" in out, out


def test_one_run_cannot_tell_non_determinism(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FlakyBackend.calls = 0
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:FlakyBackend", "--runs", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "non-deterministic" not in out, out


def test_the_recorded_failure_is_printed_with_the_vector(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(dumps(linear_block_request()))
    doc["vector"] = {"property": "forward_and_gradients_match_spec_within_budget",
                     "backend": "cmd:./engine", "kind": "law",
                     "message": "grads['x'][0]: backend = 0.75, spec = 1/2"}
    path = tmp_path / "vector.json"
    path.write_text(json.dumps(doc))
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    for text in ("forward_and_gradients_match_spec_within_budget", "cmd:./engine", "law",
                 "grads['x'][0]: backend = 0.75, spec = 1/2"):
        assert text in out, (text, out)


def test_inputs_and_cotangent_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", _vector(tmp_path, linear_block_request())]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "input x [2]: [2.0, -1.0]" in lines, lines
    assert "input w [2, 2]: [[0.5, -1.0], [2.0, 0.25]]" in lines, lines
    assert "cotangent: [1.0, 1.0]" in lines, lines


def _wide_request(size: int = 4096) -> Request:
    program = Program((Input("x", (size,)),),
                      (Node("f", "scale", ("x",), Fraction(1, 2)),
                       Node("y", "residual_add", ("x", "f"))), "y")
    return Request(program, {"x": np.arange(size, dtype=np.float64)}, "float64",
                   np.ones(size))


class SomeElementsOff(NumpyBackend):
    """The reference with output elements 5 and 6 doubled, 4000 ten times too big."""

    name = "some-off"

    def run(self, request: Request) -> Result:
        result = super().run(request)
        assert isinstance(result, Value), result
        output = np.array(result.output, copy=True)
        output[[5, 6]] *= 2
        output[4000] *= 10
        return Value(output, grads=result.grads)


def test_a_big_vector_prints_a_summary_unless_all_is_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vector = _vector(tmp_path, _wide_request())
    backend = f"{__name__}:SomeElementsOff"
    assert main(["replay", vector, "--backend", backend]) == 1
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 40, out
    assert "output: 4096 elements, 4093 ok, 3 FAIL" in out, out
    assert "grad x: 4096 elements, 4096 ok, 0 FAIL" in out, out
    assert "worst output[4000]" in out, out
    failing = [line for line in out.splitlines() if line.endswith(" FAIL") and "ok," not in line]
    assert [line.split()[0] for line in failing] == ["output[5]", "output[6]", "output[4000]"]
    assert out.rstrip().endswith("8189 ok, 3 FAIL"), out
    assert main(["replay", vector, "--backend", backend, "--all"]) == 1
    assert len(capsys.readouterr().out.splitlines()) > 8192


class Refuses(NumpyBackend):
    """Answers unsupported to everything; claims only what the test sets."""

    name = "refuses"

    def run(self, request: Request) -> Result:
        return ResultError("unsupported", "not here")


class RefusesUnclaimed(Refuses):
    capabilities = Capabilities(ops=("add",))


def test_unsupported_for_an_unclaimed_request_is_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:RefusesUnclaimed"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "skipped" in out and "not claimed" in out and "FAIL" not in out, out


def test_unsupported_for_a_claimed_request_is_a_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vector = _vector(tmp_path, linear_block_request())
    code = main(["replay", vector, "--backend", f"{__name__}:Refuses"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "refused" in out, out


def test_backend_help_lists_the_builtin_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--help"])
    out = "".join(capsys.readouterr().out.split())  # help wraps lines anywhere, even at "-"
    assert all(name in out for name in BUILTIN), out


def test_values_beyond_the_float_range_print_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = Program((Input("x", (2,)), Input("w", (2, 2))),
                      (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
                      "y")
    big = np.full(2, 1e308)
    request = Request(program, {"x": big, "w": np.full((2, 2), 1e308)}, "float64", big)
    assert main(["replay", _vector(tmp_path, request)]) == 0
    out = capsys.readouterr().out
    assert "2.0e+616~" in out, out


def test_piping_replay_into_head_ends_without_a_traceback(tmp_path: Path) -> None:
    vector = _vector(tmp_path, _wide_request())
    command = [sys.executable, "-m", "resverify.cli.main", "replay", vector, "--all"]
    with subprocess.Popen(command,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        first = child.stdout.readline()  # what `head -1` reads before it exits
        child.stdout.close()
        err = child.stderr.read().decode()
        code = child.wait(timeout=60)
    assert first.startswith(b"vector"), first
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 1, (code, err)


def _forward_vector(tmp_path: Path) -> str:
    base = linear_block_request()
    return _vector(tmp_path, Request(base.program, base.inputs, base.dtype, base.cotangent,
                                     {n: np.full(v.shape, 0.5) for n, v in base.inputs.items()}))


def test_a_forward_mode_vector_judges_the_tangent_as_the_suite_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A saved forward-mode vector replays its tangent too: the reference shows every tangent
    element ok, and a backend whose only bug is in ``J·t`` fails, with exit 1."""
    vector = _forward_vector(tmp_path)
    assert main(["replay", vector]) == 0
    out = capsys.readouterr().out
    assert "tangent x: [0.5, 0.5]" in out.splitlines(), out
    tangent_rows = [line for line in out.splitlines() if line.startswith("tangent[")]
    assert len(tangent_rows) == 2 and all(r.endswith("ok") for r in tangent_rows), out
    code = main(["replay", vector, "--backend", "tests.mutants:TangentDropsIdentity"])
    out = capsys.readouterr().out
    failing = [line for line in out.splitlines() if line.endswith(" FAIL") and "ok," not in line]
    assert code == 1 and failing and all(r.startswith("tangent[") for r in failing), out


class NonFiniteGradBackend(NumpyBackend):
    """The reference, but grad x[0] is NaN and grad x[1] is -inf (class attribute: which)."""

    name = "non-finite"

    def run(self, request: Request) -> Result:
        result = super().run(request)
        assert isinstance(result, Value)
        grads = {k: np.array(v, copy=True) for k, v in result.grads.items()}
        grads["x"].flat[0], grads["x"].flat[1] = np.nan, -np.inf
        return Value(result.output, grads=grads)


def _suite_diff(request: Request, index: int) -> str:
    """The ``|diff|`` the property suite prints for grad x[index] of NonFiniteGradBackend."""
    from resverify.properties.assertions import Context, PropertyFailure
    from resverify.spec.budget import error_budget
    from resverify.spec.exact import evaluate

    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    result = NonFiniteGradBackend().run(request)
    assert isinstance(result, Value) and exact.grads is not None
    got, want = np.asarray(result.grads["x"]), np.asarray(exact.grads["x"], dtype=object)
    only = np.zeros(got.shape, dtype=bool)
    only.flat[index] = True  # every other element exact, so the suite names this one
    got = np.where(only, got, np.asarray([float(v) for v in want.flat]).reshape(got.shape))
    with pytest.raises(PropertyFailure) as failed:
        Context("non-finite", request).within("grad x", got, want, budget.grads["x"])
    found = re.search(r"\|diff\| = (\S+)", str(failed.value))
    assert found is not None, f"no |diff| in the suite's message: {failed.value}"
    return found.group(1)


def test_replay_and_the_suite_print_the_same_diff_for_nan_and_infinite_values(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """|NaN - x| is NaN and |±inf - x| is inf, in the suite's message and in replay alike."""
    request = linear_block_request()
    code = main(["replay", _vector(tmp_path, request), "--backend",
                 f"{__name__}:NonFiniteGradBackend"])
    out = capsys.readouterr().out
    assert code == 1, out
    rows = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line)
                                              for line in out.splitlines())
            if cells[0].startswith("grad x[")}
    for index, (element, expected) in enumerate((("grad x[0]", "nan"), ("grad x[1]", "inf"))):
        replayed, suite = rows[element][2], _suite_diff(request, index)
        assert (replayed, suite) == (expected, expected), \
            f"{element}: replay prints |diff| {replayed}, the suite {suite}; expected {expected}"
