"""The exact side of layer_norm and rms_norm: the ε attribute, the 1/sqrt enclosure, and the
norms' laws as exact identities of the specification."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec.codec import dumps, loads_request
from resverify.spec.errors import InvalidProgram, InvalidRequest, ShapeMismatch
from resverify.spec.exact import as_fractions, evaluate
from resverify.spec.ir import ATTRIBUTES, Input, Node, Program, node_shape
from resverify.spec.rational import TANH_PRECISION_BITS, exact_rsqrt
from resverify.spec.request import Request

EPS = Fraction(1, 10**5)


def norm_request(op: str, x: np.ndarray, cot: np.ndarray, eps: Fraction = EPS) -> Request:
    program = Program((Input("x", x.shape),), (Node("y", op, ("x",), eps=eps),), "y")
    return Request(program, {"x": x}, "float64", cot)


def loose(op: str, **attributes: object) -> Node:
    """A node from untyped attribute values, as JSON gives them."""
    return Node("n", op, ("x",), **attributes)  # type: ignore[arg-type]


def test_attributes_are_alpha_and_eps() -> None:
    assert ATTRIBUTES == ("alpha", "eps")
    assert loose("layer_norm", eps="1/100000").eps == EPS
    assert loose("rms_norm", eps=0.5).attribute == Fraction(1, 2)
    assert Node("s", "scale", ("x",), Fraction(3)).attribute == 3


@pytest.mark.parametrize(("node", "message"), [
    (lambda: Node("n", "layer_norm", ("x",)), "layer_norm needs an eps"),
    (lambda: loose("rms_norm", eps=0), "rms_norm's eps must be > 0, got 0"),
    (lambda: loose("layer_norm", eps="-1/2"), "must be > 0, got -1/2"),
    (lambda: loose("layer_norm", eps="nan"), "eps must be finite"),
    (lambda: loose("layer_norm", eps=True), "eps must be a number"),
    (lambda: Node("s", "scale", ("x",), Fraction(1), EPS),
     "only layer_norm, rms_norm and batch_norm take an eps"),
    (lambda: Node("n", "layer_norm", ("x",), Fraction(1), EPS), "only scale takes an alpha"),
])
def test_a_bad_eps_is_refused_with_one_line(node: object, message: str) -> None:
    with pytest.raises(InvalidProgram, match=message):
        node()  # type: ignore[operator]


def test_rank_zero_is_refused_and_an_empty_axis_is_not() -> None:
    with pytest.raises(ShapeMismatch, match=r"layer_norm: shape mismatch \[\] vs \[1\]"):
        node_shape("layer_norm", [()])
    assert node_shape("rms_norm", [(2, 0)]) == (2, 0)


def test_eps_crosses_the_wire_exactly_and_old_requests_still_load() -> None:
    request = norm_request("layer_norm", np.array([1.0, 2.0]), np.ones(2), Fraction(1, 3))
    text = dumps(request)
    assert json.loads(text)["program"]["nodes"][0]["eps"] == "1/3"
    assert loads_request(text).program.nodes[0].eps == Fraction(1, 3)
    old = json.loads(text)
    old["program"]["nodes"] = [{"name": "y", "op": "scale", "args": ["x"], "alpha": "1/2"}]
    assert loads_request(json.dumps(old)).program.nodes[0].alpha == Fraction(1, 2)


@settings(max_examples=60, deadline=None)
@given(w=st.fractions(min_value=Fraction(1, 10**12), max_value=10**6))
def test_rsqrt_enclosure_holds_exactly(w: Fraction) -> None:
    """``[r - e, r + e]`` holds 1/sqrt(w), checked in rationals: ``(r - e)² w <= 1 <=
    (r + e)² w``, and it is no wider than 2**-200 of r."""
    r, e = exact_rsqrt(w)
    assert e <= r / 2**TANH_PRECISION_BITS
    assert (r - e) ** 2 * w <= 1 <= (r + e) ** 2 * w


def test_rsqrt_of_a_perfect_square_is_exact() -> None:
    assert exact_rsqrt(Fraction(4)) == (Fraction(1, 2), 0)
    assert exact_rsqrt(Fraction(9, 16)) == (Fraction(4, 3), 0)
    with pytest.raises(InvalidRequest, match="positive"):
        exact_rsqrt(Fraction(0))


@settings(max_examples=40, deadline=None)
@given(x=st.lists(st.integers(-50, 50), min_size=2, max_size=6),
       g=st.lists(st.integers(-9, 9), min_size=6, max_size=6))
def test_layer_norm_laws_hold_exactly_in_the_spec(x: list[int], g: list[int]) -> None:
    """Mean 0 exactly; x̄ sums to 0 exactly; x̄·y = r (ȳ·y)(1 - mean y²) exactly, r the
    row's carried 1/sqrt(σ² + ε); shifting x changes nothing, bit for bit."""
    xs, gs = np.array(x, dtype=np.float64) / 4, np.array(g[: len(x)], dtype=np.float64)
    exact = evaluate(norm_request("layer_norm", xs, gs))
    assert exact.output is not None and exact.grads is not None
    y, grad, n = exact.output, exact.grads["x"], len(x)
    assert sum(y) == 0 and sum(grad) == 0
    centred = as_fractions(xs) - sum(as_fractions(xs)) / n
    r = exact_rsqrt(sum(c * c for c in centred) / n + EPS)[0]
    assert sum(grad * y) == r * sum(as_fractions(gs) * y) * (1 - sum(y * y) / n)
    moved = evaluate(norm_request("layer_norm", xs + 3, gs))
    assert moved.output is not None and moved.grads is not None
    assert list(moved.output) == list(y) and list(moved.grads["x"]) == list(grad)


def test_mean_square_is_one_up_to_eps() -> None:
    """``mean y² = σ²/(σ² + ε)``, within the enclosure's 2**-190 of it."""
    xs = np.array([1.0, -2.0, 3.5, 0.5])
    for op in ("layer_norm", "rms_norm"):
        exact = evaluate(norm_request(op, xs, np.ones(4), Fraction(1, 16)))
        assert exact.output is not None
        x = as_fractions(xs)
        c = x - sum(x) / 4 if op == "layer_norm" else x
        v = sum(c * c) / 4
        assert abs(sum(exact.output ** 2) / 4 - v / (v + Fraction(1, 16))) < Fraction(1, 2**190)


def test_scaling_moves_into_eps_up_to_the_enclosures() -> None:
    xs = np.array([1.0, -2.0, 3.5])
    scaled = evaluate(norm_request("rms_norm", 4 * xs, np.ones(3), EPS))
    moved = evaluate(norm_request("rms_norm", xs, np.ones(3), EPS / 16))
    assert scaled.output is not None and moved.output is not None
    gap = max(abs(a - b) for a, b in zip(scaled.output, moved.output, strict=True))
    assert gap <= scaled.slack + moved.slack  # two enclosures of the same real value
