"""Forward mode in the reference NumPy autograd: tangents ride on the tensors.

Why: the reference backend is the one every property is first shown to pass on, so its
forward mode is checked against the exact specification here: bit for bit where every
step is exact in float64 (small dyadics), and within the error budget elsewhere
(``tests/spec/test_budget.py``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.impl.numpy_backend import NumpyBackend
from resverify.impl.ops import apply_op
from resverify.impl.tensor import Tensor
from resverify.spec.budget import error_budget
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import LayerNorm, Linear, Mul, Relu, Tanh
from resverify.spec.request import Request, ResultError, Value, check_form

F = Fraction


def block(n: int = 3) -> Program:
    """y = x + relu(x w)·(1/2) + x ⊙ x: every op a residual block's tangent passes."""
    return Program((Input("x", (n,)), Input("w", (n, n))), (
        Node("f", "linear", ("x", "w")), Node("r", "relu", ("f",)),
        Node("a", "scale", ("r",), F(1, 2)), Node("m", "mul", ("x", "x")),
        Node("s", "add", ("a", "m")), Node("y", "residual_add", ("x", "s"))), "y")


def test_the_reference_claims_forward_mode() -> None:
    assert NumpyBackend.capabilities.modes == ("vjp", "jvp")


@settings(max_examples=50, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float64", "float32", "float16"]))
def test_reference_tangent_is_exact_where_every_step_is(data: st.DataObject, dtype: str) -> None:
    """Inputs and tangents in {k/4 : |k| <= 8}: every product and sum of the block is a
    dyadic with few bits, so any dtype holds it exactly and the tangent is the spec's."""
    quarters = st.integers(-8, 8).map(lambda k: k / 4)
    x, tx = (np.array(data.draw(st.lists(quarters, min_size=3, max_size=3))) for _ in "xt")
    w, tw = (np.array(data.draw(st.lists(quarters, min_size=9, max_size=9))).reshape(3, 3)
             for _ in "wt")
    request = Request(block(), {"x": x, "w": w}, dtype, np.ones(3), tangents={"x": tx, "w": tw})
    result = NumpyBackend().run(request)
    assert isinstance(result, Value), result
    check_form(request, result)
    exact = evaluate(request)
    assert exact.tangent is not None and result.tangent is not None
    got = [F(float(v)) for v in result.tangent]
    assert got == list(exact.tangent), (
        f"tangent={got}, but should be {list(exact.tangent)} [{request.program.describe()}, "
        f"{dtype}]")


def test_without_tangents_there_is_no_tangent() -> None:
    request = Request(block(), {"x": np.ones(3), "w": np.eye(3)}, "float64", np.ones(3))
    result = NumpyBackend().run(request)
    assert isinstance(result, Value) and result.tangent is None


def test_forward_mode_still_gives_the_gradients() -> None:
    inputs = {"x": np.array([1.0, -2.0, 0.5]), "w": np.eye(3)}
    plain = NumpyBackend().run(Request(block(), inputs, "float64", np.ones(3)))
    both = NumpyBackend().run(Request(block(), inputs, "float64", np.ones(3),
                                      tangents={"x": np.ones(3), "w": np.ones((3, 3))}))
    assert isinstance(plain, Value) and isinstance(both, Value)
    for name in inputs:
        np.testing.assert_array_equal(both.grads[name], plain.grads[name], err_msg=name)
    np.testing.assert_array_equal(both.output, plain.output)


def test_a_shape_invalid_program_is_still_a_mismatch_in_forward_mode() -> None:
    program = Program((Input("a", (2,)), Input("b", (3,))),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    request = Request(program, {"a": np.ones(2), "b": np.ones(3)}, "float64", None,
                      tangents={"a": np.ones(2), "b": np.ones(3)})
    result = NumpyBackend().run(request)
    assert isinstance(result, ResultError) and result.kind == "shape_mismatch"


def test_an_argument_without_a_tangent_counts_as_zero() -> None:
    x = Tensor(np.array([2.0, 3.0]), tangent=np.array([1.0, 1.0]))
    k = Tensor(np.array([5.0, 7.0]))
    out = apply_op("mul", (x, k))
    assert out.tangent is not None and list(out.tangent) == [5.0, 7.0]
    assert apply_op("mul", (k, k)).tangent is None


def test_a_tangent_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"tangent shape \[3\] != tensor shape \[2\]"):
        Tensor(np.ones(2), tangent=np.ones(3))


def wrong_mul(self: object, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
    return np.asarray(ts[0] * args[1], dtype=args[0].dtype)  # t_b's term dropped


def wrong_linear(self: object, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
    return np.asarray(ts[0] @ args[1].T + args[0] @ ts[1], dtype=args[0].dtype)  # Jᵀ for J


def wrong_tanh(self: object, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
    return np.asarray(ts[0] * (1 - args[0] * args[0]), dtype=args[0].dtype)  # slope of x


def wrong_relu(self: object, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
    return np.asarray(ts[0], dtype=args[0].dtype)  # the tangent passed where relu is off


def wrong_norm(self: object, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
    a, t = args[0], ts[0]
    c = a - a.mean(axis=-1, keepdims=True)
    r = 1 / np.sqrt((c * c).mean(axis=-1, keepdims=True) + float(alpha))
    return np.asarray(r * (t - out * (out * t).mean(axis=-1, keepdims=True)), dtype=a.dtype)


def norm_block() -> Program:
    return Program((Input("x", (2, 4)), Input("w", (4, 4))), (
        Node("n", "layer_norm", ("x",), eps=F(1, 100)), Node("f", "linear", ("n", "w")),
        Node("t", "tanh", ("f",)), Node("r", "relu", ("t",)), Node("k", "mul", ("r", "x")),
        Node("y", "residual_add", ("x", "k"))), "y")


@pytest.mark.parametrize(("op", "rule"), [
    (Mul, wrong_mul), (Linear, wrong_linear), (Tanh, wrong_tanh), (Relu, wrong_relu),
    (LayerNorm, wrong_norm)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_wrong_reference_jvp_rule_is_outside_the_tangent_budget(
        op: type, rule: Any, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tangent budget is tight enough to catch each rule gone wrong (the correct
    reference passes the same request)."""
    rng = np.random.default_rng(5)
    inputs = {"x": rng.integers(-8, 9, (2, 4)) / 4, "w": rng.integers(-8, 9, (4, 4)) / 8}
    tangents = {"x": rng.integers(-8, 9, (2, 4)) / 4, "w": rng.integers(-8, 9, (4, 4)) / 4}
    request = Request(norm_block(), inputs, dtype, np.ones((2, 4)), tangents)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    right = NumpyBackend().run(request)
    assert isinstance(right, Value)
    assert budget.allows(exact, right.output, right.grads, right.tangent)
    monkeypatch.setattr(op, "numpy_jvp", rule)
    wrong = NumpyBackend().run(request)
    assert isinstance(wrong, Value)
    misses = budget.misses(exact, wrong.output, wrong.grads, wrong.tangent)
    assert misses and {m.where for m in misses} == {"tangent"}, (
        f"{op.__name__} with {rule.__name__}: misses {[str(m) for m in misses[:3]]}")
