"""The where entry's own promises: selecting rounds nothing, and the gradient goes to the side
selected, none to the mask.

The op table's tests check the entry on its sample shapes like any other (SymPy's derivative
at rational points, the reference and each installed library within the budget). Here: the
budget of ``where`` on exact inputs is zero, so an answer one ulp off is refused; a gradient
routed to the wrong side (a planted bug) is refused; a mask that may be within its error of 0
charges both sides; and the fast oracle's balls agree with the exact rule.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.budget import error_budget
from resverify.spec.enclosure import verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.rational import objects
from resverify.spec.request import Request

WHERE = OP_TABLE["where"]
MASK = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
A = np.array([[1.5, -2.0, 0.25], [3.0, 2.0**-10, -7.0]])
B = np.array([-0.5, 4.0, 9.0])  # broadcast over the rows
G = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])


def _request(dtype: str) -> Request:
    program = Program((Input("m", MASK.shape), Input("a", A.shape), Input("b", B.shape)),
                      (Node("y", "where", ("m", "a", "b")),), "y")
    return Request(program, {"m": MASK, "a": A, "b": B}, dtype, G)


def _right(dtype: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """What a correct backend answers: the selection, the cotangent routed by the mask."""
    chosen = MASK != 0
    out = np.where(chosen, A, B).astype(dtype)
    grads = {"m": np.zeros_like(MASK), "a": np.where(chosen, G, 0.0),
             "b": np.where(chosen, 0.0, G).sum(axis=0)}
    return out, {k: v.astype(dtype) for k, v in grads.items()}


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_where_selects_exactly_and_an_answer_one_ulp_off_is_refused(dtype: str) -> None:
    request = _request(dtype)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    out, grads = _right(dtype)
    assert not budget.misses(exact, out, grads), budget.misses(exact, out, grads)
    assert float(budget.output.max()) <= 2.0**-1060, (
        f"where's budget {budget.output} is more than the analysis' own room")
    off = np.nextafter(out, np.array(np.inf, dtype=dtype))
    assert len(budget.misses(exact, off, grads)) == out.size, f"selection + 1 ulp in {dtype}"


def test_where_routes_the_gradient_to_the_selected_side_and_none_to_the_mask() -> None:
    exact = evaluate(_request("float64"))
    assert exact.grads is not None
    _, grads = _right("float64")
    for name, want in grads.items():
        got = np.asarray(exact.grads[name], dtype=object)
        assert (got == want).all(), f"grad[{name}]={got.tolist()}, but should be {want.tolist()}"


def test_a_gradient_routed_to_the_wrong_side_is_refused() -> None:
    """The planted bug: the backward sends the cotangent where the mask is 0 to ``a`` (the
    forward right): both gradients are caught, by the exact and the fast oracle."""
    request = _request("float32")
    out, grads = _right("float32")
    chosen = MASK != 0
    wrong = {"m": grads["m"], "a": np.where(chosen, 0.0, G).astype("float32"),
             "b": np.where(chosen, G, 0.0).sum(axis=0).astype("float32")}
    exact = evaluate(request)
    missed = {m.where for m in error_budget(request, exact=exact).misses(exact, out, wrong)}
    assert missed == {"grad[a]", "grad[b]"}, missed
    assert {m.where for m in verify(request, out, wrong).misses} == {"grad[a]", "grad[b]"}
    assert not verify(request, out, grads).misses


def test_a_mask_within_its_error_of_zero_charges_both_sides() -> None:
    """A mask computed by an inexact op (here ``tanh``) near 0 may select either side: the
    bound covers the other side's value there; a mask far from 0 leaves the selection exact."""
    program = Program((Input("m", (2,)), Input("a", (2,)), Input("b", (2,))),
                      (Node("t", "tanh", ("m",)), Node("y", "where", ("t", "a", "b"))), "y")
    sides = {"a": np.array([5.0, 5.0]), "b": np.array([-3.0, -3.0])}
    near = error_budget(Request(program, {"m": np.array([0.0, 2.0]), **sides}, "float32",
                                np.ones(2)))
    assert near.output[0] >= 8.0, f"bound {near.output[0]} where tanh(m) = 0 may flip"
    far = error_budget(Request(program, {"m": np.array([1.0, 2.0]), **sides}, "float32",
                               np.ones(2)))
    assert far.output.max() < 1e-30, f"bound {far.output} where tanh(m) is far from 0"


def test_the_balls_select_as_the_exact_rule_and_refuse_an_undecided_mask() -> None:
    args = [Ball.exact(MASK), Ball.exact(A), Ball.exact(B)]
    out = WHERE.enclose(args, None)
    exact = WHERE.exact([objects([Fraction(v) for v in x.flat], x.shape) for x in
                         (MASK, A, B)], None)
    assert (out.mid == np.asarray(exact, dtype=float)).all() and not out.rad.any(), out
    grads = WHERE.enclose_vjp(Ball.exact(G), args, out, None)
    _, want = _right("float64")
    for ball, name in zip(grads, "mab", strict=True):
        assert (ball.mid == want[name]).all(), f"grad[{name}] ball {ball.mid}, want {want[name]}"
    unsure = [Ball.of(np.array([0.0]), np.array([1e-20])), Ball.exact(A[0, :1]),
              Ball.exact(B[:1])]
    with pytest.raises(NotEnclosed, match="mask"):
        WHERE.enclose(unsure, None)
