"""Floating-point error arithmetic: the pieces every op's budget rule is built from.

A value in the budget analysis is a :class:`Bound`: ``mag``, an upper bound of the true
value's magnitude, and ``err``, an upper bound of ``|computed - true|`` (float64 arrays,
elementwise). :class:`Ctx` knows the dtype being judged (its unit roundoff ``u`` and
smallest subnormal) and rounds every new bound up (:meth:`Ctx.done`). :func:`product`
and :func:`dot` are the rounded elementwise product and dot product. A context may declare
the dtype its reductions and dot products accumulate in (``accumulate``; see
:meth:`Ctx.summed`): torch on CPU, for one, sums bfloat16 and float16 values in float32
and rounds once at the end. The rules that use
them, one per op, are in :mod:`resverify.spec.ops`; :mod:`resverify.spec.budget` runs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from resverify.spec.errors import InvalidRequest

__all__ = ["up"]

UNIT_ROUNDOFF: Mapping[str, Fraction] = {
    "float64": Fraction(1, 2**53),
    "float32": Fraction(1, 2**24),
    "float16": Fraction(1, 2**11),
    "bfloat16": Fraction(1, 2**8),
}
TINY: Mapping[str, Fraction] = {  # smallest positive subnormal
    "float64": Fraction(1, 2**1074),
    "float32": Fraction(1, 2**149),
    "float16": Fraction(1, 2**24),
    "bfloat16": Fraction(1, 2**133),
}
LARGEST: Mapping[str, float] = {
    "float64": float(np.finfo(np.float64).max),
    "float32": float(np.finfo(np.float32).max),
    "float16": 65504.0,
    "bfloat16": float((2 - Fraction(1, 2**7)) * 2**127),
}
OVERFLOW: Mapping[str, float] = {
    "float64": LARGEST["float64"],
    "float32": 2.0**128 * (1 - 2.0**-25),
    "float16": 65520.0 - 2.0**-9,
    "bfloat16": 2.0**128 * (1 - 2.0**-9 - 2.0**-25),
}
"""A magnitude from which a value may round to infinity: the largest finite value plus half
its spacing, ``2^(emax+1) (1 - u/2)``, where rounding to nearest (ties to even) first goes
to infinity; for float16 and bfloat16 less half a float32 spacing there, as a value computed
in float32 and rounded again may first land on that midpoint. Below it a value rounds to a
finite one with an error at most ``u`` times its magnitude (it is below ``2^(emax+1)``).
float64's is its largest value, the analysis' own limit."""
INF = float("inf")


def up(value: Fraction) -> float:
    """The smallest float64 >= ``value`` (``inf`` beyond the float64 range)."""
    try:
        f = float(value)
    except OverflowError:
        return INF
    return f if Fraction(f) >= value else math.nextafter(f, INF)


def gamma(n: int, dtype: str) -> float:
    """``n u / (1 - n u)`` rounded up: the relative error bound of a length-n sum or dot."""
    nu = max(n, 0) * UNIT_ROUNDOFF[dtype]
    return INF if nu >= 1 else up(nu / (1 - nu))


def inflate(x: np.ndarray, terms: int) -> np.ndarray:
    """Round a non-negative float64 bound up past the roundings made while computing it."""
    arr = np.asarray(x, dtype=np.float64)
    arr = np.where(np.isnan(arr), INF, arr)
    grown = arr * (1 + (terms + 64) * 2.0**-50) + (terms + 64) * 2.0**-1074
    return np.nextafter(grown, INF)


@dataclass(frozen=True)
class Bound:
    """``mag >= |true value|`` and ``err >= |computed - true|``, elementwise."""

    mag: np.ndarray
    err: np.ndarray

    @property
    def hat(self) -> np.ndarray:
        return self.mag + self.err


@dataclass(frozen=True)
class Parts(Bound):
    """A gradient a backend may deliver as up to ``count`` separate arrays whose computed
    sizes sum to at most ``size`` (elementwise): a norm's VJP by automatic differentiation
    through its composition gives the direct term and the statistics terms apart, each
    added on its own into the argument's other gradient parts (docs/error-budget.md).
    ``mag`` and ``err`` bound their sum, as for any :class:`Bound`."""

    count: int
    size: np.ndarray


def holds(wide: str, narrow: str) -> bool:
    """Whether every ``narrow`` value is a ``wide`` value (precision, range and subnormals):
    a cast from ``narrow`` to ``wide`` is exact."""
    return (UNIT_ROUNDOFF[wide] <= UNIT_ROUNDOFF[narrow] and LARGEST[wide] >= LARGEST[narrow]
            and TINY[wide] <= TINY[narrow])


def accumulation(dtype: str, accumulate: str | None) -> str | None:
    """``accumulate`` checked against ``dtype``: None (no declaration: every operation in
    ``dtype``), or a dtype at least as precise and of at least the range (a bfloat16 value
    is exact in it, and no partial sum overflows that would not overflow ``dtype``)."""
    if accumulate is None:
        return None
    if accumulate not in UNIT_ROUNDOFF:
        raise InvalidRequest(f"unknown accumulation dtype {accumulate!r}; "
                         f"known: {list(UNIT_ROUNDOFF)}")
    if (UNIT_ROUNDOFF[accumulate] > UNIT_ROUNDOFF[dtype]
            or LARGEST[accumulate] < LARGEST[dtype]):
        raise InvalidRequest(f"a {dtype} request cannot accumulate in {accumulate}: it is less "
                         f"precise or of a smaller range; use float32 or float64")
    return accumulate


@dataclass(frozen=True)
class Ctx:
    """The dtype a budget is for: its unit roundoff ``u`` and smallest subnormal ``tiny``;
    ``accumulate``, when declared, the dtype sums and dot products are carried out in
    before their one rounding to ``dtype`` (:meth:`summed`)."""

    dtype: str
    u: float
    tiny: float
    accumulate: str | None = None

    @staticmethod
    def of(dtype: str, accumulate: str | None = None) -> Ctx:
        """The context of ``dtype`` (its ``u`` and smallest subnormal as floats)."""
        return Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]), accumulate)

    def gamma(self, n: int) -> float:
        return gamma(n, self.dtype)

    @property
    def widened(self) -> bool:
        """Whether reductions accumulate in a dtype other than ``dtype``."""
        return self.accumulate not in (None, self.dtype)

    @property
    def opmath(self) -> Ctx:
        """The context a fused kernel computes in before its one rounding to ``dtype``: the
        declared accumulation dtype's (torch's CPU ``at::opmath_type``: its softmax and
        layer norm kernels compute a bfloat16 or float16 row in float32 and round once),
        or this one where none is declared."""
        if not self.widened:
            return self
        assert self.accumulate is not None
        return Ctx.of(self.accumulate)

    def summed(self, n: int) -> tuple[float, float]:
        """``(relative, absolute)`` bounds of the rounding error of a length-n sum or dot
        product as the backend carries it out, to multiply with the sum of the terms'
        magnitudes and to add: ``(gamma_n, 0)`` in ``dtype``; with a wider accumulation
        dtype, ``gamma_n`` in it and one rounding to ``dtype`` at the end, ``gamma_n' + u
        (1 + gamma_n')``, and one smallest subnormal for that rounding. Elementwise ops are
        charged one rounding to ``dtype`` either way (an op computed in the wider dtype and
        rounded once has no more error), so only the reductions read this."""
        if not self.widened:
            return self.gamma(n), 0.0
        if n <= 0:  # nothing is summed: the value is passed on as it is
            return 0.0, 0.0
        assert self.accumulate is not None
        wide = gamma(n, self.accumulate)
        if wide == INF:
            return INF, self.tiny
        return up(Fraction(wide) + Fraction(self.u) * (1 + Fraction(wide))), self.tiny

    def done(self, mag: np.ndarray, err: np.ndarray, terms: int = 0) -> Bound:
        """The bound rounded up (``terms``: the longest sum involved); inf where the value
        may overflow.

        ``mag + err`` bounds the magnitude of what the op computes before its last rounding
        (the exact op on its computed arguments), and of every partial sum on the way (a sum
        of terms bounded by their magnitudes), so below the dtype's largest finite value
        nothing overflows and the bound stands; from it on the value may round to ±inf and
        the bound is inf. The float64 sum rounds to nearest, so a true ``mag + err`` above
        the largest value never compares below it."""
        mag, err = inflate(mag, terms), inflate(err, terms)
        overflow = (mag + err) >= LARGEST[self.dtype]
        return Bound(mag, np.where(overflow, INF, err))

    def rounded(self, mag: np.ndarray, err: np.ndarray, size: np.ndarray) -> Bound:
        """The bound of a value rounded once from a computed value of magnitude at most
        ``size`` (``err`` its error, that rounding's included), rounded up as :meth:`done`
        does; inf where ``size`` may reach :data:`OVERFLOW` (the value may round to ±inf),
        finite below it, even where ``mag`` passes the largest finite value (a sum that
        rounds down to it)."""
        over = inflate(size, 0) >= OVERFLOW[self.dtype]
        return Bound(inflate(mag, 0), np.where(over, INF, inflate(err, 0)))

    def alpha(self, alpha: Fraction) -> tuple[float, float]:
        """``(|α|, bound on |α̂ - α|)`` where α̂ is α rounded to the dtype."""
        size = abs(alpha)
        if size >= Fraction(LARGEST[self.dtype]):
            return up(size), INF
        rel = UNIT_ROUNDOFF[self.dtype] + (0 if self.dtype == "float64" else Fraction(1, 2**53))
        return up(size), up(rel * size + TINY[self.dtype])


def product(c: Ctx, x: Bound, y: Bound) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and error of one rounded elementwise product of two bounded values."""
    err = x.mag * y.err + y.mag * x.err + x.err * y.err + c.u * (x.hat * y.hat) + c.tiny
    return x.mag * y.mag, err


def summed_over(c: Ctx, x: Bound, axes: tuple[int, ...]) -> Bound:
    """``x`` summed over ``axes`` (sums of N, the axes' sizes multiplied): the propagated
    errors plus the length-N sum's rounding (:meth:`Ctx.summed`) of the magnitudes; the
    ``sum`` and ``sum_axes`` budgets."""
    n = math.prod(x.mag.shape[i] for i in axes)
    rel, last = c.summed(n - 1)
    err = np.sum(x.err, axis=axes) + rel * np.sum(x.hat, axis=axes) + last
    return c.done(np.asarray(np.sum(x.mag, axis=axes)), np.asarray(err), n)


def dot(c: Ctx, x: Bound, w: Bound, exact: np.ndarray | None = None) -> Bound:
    """``x @ w`` with 2-D operands: propagated error plus gamma_n of the magnitude product.

    With a declared wider accumulation and ``exact`` (upper bounds of the exact result's
    magnitudes, from the trace), the final rounding to the dtype is charged on the size of
    the accumulated value instead (:func:`accumulated_dot`)."""
    if exact is not None and c.widened:
        return accumulated_dot(c, x, w, exact)
    n = x.mag.shape[-1]
    rel, last = c.summed(n)
    size = x.mag @ w.mag
    if not (np.isfinite(x.mag).all() and np.isfinite(w.mag).all()):
        err = (x.mag @ w.err + x.err @ w.mag + x.err @ w.err
               + rel * (x.hat @ w.hat) + n * c.tiny + last)
        return c.done(size, err, n)
    # an operand without error (a weight, an exact input) adds products that are all 0:
    # left out, the sum is the same (the last terms are positive); x̂ = |x| then
    x_err, w_err = bool(x.err.any()), bool(w.err.any())
    carried = [x.mag @ w.err if w_err else None, x.err @ w.mag if x_err else None,
               x.err @ w.err if x_err and w_err else None]
    spread = rel * (x.hat @ w.hat if x_err or w_err else size)
    terms = [t for t in carried if t is not None]
    for term in terms[1:]:  # summed left to right, as written in full above
        terms[0] = terms[0] + term
    err = terms[0] + spread if terms else spread
    return c.done(size, err + n * c.tiny + last, n)


def accumulated_dot(c: Ctx, x: Bound, w: Bound, exact: np.ndarray) -> Bound:
    """``x @ w`` summed in the declared accumulation dtype and rounded once to the dtype,
    ``exact`` bounding the exact result's magnitudes: the propagated part ``P = |x| e_w +
    e_x |w| + e_x e_w`` and the accumulation's ``A = gamma'_n (x̂ @ ŵ) + n tiny`` put the
    accumulated value within ``P + A`` of the exact one, so its size is at most ``z =
    min((1 + gamma'_n)(x̂ @ ŵ), |v| + P + A)`` and its one rounding at most ``u z`` plus a
    smallest subnormal: a proven tightening of ``(gamma'_n + u (1 + gamma'_n)) (x̂ @ ŵ)``
    (:meth:`Ctx.summed`). Infinite where a partial sum may reach the accumulation dtype's
    largest value or ``z`` the dtype's :data:`OVERFLOW`."""
    assert c.accumulate is not None
    n = x.mag.shape[-1]
    wide, both = gamma(n, c.accumulate), x.hat @ w.hat
    carried = x.mag @ w.err + x.err @ w.mag + x.err @ w.err + wide * both + n * c.tiny
    size = np.fmin((1 + wide) * both, exact + carried)
    mag = np.fmin(x.mag @ w.mag, exact)
    out = c.rounded(inflate(mag, n), inflate(carried + c.u * size + c.tiny, n),
                    inflate(size, n))
    partial = inflate((1 + wide) * both, n) >= LARGEST[c.accumulate]
    return Bound(out.mag, np.where(partial | (wide == INF), INF, out.err))


def exact_product(c: Ctx, x: Bound, y: Bound, exact: np.ndarray) -> Bound:
    """One rounded elementwise product, ``exact`` bounding the exact product's magnitudes:
    the computed ``x̂ ŷ`` is within ``P = |x| e_y + |y| e_x + e_x e_y`` of it, so its one
    rounding is at most ``u min(x̂ ŷ, |v| + P)`` (a proven tightening of :func:`product`'s
    ``u x̂ ŷ``), plus a smallest subnormal; the magnitude ``min(|x| |y|, |v|)``."""
    carried = x.mag * y.err + y.mag * x.err + x.err * y.err
    size = np.fmin(x.hat * y.hat, exact + carried)
    return c.done(np.fmin(x.mag * y.mag, exact), carried + c.u * size + c.tiny)


def dots(c: Ctx, pairs: list[tuple[Bound, Bound]]) -> Bound:
    """``Σ p @ q`` over ``pairs`` (batched by ``@``), all their products summed in any order:
    the propagated errors plus the length-n sum's rounding (:meth:`Ctx.summed`) of the
    magnitude products, n every pair's length together (a bilinear op's tangent
    ``f(t_a, b) + f(a, t_b)``)."""
    n = sum(p.mag.shape[-1] for p, _ in pairs)
    mag = sum(p.mag @ q.mag for p, q in pairs)
    err = sum(p.mag @ q.err + p.err @ q.mag + p.err @ q.err for p, q in pairs)
    rel, last = c.summed(n)
    err = err + rel * sum(p.hat @ q.hat for p, q in pairs) + n * c.tiny + last
    return c.done(np.asarray(mag), np.asarray(err), n)


def rows(b: Bound, width: int) -> Bound:
    """As a 2-D (rows, width) matrix; not reshape(-1, width), which fails for width 0."""
    count = math.prod(b.mag.shape[:-1])
    return Bound(b.mag.reshape(count, width), b.err.reshape(count, width))


def transposed(b: Bound) -> Bound:
    return Bound(b.mag.T, b.err.T)


def swapped(b: Bound) -> Bound:
    """Each matrix of a batch transposed (the last two axes swapped)."""
    return Bound(b.mag.swapaxes(-1, -2), b.err.swapaxes(-1, -2))
