"""Zeros are judged as values (``-0.0 == +0.0``): an engine whose relu answers ``-0.0`` for
``a <= 0`` passes the suite's comparison and ``resverify replay``, as docs/adapters.md and
docs/external-protocol.md say; a nonzero answer there still fails."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from resverify.cli.main import main
from resverify.impl import Capabilities
from resverify.properties.assertions import PropertyFailure
from resverify.properties.laws_oracle import check_matches_spec
from resverify.spec import Input, Node, Program, Request, Result, Value, dumps

X = [-2.0, -0.0, 0.0, 1.5, -(2.0**-20), 3.0]
RELU = Program((Input("x", (len(X),)),), (Node("y", "relu", ("x",)),), "y")


class NegativeZeroRelu:
    """relu as ``a > 0 ? a : -0.0``, its gradient ``a > 0 ? g : -0.0``: zeros of the wrong sign."""

    name = "negative-zero-relu"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16"), ops=("relu",))
    below_zero = -0.0

    def run(self, request: Request) -> Result:
        x, g = request.inputs["x"], request.cotangent
        fill = np.asarray(self.below_zero, dtype=x.dtype)
        return Value(np.where(x > 0, x, fill), grads={"x": np.where(x > 0, g, fill)})


class TinyNegativeRelu(NegativeZeroRelu):
    """The same, with the smallest negative subnormal in place of -0.0: a wrong value."""

    name = "tiny-negative-relu"
    below_zero = -float(np.finfo(np.float16).smallest_subnormal)


def relu_request(dtype: str) -> Request:
    return Request(RELU, {"x": np.array(X)}, dtype, cotangent=np.array([1, 2, 3, 4, 5, 6.0]))


def replay_exit(tmp_path: Path, request: Request, backend: str) -> tuple[int, str]:
    path = tmp_path / "relu.json"
    path.write_text(dumps(request), encoding="utf-8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["replay", str(path), "--backend", f"{__name__}:{backend}"])
    return code, printed.getvalue()


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_relu_answering_negative_zero_passes_the_comparison_and_replay(
        dtype: str, tmp_path: Path) -> None:
    request = relu_request(dtype)
    answer = NegativeZeroRelu().run(request)
    assert isinstance(answer, Value) and np.signbit(answer.output[0]), "the engine gives -0.0"
    check_matches_spec(NegativeZeroRelu(), request)  # raises PropertyFailure on a miss
    code, printed = replay_exit(tmp_path, request, "NegativeZeroRelu")
    assert code == 0, f"replay exit {code}, expected 0 for -0.0 == +0.0:\n{printed}"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_relu_answering_a_tiny_negative_value_fails_the_comparison_and_replay(
        dtype: str, tmp_path: Path) -> None:
    request = relu_request(dtype)
    with pytest.raises(PropertyFailure, match="output"):
        check_matches_spec(TinyNegativeRelu(), request)
    code, printed = replay_exit(tmp_path, request, "TinyNegativeRelu")
    assert code == 1, f"replay exit {code}, expected 1 for a nonzero answer at a <= 0:\n{printed}"
