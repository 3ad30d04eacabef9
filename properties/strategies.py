"""Hypothesis strategies for programs, shapes and values (shapes from hypothesis.extra.numpy).

Claims. A strategy that builds programs takes ``ops``, the ops it may use; left at None
it uses the ops the backend under test claims (the plugin sets them with :func:`claiming`
for the duration of each property test). A backend that claims a subset of the ops so
gets every example of its profile, none generated and then thrown away.

Branch families F, one entry each in :data:`FAMILY_OPS`: ``linear`` (xW, with a
projection shortcut when the width changes), ``relu`` (g·relu(x)), ``scale`` (a·x),
``tanh``, ``gate`` (x ⊙ g, g a broadcast weight or tanh(x)), ``bias`` (x + b, b
broadcast) and ``silu`` (x ⊙ sigmoid(x)); each op declares the families it serves
(``Op.families``). Half the stacks repeat one family in every layer, so stacks of distinct
same-shaped weights are common.

Normalization (:func:`norm_stack_cases`): pre-norm blocks ``h + α·F(N(h))`` and post-norm
blocks ``N(h + α·F(h))``, stacked, with N one of :data:`NORMS` and ε from
:func:`epsilons`; projection shortcuts ``linear(x, P) + α·F(x)`` where F changes the
width (:func:`projection_cases`), and width-changing branches whose output plain ``+``
would broadcast (:func:`width_change_cases`).

Sizes (:class:`Sizes`). Most arrays are small (sides up to 3), but about a third of the
feature shapes have a wide last axis, up to ``max_width``, and linear layers follow it, so
code paths that switch on size are reached; a weight stays within ``max_weight`` elements
so the exact checks stay fast. Arrays of more than ``DRAWN_ELEMENTS`` elements are filled
by a NumPy generator seeded from Hypothesis (one draw) instead of element by element.

Values are drawn in the dtype of the test (``hypothesis.extra.numpy.from_dtype``;
bfloat16, which NumPy lacks, as float32 rounded by ml_dtypes) and held as float64, which
holds them exactly; the dtype and the value range are parameters, left at None to take
the ones the plugin sets with :func:`drawing` for each property test (float64 and
:data:`SENSIBLE` outside a test). Sensible values: inputs within ±8 (and either zero or
at least 2**-10 in magnitude), weights within ±1 (±4/d for d > 4 inputs, so a wide layer
at most quadruples its input), α within ±2, so even float16 neither overflows nor
flushes to zero on a path that matters. Cotangents are always dense random values
(:func:`cotangents`). With :data:`EXTREMES` (the plugin passes it under the ``extremes``
profile) every element comes from a mix of huge, tiny, subnormal and signed-zero values
of the dtype instead.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import (
    array_shapes,
    arrays,
    broadcastable_shapes,
    from_dtype,
    mutually_broadcastable_shapes,
)

from resverify.properties.cases import Case, node, numpy_dtype, round_to_dtype
from resverify.spec.errors import Shape, UsageError
from resverify.spec.ir import OPS, Input, Node, Program, broadcast_shapes
from resverify.spec.ops import OP_TABLE

__all__ = []

X_BOUND, W_BOUND = 8.0, 1.0
TINY = 2.0**-10
DRAWN_ELEMENTS = 64  # larger arrays come from a seeded NumPy generator
FAMILIES = ("linear", "relu", "scale", "tanh", "gate", "bias", "silu")
"""The branch families F :func:`_branch` builds: xW, g·relu(x), a·x, tanh(x), x ⊙ g (g a
broadcast weight, or tanh(x)), x + b (b broadcast) and x ⊙ σ(x) (SiLU: x used twice)."""
FAMILY_OPS: Mapping[str, frozenset[str]] = {
    family: frozenset(name for name, op in OP_TABLE.items() if family in op.families)
    for family in FAMILIES
}
"""The ops each branch family F uses (besides the block's own scale and residual_add): read
from the op entries, each of which declares the families it serves (``Op.families``)."""
SMOOTH_FAMILIES = tuple(f for f in FAMILIES if f != "relu")
NORMS = tuple(name for name, op in OP_TABLE.items() if op.norm)
PLACEMENTS = ("pre", "post")  # x + α·F(N(x)), N(x + α·F(x))


@dataclass(frozen=True)
class Sizes:
    """How large generated arrays get.

    ``max_width``: the widest last axis (inputs and linear layers); ``max_weight``: the
    most elements of one weight matrix; ``wide_percent``: how often a feature shape is
    wide (more than ``narrow`` on its last axis) rather than small.
    """

    max_width: int = 384
    max_weight: int = 2048
    wide_percent: int = 35
    narrow: int = 4


SIZES = Sizes()

_CLAIMED: ContextVar[frozenset[str]] = ContextVar("claimed_ops", default=frozenset(OPS))
_LEADING: ContextVar[str | None] = ContextVar("leading_family", default=None)


@contextmanager
def leading(family: str | None) -> Iterator[None]:
    """Within the block, :func:`residual_cases` begins every stack with ``family`` (when it
    is one of its families and usable) instead of drawing the first family: the plugin
    sets it for a law split into one test per family (the marker ``families``), so that
    each family gets its share of the examples whatever Hypothesis draws."""
    token = _LEADING.set(family)
    try:
        yield
    finally:
        _LEADING.reset(token)


@contextmanager
def claiming(ops: Collection[str]) -> Iterator[None]:
    """Within the block, strategies left at ``ops=None`` build programs from ``ops`` only."""
    token = _CLAIMED.set(frozenset(ops))
    try:
        yield
    finally:
        _CLAIMED.reset(token)


def claimed_ops(ops: Collection[str] | None = None) -> frozenset[str]:
    """``ops``, or when None the ops claimed by the backend under test (all outside a test)."""
    return _CLAIMED.get() if ops is None else frozenset(ops)


@dataclass(frozen=True)
class ValueRange:
    """Where element values come from: the sensible default range, or with ``extremes``
    a mix of huge, tiny, subnormal and signed-zero values of the dtype."""

    extremes: bool = False


SENSIBLE = ValueRange()
EXTREMES = ValueRange(extremes=True)

_DTYPE: ContextVar[str] = ContextVar("drawn_dtype", default="float64")
_RANGE: ContextVar[ValueRange] = ContextVar("drawn_range", default=SENSIBLE)


@contextmanager
def drawing(dtype: str, value_range: ValueRange = SENSIBLE) -> Iterator[None]:
    """Within the block, strategies left at ``dtype=None`` / ``value_range=None`` draw
    values of ``dtype`` from ``value_range``."""
    tokens = _DTYPE.set(dtype), _RANGE.set(value_range)
    try:
        yield
    finally:
        _DTYPE.reset(tokens[0])
        _RANGE.reset(tokens[1])


def drawn_dtype(dtype: str | None = None) -> str:
    """``dtype``, or when None the dtype of the property test running (float64 outside)."""
    return _DTYPE.get() if dtype is None else dtype


def drawn_range(value_range: ValueRange | None = None) -> ValueRange:
    """``value_range``, or when None the one the plugin set (:data:`SENSIBLE` outside a test)."""
    return _RANGE.get() if value_range is None else value_range


def _flush_tiny(value: float) -> float:
    return 0.0 * value if abs(value) < TINY else value  # keeps the sign of zero


def _floats(dtype: str, low: float | None = None, high: float | None = None,
            subnormal: bool | None = None) -> st.SearchStrategy[float]:
    """Finite values of ``dtype`` within [low, high] (bounds of that dtype), as floats:
    ``from_dtype``, and for bfloat16 float32 values rounded by ml_dtypes (the bounds of a
    bfloat16 are float32 values too, and rounding to nearest stays within them)."""
    drawn = "float32" if dtype == "bfloat16" else dtype
    floats = from_dtype(np.dtype(drawn), min_value=low, max_value=high, allow_nan=False,
                        allow_infinity=False, allow_subnormal=subnormal)
    if dtype == "bfloat16":
        return floats.map(lambda v: float(round_to_dtype(v, "bfloat16")))
    return floats.map(float)


@functools.cache
def _inward(bound: float, dtype: str) -> float:
    """The largest value of ``dtype`` at most ``bound`` (bound > 0)."""
    near = float(round_to_dtype(bound, dtype))
    if near <= bound:
        return near
    return float(round_to_dtype(near * (1 - float(ml_dtypes.finfo(numpy_dtype(dtype)).eps)), dtype))


def _extremes(dtype: str) -> st.SearchStrategy[float]:
    """Signed zeros and the smallest subnormals, huge values (from 2**(maxexp/2), whose
    squares overflow, to the largest), tiny normal ones and subnormals, all of ``dtype``."""
    info = ml_dtypes.finfo(numpy_dtype(dtype))
    least, normal, most = (float(info.smallest_subnormal), float(info.smallest_normal),
                           float(info.max))
    huge, tiny = 2.0 ** (info.maxexp // 2), 2.0 ** (info.minexp // 2)
    return st.one_of(
        st.sampled_from([0.0, -0.0, least, -least]),
        _floats(dtype, huge, most) | _floats(dtype, -most, -huge),
        _floats(dtype, normal, tiny) | _floats(dtype, -tiny, -normal),
        _floats(dtype, -normal, normal, subnormal=True),
    )


def elements(bound: float, dtype: str | None = None,
             value_range: ValueRange | None = None) -> st.SearchStrategy[float]:
    """Values of the dtype with ``TINY <= |v| <= bound`` or ±0, or extremes with
    :data:`EXTREMES` (both None: the test's dtype and the plugin's range).

    Magnitudes below ``TINY = 2**-10`` become a zero of the same sign, so sensible runs
    never meet subnormals: backends that flush them to zero (XLA on CPU does) are judged
    on that only with :data:`EXTREMES`.
    """
    return _elements(bound, drawn_dtype(dtype), drawn_range(value_range))


@functools.cache  # strategies are immutable: one (validated) strategy per set of arguments
def _elements(bound: float, dtype: str, value_range: ValueRange) -> st.SearchStrategy[float]:
    sane = _floats(dtype, -_inward(bound, dtype), _inward(bound, dtype)).map(_flush_tiny)
    return st.one_of(sane, _extremes(dtype)) if value_range.extremes else sane


def shapes(min_dims: int = 0, max_dims: int = 3, max_side: int = 3) -> st.SearchStrategy[Shape]:
    """Array shapes including rank 0 and empty axes."""
    return array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=max_side)


def values(shape: Shape, bound: float = X_BOUND, dtype: str | None = None,
           value_range: ValueRange | None = None) -> st.SearchStrategy[np.ndarray]:
    """float64 arrays of ``shape`` holding values of ``dtype`` (None: the test's dtype).

    Up to ``DRAWN_ELEMENTS`` elements Hypothesis draws (and shrinks) each one on its own,
    never filling the array with one repeated value; larger arrays come from
    :func:`seeded_values` with a drawn seed. The dtype and range are read when the
    strategy is built, so a strategy made inside :func:`drawing` keeps them.
    """
    kind, chosen = drawn_dtype(dtype), drawn_range(value_range)
    if math.prod(shape) <= DRAWN_ELEMENTS:
        return arrays(np.float64, shape, elements=elements(bound, kind, chosen),
                      fill=st.nothing())
    return st.integers(0, 2**32 - 1).map(
        lambda seed: seeded_values(shape, bound, seed, kind, chosen))


def cotangents(shape: Shape, bound: float = X_BOUND, dtype: str | None = None,
               value_range: ValueRange | None = None) -> st.SearchStrategy[np.ndarray]:
    """Output cotangents: always dense random values (:func:`seeded_values`).

    Element by element, Hypothesis often draws all zeros or one repeated value, which
    checks no gradient at all or hides one summed over the wrong axes.
    """
    kind, chosen = drawn_dtype(dtype), drawn_range(value_range)
    return st.integers(0, 2**32 - 1).map(
        lambda seed: seeded_values(shape, bound, seed, kind, chosen))


@st.composite
def with_tangents(draw: Callable[[st.SearchStrategy[Any]], Any],
                  cases: st.SearchStrategy[Case]) -> Case:
    """A case of ``cases`` made forward-mode: one dense random tangent per input.

    Each tangent is drawn like a cotangent (:func:`cotangents`: dense, so a tangent taken
    from the wrong input or along the wrong axis shows) on the scale of its input's own
    values (a weight's tangent as small as the weight; 1 for an all-zero input).
    """
    case = draw(cases)
    return case.with_tangents(**{
        i.name: draw(cotangents(i.shape, _scale(case.values[i.name])))
        for i in case.program.inputs})


def _scale(values: np.ndarray) -> float:
    """The largest magnitude in ``values``, or 1 when they are all zero (or empty)."""
    return float(np.max(np.abs(values), initial=0.0)) or 1.0


def seeded_values(shape: Shape, bound: float, seed: int, dtype: str = "float64",
                  value_range: ValueRange = SENSIBLE) -> np.ndarray:
    """Dense values of ``dtype`` like :func:`elements` draws, from a NumPy generator
    seeded by ``seed``, cast to the dtype by NumPy (ml_dtypes for bfloat16).

    Uniform within ±bound with magnitudes below ``TINY`` flushed to a signed zero; with
    :data:`EXTREMES` log-uniform over every binade of the dtype (subnormals included)
    with one zero in ten.
    """
    rng = np.random.default_rng(seed)
    if value_range.extremes:
        info = ml_dtypes.finfo(numpy_dtype(dtype))
        exponents = rng.integers(info.minexp - info.nmant - 1, info.maxexp - 1, shape)
        magnitude = np.ldexp(rng.uniform(1.0, 2.0, shape), exponents)
        signed = magnitude * rng.choice([-1.0, 1.0], shape)
        drawn = np.where(rng.random(shape) < 0.1, 0.0 * signed, signed)
        return round_to_dtype(drawn, dtype).astype(np.float64)
    limit = _inward(bound, dtype)
    drawn = round_to_dtype(rng.uniform(-limit, limit, shape), dtype).astype(np.float64)
    return np.where(np.abs(drawn) < TINY, 0.0 * drawn, drawn)


def linear_bound(d_in: int) -> float:
    """Weights of a ``d_in``-wide linear layer lie within ±W_BOUND·min(1, 4/d_in)."""
    return W_BOUND * min(1.0, 4.0 / max(d_in, 1))


@st.composite
def feature_shapes(draw: Callable[[st.SearchStrategy[Any]], Any], sizes: Sizes = SIZES,
                   min_dims: int = 0, max_dims: int = 3) -> Shape:
    """Small shapes (rank ``min_dims``..``max_dims``, sides 1..3), or in ``wide_percent``
    of draws ``(d,)`` or ``(k, d)`` with ``narrow < d <= max_width`` and ``k <= 2``; of the
    rest, one in twelve is rank 0 (when ``min_dims`` is 0) and one in twelve is empty (a
    side of 0). The simplest shape is a small non-empty one: empty and rank-0 arrays are
    corners, and the simplest example of a law should be one that judges something."""
    wide = draw(st.integers(0, 99)) >= 100 - sizes.wide_percent
    if wide and sizes.max_width > sizes.narrow and max_dims >= 1:
        lead = draw(array_shapes(min_dims=max(0, min_dims - 1), max_dims=min(1, max_dims - 1),
                                 min_side=1, max_side=2))
        return (*lead, draw(st.integers(sizes.narrow + 1, sizes.max_width)))
    corner = draw(st.integers(0, 11))
    if corner == 10 and min_dims == 0:
        return ()
    shape = draw(array_shapes(min_dims=max(min_dims, 1), max_dims=max_dims, min_side=1,
                              max_side=3))
    if corner == 11:
        axis = draw(st.integers(0, len(shape) - 1))
        return (*shape[:axis], 0, *shape[axis + 1:])
    return shape


def _out_width(draw: Callable[[st.SearchStrategy[Any]], Any], d_in: int, most: int,
               sizes: Sizes) -> int:
    """A new width ``!= d_in`` within ``1..most``: small, or wide in ``wide_percent`` of draws."""
    wide = draw(st.integers(0, 99)) >= 100 - sizes.wide_percent
    low, high = (sizes.narrow + 1, most) if wide and most > sizes.narrow else (1, min(3, most))
    return int(draw(st.integers(low, high).filter(lambda n: n != d_in)))


def _operand_shape(draw: Callable[[st.SearchStrategy[Any]], Any], shape: Shape) -> Shape:
    """A shape that NumPy broadcasts up to ``shape``: rank 0 in one draw in five, else its
    last k >= 1 axes (simplest: the last one, as for a bias), some of them set to 1."""
    if not shape or draw(st.integers(0, 4)) == 4:
        return ()
    keep = 1 + draw(st.integers(0, len(shape) - 1))
    return tuple(1 if draw(st.booleans()) else n for n in shape[len(shape) - keep:])


def dyadics(bits: int = 5, low: int = -3, high: int = 2) -> st.SearchStrategy[float]:
    """Short dyadic rationals m·2^e (|m| < 2^bits): exact in every dtype, sums stay exact."""
    return st.builds(lambda m, e: float(Fraction(m) * Fraction(2) ** e),
                     st.integers(-(2**bits) + 1, 2**bits - 1), st.integers(low, high))


def dyadic_arrays(shape: Shape, bits: int = 5) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, shape, elements=dyadics(bits))


INEXACT_DENOMINATORS = (3, 5, 6, 7, 9)  # α = m/d with these: a value of no binary float


def alphas(low: int = -2, high: int = 2, zero: bool = True) -> st.SearchStrategy[Fraction]:
    """Residual scales within ``[low, high]``, by class, each about as often as the others
    (Hypothesis picks a branch of ``one_of`` about evenly): non-zero short dyadics (exact
    in every dtype), non-zero fractions with denominator 3, 5, 6, 7 or 9 (exact in none, so
    the request rounds them and the budget must allow for it) and, with ``zero``, 0.

    Drawn as a sign and a magnitude rather than as one integer, which Hypothesis would
    draw as 0 far more often than any other value."""
    sign = st.sampled_from((1, -1))
    dyadic = st.builds(lambda s, m, e: s * Fraction(m, 2**e), sign, st.integers(1, 16),
                       st.integers(0, 3))
    inexact = st.builds(lambda s, m, d: s * Fraction(m, d), sign, st.integers(1, 2 * 9),
                        st.sampled_from(INEXACT_DENOMINATORS)).filter(
        lambda a: a.denominator & (a.denominator - 1) != 0)
    classes = [dyadic, inexact, *([st.just(Fraction(0))] if zero else [])]
    return st.one_of(classes).filter(lambda a: low <= a <= high)


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

    def norm(self, name: str, op: str, arg: str, eps: Fraction) -> str:
        self.nodes.append(Node(name, op, (arg,), eps=eps))
        return name

    def either_order(self, name: str, op: str, left: str, right: str) -> str:
        """``op(left, right)`` or ``op(right, left)``: both operand positions get exercised."""
        first, second = (left, right) if self.draw(st.booleans()) else (right, left)
        return self.add(name, op, first, second)

    def case(self, output: str, shape: Shape) -> Case:
        program = Program(tuple(self.inputs), tuple(self.nodes), output)
        return Case(program, dict(self.values), self.draw(cotangents(shape)))


def _usable(family: str, shape: Shape, ops: frozenset[str], sizes: Sizes,
            projections: bool) -> bool:
    """Whether ``family`` can branch off ``shape`` using ``ops`` within ``sizes``."""
    if not FAMILY_OPS[family] <= ops:
        return False
    if family == "linear":  # needs an axis; a square weight within max_weight, or a projection
        return bool(shape) and (shape[-1] ** 2 <= sizes.max_weight or projections)
    return True


def _linear(b: _Builder, layer: int, h: str, shape: Shape, sizes: Sizes,
            project: bool) -> tuple[str, str, Shape]:
    d = shape[-1]
    d_out = d
    if project or d * d > sizes.max_weight:
        d_out = _out_width(b.draw, d, min(sizes.max_width, sizes.max_weight // max(d, 1)), sizes)
    bound = linear_bound(d)
    f = b.add(f"f{layer}", "linear", h, b.input(f"w{layer}", (d, d_out), bound))
    shortcut = h
    if d_out != d:  # width changes: the identity becomes an explicit projection
        shortcut = b.add(f"q{layer}", "linear", h, b.input(f"p{layer}", (d, d_out), bound))
    return shortcut, f, (*shape[:-1], d_out)


def _branch(b: _Builder, layer: int, h: str, shape: Shape, family: str, ops: frozenset[str],
            sizes: Sizes, project: bool) -> tuple[str, str, Shape]:
    """One branch F(h) of the family; returns (shortcut, branch, output shape)."""
    if family == "linear":
        return _linear(b, layer, h, shape, sizes, project)
    if family == "relu":
        r = b.add(f"r{layer}", "relu", h)
        return h, b.add(f"f{layer}", "scale", r, alpha=b.draw(alphas())), shape
    if family == "scale":
        return h, b.add(f"f{layer}", "scale", h, alpha=b.draw(alphas())), shape
    if family == "tanh":
        return h, b.add(f"f{layer}", "tanh", h), shape
    if family == "gate":
        if "tanh" in ops and b.draw(st.booleans()):
            gate = b.add(f"t{layer}", "tanh", h)  # F = x·tanh(x): x used twice
        else:
            gate = b.input(f"g{layer}", _operand_shape(b.draw, shape), W_BOUND)
        return h, b.either_order(f"f{layer}", "mul", h, gate), shape
    if family == "silu":
        gate = b.add(f"t{layer}", "sigmoid", h)
        return h, b.either_order(f"f{layer}", "mul", h, gate), shape
    bias = b.input(f"b{layer}", _operand_shape(b.draw, shape), W_BOUND)
    return h, b.either_order(f"f{layer}", "add", h, bias), shape


def _families(families: Sequence[str], shape: Shape, ops: frozenset[str], sizes: Sizes,
              projections: bool) -> list[str]:
    usable = [f for f in families if _usable(f, shape, ops, sizes, projections)]
    if not usable:
        raise UsageError(f"no branch family of {list(families)} can be built from ops "
                         f"{sorted(ops)} on shape {list(shape)}")
    return usable


def _next_family(order: Sequence[str], last: str, usable: Collection[str]) -> str:
    """The first usable family after ``last`` in ``order``, going round (from the start of
    ``order`` when ``last`` is none of it: the drawn first family)."""
    start = order.index(last) + 1 if last in order else 0
    return next(f for f in (*order[start:], *order[:start]) if f in usable)


def _require(ops: frozenset[str], *needed: str) -> None:
    missing = sorted(set(needed) - ops)
    if missing:
        raise UsageError(f"residual blocks need op(s) {missing}; the ops given are {sorted(ops)}")


@st.composite
def residual_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                   families: Sequence[str] = FAMILIES, max_depth: int = 3,
                   projections: bool = True, allow_sum: bool = True,
                   ops: Collection[str] | None = None, sizes: Sizes = SIZES) -> Case:
    """Stacks of ``h = residual_add(shortcut(h), scale(F(h), α))`` with generated F and α.

    Only ``ops`` are used (None: the ops the backend under test claims); ``residual_add``
    and ``scale`` must be among them. Half the stacks repeat one family in every layer
    without projections, so same-shaped weights of distinct values are common; the
    others take the families in turn from a drawn one (``families`` read as a ring), so
    a stack of depth d meets d distinct families and every family is as likely as any
    other (Hypothesis draws ``sampled_from`` about evenly, where a drawn permutation
    stays near the identity for the first few hundred examples); a wide input's
    first branch is linear whenever linear can be used (the op that sums over its width),
    unless :func:`leading` gives the first family. Every block's α is non-zero
    (exact or not in the dtype, :func:`alphas`): a zero α leaves its branch unjudged, and
    the zero-branch laws have strategies of their own. The scale node of block ``l`` is
    named ``s{l}``, its merge ``h{l}``; rank-0 inputs only get elementwise branches
    (``linear`` needs an axis).

    The first family is given by :func:`leading` when a law is split by family; else it
    is the strategy's first choice, on purpose: Hypothesis begins a run with examples that
    vary a short prefix of the choices and make every later one its simplest, so what is
    drawn first is what the first examples of a short run differ in.
    """
    allowed = claimed_ops(ops)
    _require(allowed, "residual_add", "scale")
    lead = _LEADING.get()  # the family of this test's share (leading), else drawn first
    first = lead if lead in families else draw(st.sampled_from(families))
    order = (*families[families.index(first):], *families[:families.index(first)])
    b = _Builder(draw)
    shape = draw(feature_shapes(sizes, min_dims=1 if lead == "linear" else 0))
    h = b.input("x", shape, X_BOUND)
    repeat, family = draw(st.booleans()), ""
    wide_first = lead not in families and shape[-1:] > (sizes.narrow,)  # else: lead first
    depth = draw(st.integers(min(2, max_depth), max_depth))
    for layer in range(depth):
        usable = _families(families, shape, allowed, sizes, projections)
        if layer == 0 and wide_first and "linear" in usable:
            family = "linear"  # a wide input meets the op that sums over its width first
        elif not repeat or family not in usable:
            family = _next_family(order, family, usable)
        project = projections and not repeat and draw(st.integers(0, 3)) == 0
        shortcut, f, shape = _branch(b, layer, h, shape, family, allowed, sizes, project)
        s = b.add(f"s{layer}", "scale", f, alpha=draw(alphas(zero=False)))
        h = b.add(f"h{layer}", "residual_add", shortcut, s)
    if allow_sum and "sum" in allowed and draw(st.booleans()):
        h, shape = b.add("total", "sum", h), ()
    return b.case(h, shape)


BROADCASTS = ("rows", "outer", "mixed", "columns", "scalar")  # the simplest first: a bias


@st.composite
def broadcast_pairs(draw: Callable[[st.SearchStrategy[Any]], Any], max_dims: int = 3,
                    max_side: int = 4) -> tuple[Shape, Shape]:
    """Two shapes that broadcast together, one of the ways NumPy allows (in either order).

    From a full shape of rank 2..max_dims and sides 2..max_side: ``rows`` broadcasts a
    trailing part of it along the leading axes (a bias), ``columns`` stretches axes of
    size 1 at the end, ``outer`` stretches one axis in each operand, ``scalar`` is a
    rank-0 or all-ones operand, ``mixed`` drops and stretches axes at random.
    """
    if max_dims < 2:
        raise UsageError(f"broadcast_pairs needs max_dims >= 2, got {max_dims}")
    rank = draw(st.integers(2, max_dims))
    full = tuple(draw(st.integers(2, max_side)) for _ in range(rank))
    kind = draw(st.sampled_from(BROADCASTS))
    other: Shape
    if kind == "rows":
        other = full[draw(st.integers(1, rank - 1)):]
    elif kind == "columns":
        keep = draw(st.integers(0, rank - 1))
        other = full[:keep] + (1,) * (rank - keep)
    elif kind == "outer":
        i, j = draw(st.integers(0, rank - 1)), draw(st.integers(0, rank - 1))
        one = tuple(1 if n == i else side for n, side in enumerate(full))
        other = tuple(1 if n == j else side for n, side in enumerate(full))
        full = one
    elif kind == "scalar":
        other = (1,) * draw(st.integers(0, rank))
    else:
        full, other = _operand_shape(draw, full), _operand_shape(draw, full)
    return (full, other) if draw(st.booleans()) else (other, full)


@st.composite
def broadcast_cases(draw: Callable[[st.SearchStrategy[Any]], Any], op: str,
                    max_dims: int = 3, max_side: int = 4) -> Case:
    """``op(a, b)`` (add or mul) over a :func:`broadcast_pairs` pair, random cotangent.

    Each operand's gradient is the cotangent summed over exactly the axes it was
    broadcast along; a random cotangent tells those axes from any others.
    """
    left, right = draw(broadcast_pairs(max_dims, max_side))
    out = broadcast_shapes(op, left, right)
    return merge_case(op, draw(values(left)), draw(values(right)), draw(cotangents(out)))


def merge_case(op: str, left: np.ndarray, right: np.ndarray,
               cotangent: np.ndarray | None) -> Case:
    """``op(a, b)`` over the two given arrays."""
    a, b = np.asarray(left, dtype=np.float64), np.asarray(right, dtype=np.float64)
    program = Program((Input("a", a.shape), Input("b", b.shape)), (node("y", op, "a", "b"),), "y")
    return Case(program, {"a": a, "b": b}, cotangent)


def last_alpha_node(case: Case) -> str:
    """The scale node of the last block of a residual case (its α enters the output affinely)."""
    merges = [n for n in case.program.order if n.op == "residual_add"]
    return merges[-1].args[1]


@st.composite
def mismatch_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """``residual_add(a, b)`` for an unequal shape pair (no cotangent: the spec rejects it)."""
    left, right = draw(mismatched_shape_pairs())
    return merge_case("residual_add", draw(values(left)), draw(values(right)), None)


def mismatch_case(left: Shape, right: Shape) -> Case:
    """A pinned mismatch with unit values."""
    return merge_case("residual_add", np.ones(left), np.ones(right), None)


def _factorizations(size: int, rank: int) -> list[Shape]:
    """Every shape of ``rank`` axes (sides >= 1) holding ``size`` elements."""
    if rank == 1:
        return [(size,)]
    return [(d, *rest) for d in range(1, size + 1) if size % d == 0
            for rest in _factorizations(size // d, rank - 1)]


@st.composite
def equal_size_pairs(draw: st.DrawFn) -> tuple[Shape, Shape]:
    """Two unequal shapes of the same size: the axes reversed (a transposed layout, NCHW
    against NHWC), permuted, or refactored (a reshape). Which of the three is the first
    choice, so the first examples of a short run meet each of them."""
    kind = draw(st.sampled_from(("reversed", "permuted", "refactored")))
    sides = st.lists(st.integers(1, 4), min_size=2 if kind == "reversed" else 1, max_size=3)
    left: Shape = tuple(draw(sides.filter(lambda s: kind != "reversed" or s != s[::-1])))
    if kind == "reversed":
        return left, left[::-1]
    moved = tuple(draw(st.permutations(left))) if kind == "permuted" else left
    refactored = _factorizations(math.prod(left), draw(st.integers(1, 3)))
    candidates = [s for s in [moved, *refactored] if s != left]
    if not candidates:
        return left, (*left, 1)  # a single element or one axis: add an axis of size 1
    return left, draw(st.sampled_from(candidates))


@st.composite
def equal_size_mismatch_cases(draw: st.DrawFn) -> Case:
    """``residual_add(a, b)`` over an :func:`equal_size_pairs` pair, random values."""
    left, right = draw(equal_size_pairs())
    return merge_case("residual_add", draw(values(left)), draw(values(right)), None)


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
def zero_branch_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                      sizes: Sizes = SIZES) -> Case:
    """``residual_add(x, linear(x, w))`` with w = 0, x of rank >= 1, w within max_weight."""
    square = dataclasses.replace(sizes, max_width=min(sizes.max_width,
                                                      math.isqrt(sizes.max_weight)))
    shape = draw(feature_shapes(square, min_dims=1, max_dims=2))
    d = shape[-1]
    program = Program((Input("x", shape), Input("w", (d, d))),
                      (node("f", "linear", "x", "w"), node("y", "residual_add", "x", "f")), "y")
    return Case(program, {"x": draw(values(shape)), "w": np.zeros((d, d))},
                draw(cotangents(shape)))


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
def sample_block_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                       ops: Collection[str] | None = None, max_samples: int = 32) -> Case:
    """One block ``residual_add(x, scale(F(x), α))`` over a 1-D sample x of 2..max_samples
    values, F elementwise and built from ``ops`` (None: the backend's claims)."""
    allowed = claimed_ops(ops)
    _require(allowed, "residual_add", "scale")
    n = draw(st.integers(2, max_samples))
    b = _Builder(draw)
    h = b.input("x", (n,), X_BOUND)
    elementwise = [f for f in FAMILIES if f != "linear"]
    family = draw(st.sampled_from(_families(elementwise, (n,), allowed, SIZES, False)))
    shortcut, f, shape = _branch(b, 0, h, (n,), family, allowed, SIZES, project=False)
    s = b.add("s0", "scale", f, alpha=draw(alphas()))
    return b.case(b.add("h0", "residual_add", shortcut, s), shape)


# ----------------------------------------------------------------------------------------
# normalization: pre-norm and post-norm streams, projection shortcuts


def epsilons() -> st.SearchStrategy[Fraction]:
    """ε of a norm: PyTorch's 1e-5, 1e-6 (common in RMSNorm), and two powers of two."""
    return st.sampled_from([Fraction(1, 10**5), Fraction(1, 10**6), Fraction(1, 2**10),
                            Fraction(1, 2**4)])


def _norms(ops: frozenset[str]) -> list[str]:
    norms = [n for n in NORMS if n in ops]
    if not norms:
        raise UsageError(f"norm blocks need layer_norm or rms_norm; the ops given are "
                         f"{sorted(ops)}")
    return norms


@st.composite
def norm_stack_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                     placement: str | None = None, max_depth: int = 3,
                     families: Sequence[str] = FAMILIES, ops: Collection[str] | None = None,
                     sizes: Sizes = SIZES) -> Case:
    """Stacks of pre-norm blocks ``h = residual_add(h, scale(F(N(h)), α))`` or post-norm
    blocks ``h = N(residual_add(h, scale(F(h), α)))`` (``placement`` "pre" or "post",
    None: either), one norm N of the claimed ones and one ε per stack.

    x has rank >= 1 (a norm needs an axis); branches keep the width (no projections), so
    a linear branch's weight is square within ``max_weight``. Block ``l`` names its
    norm ``n{l}``, its scale ``s{l}`` and its merge ``h{l}``.
    """
    allowed = claimed_ops(ops)
    _require(allowed, "residual_add", "scale")
    norm = draw(st.sampled_from(_norms(allowed)))
    eps = draw(epsilons())
    where = placement or draw(st.sampled_from(PLACEMENTS))
    square = dataclasses.replace(sizes, max_width=min(sizes.max_width,
                                                      math.isqrt(sizes.max_weight)))
    b = _Builder(draw)
    shape = draw(feature_shapes(square, min_dims=1))
    h = b.input("x", shape, X_BOUND)
    for layer in range(draw(st.integers(1, max_depth))):
        family = draw(st.sampled_from(_families(families, shape, allowed, square, False)))
        into = b.norm(f"n{layer}", norm, h, eps) if where == "pre" else h
        _, f, _ = _branch(b, layer, into, shape, family, allowed, square, project=False)
        s = b.add(f"s{layer}", "scale", f, alpha=draw(alphas()))
        h = b.add(f"h{layer}", "residual_add", h, s)
        if where == "post":
            h = b.norm(f"n{layer}", norm, h, eps)
    return b.case(h, shape)


@st.composite
def norm_cases(draw: Callable[[st.SearchStrategy[Any]], Any], ops: Collection[str] | None = None,
               sizes: Sizes = SIZES) -> Case:
    """One norm ``y = N(x)`` over x of rank 1..3 with a last axis of at least 2 (where the
    mean and the scale are not trivial), ε from :func:`epsilons`."""
    norm = draw(st.sampled_from(_norms(claimed_ops(ops))))
    lead = draw(shapes(min_dims=0, max_dims=2))
    width = draw(st.integers(2, sizes.max_width) if draw(st.booleans()) else st.integers(2, 4))
    shape = (*lead, width)
    b = _Builder(draw)
    y = b.norm("y", norm, b.input("x", shape, X_BOUND), draw(epsilons()))
    return b.case(y, shape)


@st.composite
def projection_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                     ops: Collection[str] | None = None, sizes: Sizes = SIZES) -> Case:
    """``residual_add(linear(x, P), scale(F(x), α))`` with F changing the width d -> k
    (``linear(x, W)``, then tanh, relu or nothing as claimed), so the shortcut is the
    projection P of shape (d, k). Inputs ``x``, ``p``, ``w``; the merge is ``y``."""
    allowed = claimed_ops(ops)
    _require(allowed, "residual_add", "scale", "linear")
    b = _Builder(draw)
    shape = draw(feature_shapes(sizes, min_dims=1, max_dims=2).filter(lambda s: s[-1] > 0))
    d = shape[-1]
    k = _out_width(draw, d, min(sizes.max_width, sizes.max_weight // d), sizes)
    x = b.input("x", shape, X_BOUND)
    q = b.add("q", "linear", x, b.input("p", (d, k), linear_bound(d)))
    f = b.add("f", "linear", x, b.input("w", (d, k), linear_bound(d)))
    after = draw(st.sampled_from([op for op in ("tanh", "relu") if op in allowed] + [""]))
    if after:
        f = b.add("g", after, f)
    s = b.add("s", "scale", f, alpha=draw(alphas()))
    return b.case(b.add("y", "residual_add", q, s), (*shape[:-1], k))


@st.composite
def width_change_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Case:
    """``residual_add(x, linear(x, W))`` where W changes the last axis d -> k with
    ``d == 1`` or ``k == 1``, so that plain ``x + F(x)`` would broadcast to width
    ``max(d, k)``; no cotangent (the spec refuses the merge)."""
    lead = draw(shapes(min_dims=0, max_dims=2, max_side=3))
    d, k = draw(st.sampled_from([(1, 2), (1, 3), (2, 1), (3, 1), (4, 1)]))
    b = _Builder(draw)
    x = b.input("x", (*lead, d), X_BOUND)
    f = b.add("f", "linear", x, b.input("w", (d, k), W_BOUND))
    program = Program(tuple(b.inputs), (*b.nodes, node("y", "residual_add", x, f)), "y")
    return Case(program, dict(b.values), None)


def norm_block_case(placement: str, op: str, x: np.ndarray, w: np.ndarray, alpha: Fraction,
                    eps: Fraction = Fraction(1, 10**5), depth: int = 1) -> Case:
    """A pinned stack of ``depth`` pre-norm or post-norm blocks with the linear branch
    ``linear(·, w)`` (one shared weight), cotangent 1, 2, ... (distinct along the row)."""
    x = np.asarray(x, dtype=np.float64)
    nodes, h = [], "x"
    for layer in range(depth):
        into = h
        if placement == "pre":
            nodes.append(Node(f"n{layer}", op, (h,), eps=eps))
            into = f"n{layer}"
        nodes += [node(f"f{layer}", "linear", into, "w"),
                  node(f"s{layer}", "scale", f"f{layer}", alpha=alpha),
                  node(f"h{layer}", "residual_add", h, f"s{layer}")]
        h = f"h{layer}"
        if placement == "post":
            nodes.append(Node(f"n{layer}", op, (h,), eps=eps))
            h = f"n{layer}"
    program = Program((Input("x", x.shape), Input("w", np.shape(w))), tuple(nodes), h)
    cot = (1 + np.arange(x.size, dtype=np.float64)).reshape(x.shape)
    return Case(program, {"x": x, "w": np.asarray(w, dtype=np.float64)}, cot)


def single_norm_case(op: str, x: np.ndarray, eps: Fraction = Fraction(1, 10**5)) -> Case:
    """A pinned ``op(x, eps)`` with cotangent 1, 2, ... (distinct along the row)."""
    x = np.asarray(x, dtype=np.float64)
    program = Program((Input("x", x.shape),), (Node("y", op, ("x",), eps=eps),), "y")
    return Case(program, {"x": x}, (1 + np.arange(x.size, dtype=np.float64)).reshape(x.shape))


SHIFT_BITS = {"float64": 15, "float32": 15, "float16": 10, "bfloat16": 7}


@st.composite
def shifted_norm_cases(draw: Callable[[st.SearchStrategy[Any]], Any]
                       ) -> tuple[Case, Fraction]:
    """``layer_norm(x)`` and an integer shift t, |t| <= 8, with x + t exact in the test's
    dtype: x = k·2^(5-b), |k| < 2^(b-1), b = :data:`SHIFT_BITS` of the dtype, so |x + t| < 32
    needs at most b significant bits. The squares need more, so a one-pass variance rounds."""
    bits = SHIFT_BITS[drawn_dtype()]
    width = draw(st.integers(2, 6))
    lead = draw(shapes(min_dims=0, max_dims=1, max_side=2))
    step, top = 2.0 ** (5 - bits), 2 ** (bits - 1) - 1
    x = draw(arrays(np.int64, (*lead, width), elements=st.integers(-top, top))) * step
    case = single_norm_case("layer_norm", x, draw(epsilons()))
    return case, Fraction(draw(st.integers(-8, 8).filter(bool)))


# The hardest inputs of the oracle's law (properties/test_oracle.py): relu near its kink,
# and stacks whose blocks all share one branch family.

# m·2^e with |m| < 8 and -10 <= e <= -5: within 1/4 of zero, exact in every dtype
_NEAR_ZERO = st.builds(lambda m, e: m * 2.0**e, st.integers(-7, 7), st.integers(-10, -5))


def relu_block(x: np.ndarray, alpha: Fraction, cotangent: np.ndarray) -> Case:
    """``residual_add(x, scale(relu(x), α))`` over the given x and cotangent."""
    program = Program((Input("x", x.shape),),
                      (Node("r", "relu", ("x",)), Node("s", "scale", ("r",), alpha),
                       Node("y", "residual_add", ("x", "s"))), "y")
    return Case(program, {"x": x}, cotangent)


@st.composite
def near_zero_relu_cases(draw: st.DrawFn) -> Case:
    """:func:`relu_block` with every element of x near zero and a random cotangent."""
    shape = draw(shapes(min_dims=1))
    x = draw(arrays(np.float64, shape, elements=_NEAR_ZERO))
    return relu_block(x, draw(alphas().filter(bool)), draw(cotangents(shape)))


ELEMENTWISE_FAMILIES = tuple(f for f in FAMILY_OPS if f != "linear")


@st.composite
def one_family_stacks(draw: st.DrawFn) -> Case:
    """A residual stack of 2..5 blocks, every branch from one claimed elementwise family
    (the one :func:`leading` gives, else drawn)."""
    usable = [f for f in ELEMENTWISE_FAMILIES if FAMILY_OPS[f] <= claimed_ops()]  # "scale" at least
    lead = _LEADING.get()  # a law split by family (:func:`leading`) gives it
    family = lead if lead in usable else draw(st.sampled_from(usable))
    return draw(residual_cases(families=[family], max_depth=5).filter(
        lambda c: sum(n.op == "residual_add" for n in c.program.nodes) >= 2))


def tanh_stack(x: np.ndarray, alphas: list[Fraction]) -> Case:
    """``h_l = h_{l-1} + α_l·tanh(h_{l-1})`` over x, all-ones cotangent."""
    nodes, h = [], "x"
    for i, a in enumerate(alphas):
        nodes += [Node(f"t{i}", "tanh", (h,)), Node(f"s{i}", "scale", (f"t{i}",), a),
                  Node(f"h{i}", "residual_add", (h, f"s{i}"))]
        h = f"h{i}"
    return Case(Program((Input("x", x.shape),), tuple(nodes), h), {"x": x}, np.ones(x.shape))
