"""Hypothesis strategies for programs, shapes and values (shapes from hypothesis.extra.numpy).

Default values are sensible: inputs within ±8 (and either zero or at least 2**-10 in
magnitude), weights within ±1, α within ±2, at most
three blocks of width at most three, so even float16 neither overflows nor flushes to
zero on a path that matters. Under the ``extremes`` profile every element is drawn from
a mix of huge, tiny, subnormal and signed-zero values instead (see
:func:`properties.profiles.extremes_enabled`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import (
    array_shapes,
    arrays,
    broadcastable_shapes,
    mutually_broadcastable_shapes,
)

from properties.cases import Case, node
from properties.profiles import extremes_enabled
from spec.errors import Shape
from spec.ir import Input, Node, Program

__all__ = [
    "FAMILIES",
    "SMOOTH_FAMILIES",
    "alphas",
    "dyadic_arrays",
    "dyadics",
    "mismatched_shape_pairs",
    "residual_cases",
    "shapes",
    "values",
]

X_BOUND, W_BOUND = 8.0, 1.0
TINY = 2.0**-10
FAMILIES = ("linear", "relu", "scale", "tanh")  # F = xW, g·relu(x), a·x, tanh(x)
SMOOTH_FAMILIES = ("linear", "scale", "tanh")

_EXTREME = st.one_of(
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324]),
    st.floats(1e30, 1e300) | st.floats(-1e300, -1e30),
    st.floats(1e-300, 1e-30) | st.floats(-1e-30, -1e-300),
    st.floats(-2.2250738585072014e-308, 2.2250738585072014e-308, allow_subnormal=True),
)


def _flush_tiny(value: float) -> float:
    return 0.0 * value if abs(value) < TINY else value  # keeps the sign of zero


def elements(bound: float) -> st.SearchStrategy[float]:
    """Floats with ``TINY <= |v| <= bound`` or ±0, or extremes under that profile.

    Magnitudes below ``TINY = 2**-10`` become a zero of the same sign, so sensible runs
    never meet subnormals: backends that flush them to zero (XLA on CPU does) are judged
    on that only under the ``extremes`` profile.
    """
    sane = st.floats(-bound, bound, allow_nan=False, allow_infinity=False).map(_flush_tiny)
    return st.deferred(lambda: st.one_of(sane, _EXTREME) if extremes_enabled() else sane)


def shapes(min_dims: int = 0, max_dims: int = 3, max_side: int = 3) -> st.SearchStrategy[Shape]:
    """Array shapes including rank 0 and empty axes."""
    return array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=max_side)


def values(shape: Shape, bound: float = X_BOUND) -> st.SearchStrategy[np.ndarray]:
    """float64 arrays of ``shape``; the request rounds them to its dtype."""
    return arrays(np.float64, shape, elements=elements(bound))


def dyadics(bits: int = 5, low: int = -3, high: int = 2) -> st.SearchStrategy[float]:
    """Short dyadic rationals m·2^e (|m| < 2^bits): exact in every dtype, sums stay exact."""
    return st.builds(lambda m, e: float(Fraction(m) * Fraction(2) ** e),
                     st.integers(-(2**bits) + 1, 2**bits - 1), st.integers(low, high))


def dyadic_arrays(shape: Shape, bits: int = 5) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, shape, elements=dyadics(bits))


def alphas(low: int = -2, high: int = 2) -> st.SearchStrategy[Fraction]:
    """Residual scales: short dyadics (exact in every dtype) and small general fractions."""
    dyadic = st.builds(lambda m, e: Fraction(m, 2**e), st.integers(-16, 16), st.integers(0, 3))
    general = st.fractions(low, high, max_denominator=9)
    return st.one_of(dyadic, general).filter(lambda a: low <= a <= high)


def mismatched_shape_pairs() -> st.SearchStrategy[tuple[Shape, Shape]]:
    """Unequal shape pairs: about half broadcast under NumPy rules, half do not."""
    broadcastable = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                  min_side=0, max_side=3
                                                  ).map(lambda s: tuple(s.input_shapes))
    stretched = shapes(max_dims=3).flatmap(
        lambda s: st.tuples(st.just(s), broadcastable_shapes(s, min_dims=0, min_side=0)))
    anything = st.tuples(shapes(), shapes())
    pairs = st.one_of(broadcastable, stretched, anything)
    return pairs.filter(lambda p: p[0] != p[1])  # type: ignore[return-value]


class _Builder:
    """Collects inputs, their values and nodes while a strategy draws a program."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw
        self.inputs: list[Input] = []
        self.values: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []

    def input(self, name: str, shape: Shape, bound: float) -> str:
        self.inputs.append(Input(name, shape))
        self.values[name] = self.draw(values(shape, bound))
        return name

    def add(self, name: str, op: str, *args: str, alpha: Fraction | None = None) -> str:
        self.nodes.append(node(name, op, *args, alpha=alpha))
        return name

    def case(self, output: str, shape: Shape) -> Case:
        program = Program(tuple(self.inputs), tuple(self.nodes), output)
        return Case(program, dict(self.values), self.draw(values(shape, X_BOUND)))


def _branch(b: _Builder, layer: int, h: str, shape: Shape, family: str,
            projections: bool) -> tuple[str, str, Shape]:
    """One branch F(h) of the family; returns (shortcut, branch, output shape)."""
    if family == "linear":
        d = shape[-1]
        project = projections and b.draw(st.booleans())
        d_out = b.draw(st.integers(1, 3).filter(lambda n: n != d)) if project else d
        f = b.add(f"f{layer}", "linear", h, b.input(f"w{layer}", (d, d_out), W_BOUND))
        shortcut = h
        if d_out != d:  # width changes: the identity becomes an explicit projection
            shortcut = b.add(f"q{layer}", "linear", h, b.input(f"p{layer}", (d, d_out), W_BOUND))
        return shortcut, f, (*shape[:-1], d_out)
    if family == "relu":
        r = b.add(f"r{layer}", "relu", h)
        return h, b.add(f"f{layer}", "scale", r, alpha=b.draw(alphas())), shape
    if family == "scale":
        return h, b.add(f"f{layer}", "scale", h, alpha=b.draw(alphas())), shape
    return h, b.add(f"f{layer}", "tanh", h), shape


@st.composite
def residual_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                   families: Sequence[str] = FAMILIES, max_depth: int = 3,
                   projections: bool = True, allow_sum: bool = True) -> Case:
    """Stacks of ``h = residual_add(shortcut(h), scale(F(h), α))`` with generated F and α.

    The scale node of block ``l`` is named ``s{l}``, its merge ``h{l}``; rank-0 inputs
    only get elementwise branches (``linear`` needs an axis).
    """
    b = _Builder(draw)
    shape = draw(shapes())
    h = b.input("x", shape, X_BOUND)
    for layer in range(draw(st.integers(1, max_depth))):
        usable = [f for f in families if shape or f != "linear"]
        family = draw(st.sampled_from(usable))
        shortcut, f, shape = _branch(b, layer, h, shape, family, projections)
        s = b.add(f"s{layer}", "scale", f, alpha=draw(alphas()))
        h = b.add(f"h{layer}", "residual_add", shortcut, s)
    if allow_sum and draw(st.booleans()):
        h, shape = b.add("total", "sum", h), ()
    return b.case(h, shape)


def last_alpha_node(case: Case) -> str:
    """The scale node of the last block of a residual case (its α enters the output affinely)."""
    merges = [n for n in case.program.order if n.op == "residual_add"]
    return merges[-1].args[1]


@st.composite
def mismatch_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """``residual_add(a, b)`` for an unequal shape pair (no cotangent: the spec rejects it)."""
    left, right = draw(mismatched_shape_pairs())
    program = Program((Input("a", left), Input("b", right)),
                      (node("y", "residual_add", "a", "b"),), "y")
    return Case(program, {"a": draw(values(left)), "b": draw(values(right))}, None)


def mismatch_case(left: Shape, right: Shape) -> Case:
    """A pinned mismatch with unit values."""
    program = Program((Input("a", left), Input("b", right)),
                      (node("y", "residual_add", "a", "b"),), "y")
    return Case(program, {"a": np.ones(left), "b": np.ones(right)}, None)


def shared_program(shape: Shape, uses: int, factor: Fraction) -> Program:
    """x merged with itself ``uses`` times (a chain of residual_add), then scaled."""
    nodes, h = [], "x"
    for i in range(1, uses):
        nodes.append(node(f"h{i}", "residual_add", h, "x"))
        h = f"h{i}"
    nodes.append(node("y", "scale", h, alpha=factor))
    return Program((Input("x", shape),), tuple(nodes), "y")


@st.composite
def shared_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> tuple[Case, int]:
    """x used k = 2..6 times, short dyadic data and a power-of-two factor: k·ȳ is exact."""
    shape, uses = draw(shapes()), draw(st.integers(2, 6))
    factor = Fraction(2) ** draw(st.integers(-2, 2))
    program = shared_program(shape, uses, factor)
    return Case(program, {"x": draw(dyadic_arrays(shape))}, draw(dyadic_arrays(shape))), uses


@st.composite
def zero_branch_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """``residual_add(x, linear(x, w))`` with w = 0, x of rank >= 1."""
    shape = draw(shapes(min_dims=1, max_dims=2))
    d = shape[-1]
    program = Program((Input("x", shape), Input("w", (d, d))),
                      (node("f", "linear", "x", "w"), node("y", "residual_add", "x", "f")), "y")
    return Case(program, {"x": draw(values(shape)), "w": np.zeros((d, d))},
                draw(values(shape)))


@st.composite
def null_space_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """x W = 0 with W != 0: every column of W is k_j·r, r = (-x_1, x_0, 0, ...) ⟂ x.

    Small integers only, so every dtype computes exactly; ȳ is chosen with Σ k_j ȳ_j ≠ 0,
    which makes Wȳ ≠ 0 and so x̄ = ȳ + Wȳ ≠ ȳ.
    """
    d = draw(st.integers(2, 4))
    small = st.integers(-4, 4)
    x = np.array(draw(st.lists(small, min_size=d, max_size=d).filter(lambda v: v[0] or v[1])),
                 dtype=np.float64)
    pair = st.tuples(st.lists(st.integers(-2, 2), min_size=d, max_size=d),
                     st.lists(small, min_size=d, max_size=d))
    k_list, cot_list = draw(pair.filter(lambda p: np.dot(p[0], p[1]) != 0))
    k, cot = np.array(k_list, dtype=np.float64), np.array(cot_list, dtype=np.float64)
    r = np.zeros(d)
    r[0], r[1] = -x[1], x[0]
    program = Program((Input("x", (d,)), Input("w", (d, d))),
                      (node("f", "linear", "x", "w"), node("y", "residual_add", "x", "f")), "y")
    return Case(program, {"x": x, "w": np.outer(r, k)}, cot)


def zero_alphas(case: Case) -> Case:
    """The case with the α of every block set to 0."""
    for n in case.program.nodes:
        if n.op == "residual_add":
            case = case.with_alpha(n.args[1], Fraction(0))
    return case


def depth_factors(max_depth: int = 8) -> st.SearchStrategy[list[Fraction]]:
    """Per-layer branch factors a_l for F_l = a_l·x, 1..max_depth layers."""
    return st.lists(alphas(-2, 1), min_size=1, max_size=max_depth)


@st.composite
def scalar_branch_inputs(draw: Callable[[st.SearchStrategy[Any]], Any]
                         ) -> tuple[np.ndarray, np.ndarray]:
    """x and ȳ for the a·x depth laws: short dyadics of any shape (rank 0 included)."""
    shape = draw(shapes())
    return draw(dyadic_arrays(shape, bits=4)), draw(dyadic_arrays(shape, bits=4))


@st.composite
def sample_block_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """One block ``residual_add(x, scale(F(x), α))`` over a 1-D sample x of 2..32 values."""
    n = draw(st.integers(2, 32))
    b = _Builder(draw)
    h = b.input("x", (n,), X_BOUND)
    family = draw(st.sampled_from(("relu", "scale", "tanh")))
    shortcut, f, shape = _branch(b, 0, h, (n,), family, projections=False)
    s = b.add("s0", "scale", f, alpha=draw(alphas()))
    return b.case(b.add("h0", "residual_add", shortcut, s), shape)
