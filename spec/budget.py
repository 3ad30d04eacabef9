"""Error budgets: how far a correct floating-point run may land from the exact result.

A backend computes in a dtype with unit roundoff ``u``; every op it runs rounds. We bound
the damage with a running forward error analysis: each op's error is its own rounding plus
the propagated errors of its arguments. It starts from the usual first-order constants but
keeps the second-order terms (``e_a e_b``), so the bound is rigorous, not only asymptotic.
It is done element by element on NumPy float64 arrays:

* Each value is described by two arrays: ``mag``, an upper bound of the true value's
  magnitude, found by running the program on absolute values (``|x|@|w|`` for linear,
  ``|a||b|`` for mul, ``min(|a|, 1)`` for tanh, ...), and ``err``, an upper bound of
  ``|computed - true|``. ``hat = mag + err`` bounds the computed value's magnitude.
* Each op adds its own rounding and passes on its arguments' errors:

  - add / residual_add: ``e_a + e_b + u (hat_a + hat_b)``;
  - mul: ``|a| e_b + |b| e_a + e_a e_b + u hat_a hat_b``;
  - scale: α is first rounded to the dtype (``|α̂ - α| <= u|α|``, plus ``2**-53 |α|`` when
    it passes through float64 on the way), then one product as for mul;
  - linear, and both of its VJPs, are dot products of length n: the propagated part as for
    mul summed over n terms, plus ``gamma_n (|x̂| @ |ŵ|)`` with
    ``gamma_n = n u / (1 - n u)``, which holds for any summation order (pairwise, blocked
    BLAS, with or without FMA);
  - sum of N elements and un-broadcasting N cotangent copies: ``gamma_{N-1}`` times the
    sum of magnitudes; a value used k times accumulates k gradient parts with ``gamma_{k-1}``;
  - relu is exact and 1-Lipschitz; where the sign of its input is uncertain
    (``|x| <= e_x``), the gradient may be the whole cotangent or nothing, and is charged so;
  - tanh is 1-Lipschitz; a backend's tanh is allowed :data:`TANH_ULPS` ulps of error
    (``ulp(t) <= 2u|t|``); its VJP ``ḡ (1 - t²)`` gets ``e_t (2|t| + e_t)`` for the error of
    t and ``5u`` for the rounding of ``1 - t²`` (or ``(1 - t)(1 + t)``).

* Every rounding that could land in the subnormal range adds one smallest subnormal per
  product (sums of floats are exact there). Flush-to-zero backends are not covered.
* The exact interpreter's own ``slack`` (non-zero only with tanh) is added to every bound.
* The analysis itself runs in float64 on non-negative numbers; every node's bounds are
  inflated by a relative ``(n + 64) 2**-50`` (n the longest sum involved) and one ulp,
  which covers the rounding of the analysis itself, so every bound is rounded up.
  A magnitude within a factor 2 of the dtype's largest finite value makes the bound
  infinite (the backend may overflow).

``TANH_ULPS = 4``: glibc lists 2–3 ulps for tanh and CUDA 2 ulps for tanhf; NumPy's tanh
measured 1.05 ulp (float64) and 1.26 ulp (float32) against mpmath. 4 covers these with a
small margin and is still far too tight to hide a wrong formula.

See docs/error-budget.md for the same derivation in prose.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from resverify.spec.compare import cells, decimal
from resverify.spec.errors import InvalidProgram
from resverify.spec.exact import ExactResult, Trace, evaluate, unbroadcast
from resverify.spec.ir import DTYPES, Node
from resverify.spec.request import Request

__all__ = [
    "TANH_ULPS",
    "UNIT_ROUNDOFF",
    "Budget",
    "Miss",
    "error_budget",
    "gamma",
]

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
TANH_ULPS = 4
"""Error allowed for a backend's tanh, in ulps of the result (see the module docstring)."""

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


def _inflate(x: np.ndarray, terms: int) -> np.ndarray:
    """Round a non-negative float64 bound up past the roundings made while computing it."""
    arr = np.asarray(x, dtype=np.float64)
    arr = np.where(np.isnan(arr), INF, arr)
    grown = arr * (1 + (terms + 64) * 2.0**-50) + (terms + 64) * 2.0**-1074
    return np.nextafter(grown, INF)


def _final(x: np.ndarray) -> np.ndarray:
    """Round up the last step (one addition of non-negative floats); an exact 0 stays 0."""
    arr = np.where(np.isnan(x), INF, x)
    return np.where(arr == 0, 0.0, np.nextafter(arr * (1 + 2.0**-50), INF))


@dataclass(frozen=True)
class _Bound:
    """``mag >= |true value|`` and ``err >= |computed - true|``, elementwise."""

    mag: np.ndarray
    err: np.ndarray

    @property
    def hat(self) -> np.ndarray:
        return self.mag + self.err


@dataclass(frozen=True)
class _Ctx:
    dtype: str
    u: float
    tiny: float
    trace: Trace
    slack: float

    def gamma(self, n: int) -> float:
        return gamma(n, self.dtype)

    def done(self, mag: np.ndarray, err: np.ndarray, terms: int = 0) -> _Bound:
        mag, err = _inflate(mag, terms), _inflate(err, terms)
        overflow = (mag + err) >= LARGEST[self.dtype] / 2
        return _Bound(mag, np.where(overflow, INF, err))

    def alpha(self, alpha: Fraction) -> tuple[float, float]:
        """``(|α|, bound on |α̂ - α|)`` where α̂ is α rounded to the dtype."""
        size = abs(alpha)
        if size >= Fraction(LARGEST[self.dtype]):
            return up(size), INF
        rel = UNIT_ROUNDOFF[self.dtype] + (0 if self.dtype == "float64" else Fraction(1, 2**53))
        return up(size), up(rel * size + TINY[self.dtype])


# ----------------------------------------------------------------------------------------
# forward and reverse rules, per op, side by side

Forward = Callable[[_Ctx, Node, Sequence[_Bound]], _Bound]
Backward = Callable[[_Ctx, Node, Sequence[_Bound], _Bound, _Bound], list[_Bound]]


def _add(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    return c.done(a[0].mag + a[1].mag, a[0].err + a[1].err + c.u * (a[0].hat + a[1].hat))


def _add_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound) -> list[_Bound]:
    out = []
    for arg in a:
        copies = g.mag.size // max(1, arg.mag.size)
        err = unbroadcast(g.err, arg.mag.shape) + c.gamma(copies - 1) * unbroadcast(
            g.hat, arg.mag.shape)
        out.append(c.done(unbroadcast(g.mag, arg.mag.shape), err, copies))
    return out


def _merge_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
                ) -> list[_Bound]:
    return [g, g]


def _product(c: _Ctx, x: _Bound, y: _Bound) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and error of one rounded elementwise product of two bounded values."""
    err = x.mag * y.err + y.mag * x.err + x.err * y.err + c.u * (x.hat * y.hat) + c.tiny
    return x.mag * y.mag, err


def _mul(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    return c.done(*_product(c, a[0], a[1]))


def _mul_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound) -> list[_Bound]:
    out = []
    for arg, other in ((a[0], a[1]), (a[1], a[0])):
        mag, err = _product(c, g, other)
        shape = arg.mag.shape
        copies = mag.size // max(1, arg.mag.size)
        summed = unbroadcast(err, shape) + c.gamma(copies - 1) * unbroadcast(
            (1 + c.u) * g.hat * other.hat + c.tiny, shape)
        out.append(c.done(unbroadcast(mag, shape), summed, copies))
    return out


def _scaled(c: _Ctx, node: Node, x: _Bound) -> _Bound:
    assert node.alpha is not None
    size, miss = c.alpha(node.alpha)
    err = size * x.err + miss * x.hat + c.u * (size + miss) * x.hat + c.tiny
    return c.done(size * x.mag, err)


def _scale(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    return _scaled(c, node, a[0])


def _scale_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
                ) -> list[_Bound]:
    return [_scaled(c, node, g)]


def _dot(c: _Ctx, x: _Bound, w: _Bound) -> _Bound:
    """``x @ w`` with 2-D operands: propagated error plus gamma_n of the magnitude product."""
    n = x.mag.shape[-1]
    err = (x.mag @ w.err + x.err @ w.mag + x.err @ w.err
           + c.gamma(n) * (x.hat @ w.hat) + n * c.tiny)
    return c.done(x.mag @ w.mag, err, n)


def _rows(b: _Bound, width: int) -> _Bound:
    """As a 2-D (rows, width) matrix; not reshape(-1, width), which fails for width 0."""
    rows = math.prod(b.mag.shape[:-1])
    return _Bound(b.mag.reshape(rows, width), b.err.reshape(rows, width))


def _t(b: _Bound) -> _Bound:
    return _Bound(b.mag.T, b.err.T)


def _linear(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    x, w = a
    out = _dot(c, _rows(x, w.mag.shape[0]), w)
    shape = x.mag.shape[:-1] + w.mag.shape[1:]
    return _Bound(out.mag.reshape(shape), out.err.reshape(shape))


def _linear_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
                 ) -> list[_Bound]:
    x, w = a
    d_in, d_out = w.mag.shape
    gx = _dot(c, _rows(g, d_out), _t(w))
    gw = _dot(c, _t(_rows(x, d_in)), _rows(g, d_out))
    shape = x.mag.shape
    return [_Bound(gx.mag.reshape(shape), gx.err.reshape(shape)), gw]


def _relu_masks(c: _Ctx, node: Node, x: _Bound) -> tuple[np.ndarray, np.ndarray]:
    """(positive, uncertain): where the exact input is > 0, and where its sign may flip."""
    exact = c.trace.values[node.args[0]]
    margin = _inflate(x.err + up(c.trace.slack[node.args[0]]), 0)
    flat = exact.reshape(-1).tolist()
    positive = np.array([v > 0 for v in flat], dtype=bool).reshape(exact.shape)
    uncertain = np.array([m == INF or abs(v) <= Fraction(m)
                          for v, m in zip(flat, margin.reshape(-1).tolist(), strict=True)],
                         dtype=bool).reshape(exact.shape)
    return positive, uncertain & (x.err + c.trace.slack[node.args[0]] > 0)


def _relu(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    positive, uncertain = _relu_masks(c, node, a[0])
    keep = positive | uncertain
    return _Bound(np.where(keep, a[0].mag, 0.0), np.where(keep, a[0].err, 0.0))


def _relu_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
               ) -> list[_Bound]:
    positive, uncertain = _relu_masks(c, node, a[0])
    err = np.where(uncertain, g.hat, np.where(positive, g.err, 0.0))
    return [_Bound(np.where(positive | uncertain, g.mag, 0.0), err)]


def _tanh(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    x = a[0]
    err = x.err + 2 * TANH_ULPS * c.u * np.minimum(x.hat, 1.0) + TANH_ULPS * c.tiny
    return c.done(np.minimum(x.mag, 1.0), err)


def _tanh_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
               ) -> list[_Bound]:
    s = c.trace.slack[node.name]
    slope = np.array([min(1.0, up(1 - v * v + s * (2 + s)))
                      for v in c.trace.values[node.name].reshape(-1).tolist()],
                     dtype=np.float64).reshape(y.mag.shape)
    slope_err = y.err * (2 * np.minimum(y.mag, 1.0) + y.err) + 5 * c.u
    err = (g.mag * slope_err + slope * g.err + g.err * slope_err
           + c.u * g.hat * (slope + slope_err) + c.tiny)
    return [c.done(g.mag * slope, err)]


def _sum(c: _Ctx, node: Node, a: Sequence[_Bound]) -> _Bound:
    x = a[0]
    n = x.mag.size
    err = x.err.sum() + c.gamma(n - 1) * x.hat.sum()
    return c.done(np.asarray(x.mag.sum()), np.asarray(err), n)


def _sum_back(c: _Ctx, node: Node, a: Sequence[_Bound], y: _Bound, g: _Bound
              ) -> list[_Bound]:
    shape = a[0].mag.shape
    return [_Bound(np.broadcast_to(g.mag, shape).copy(), np.broadcast_to(g.err, shape).copy())]


RULES: Mapping[str, tuple[Forward, Backward]] = {
    "add": (_add, _add_back),
    "residual_add": (_add, _merge_back),
    "mul": (_mul, _mul_back),
    "scale": (_scale, _scale_back),
    "linear": (_linear, _linear_back),
    "relu": (_relu, _relu_back),
    "tanh": (_tanh, _tanh_back),
    "sum": (_sum, _sum_back),
}


# ----------------------------------------------------------------------------------------
# the budget


@dataclass(frozen=True)
class Miss:
    """One element outside its budget."""

    where: str
    index: tuple[int, ...]
    actual: float
    expected: Fraction
    bound: float

    def __str__(self) -> str:
        return (f"{self.where}{list(self.index)}={self.actual!r}, but should be "
                f"{decimal(self.expected)} ± {self.bound:.3g}")


@dataclass(frozen=True)
class Budget:
    """Absolute error bounds (float64, >= 0, rounded up) for the output and every gradient.

    ``magnitude`` and ``grad_magnitudes`` are the absolute-value interpretation the bounds
    were scaled from (upper bounds of the true values' sizes): ``output / (u * magnitude)``
    says how many units of roundoff the budget allows.
    """

    output: np.ndarray
    grads: dict[str, np.ndarray]
    magnitude: np.ndarray | None = None
    grad_magnitudes: dict[str, np.ndarray] | None = None

    def misses(self, exact: ExactResult, output: np.ndarray,
               grads: Mapping[str, np.ndarray]) -> list[Miss]:
        """Every element of a backend's ``output``/``grads`` farther from ``exact`` than allowed.

        Each element is judged by :func:`resverify.spec.compare.within` (exact rational comparison;
        where the bound is infinite, anything goes, NaN included: overflow is allowed).
        """
        if exact.output is None or exact.grads is None:
            raise InvalidProgram("an exact result with an output and gradients is needed")
        found = _misses("output", exact.output, output, self.output)
        for name, bound in self.grads.items():
            if name not in grads:
                found.append(Miss(f"grad[{name}] missing", (), float("nan"), Fraction(0), 0.0))
                continue
            found += _misses(f"grad[{name}]", exact.grads[name], grads[name], bound)
        return found

    def allows(self, exact: ExactResult, output: np.ndarray,
               grads: Mapping[str, np.ndarray]) -> bool:
        """True when every element is inside its budget."""
        return not self.misses(exact, output, grads)


def _misses(where: str, expected: np.ndarray, actual: np.ndarray, bound: np.ndarray
            ) -> list[Miss]:
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return [Miss(f"{where}.shape{list(actual.shape)}", (), float("nan"), Fraction(0), 0.0)]
    return [Miss(where, c.index, c.actual, c.exact, c.bound)
            for c in cells(actual, expected, bound) if not c.ok]


@np.errstate(over="ignore", invalid="ignore")
def error_budget(request: Request, dtype: str | None = None, *,
                 exact: ExactResult | None = None) -> Budget:
    """The error budget of ``request`` computed in ``dtype`` (default: the request's).

    Magnitudes near the top of the float64 range overflow to inf on purpose (the bound is
    then inf: not checked), and inf·0 gives NaN, which the last step turns into inf; NumPy's
    warnings for both are silenced here rather than left to the caller.

    Pass ``exact`` (from :func:`resverify.spec.exact.evaluate` of the same request) to reuse its
    forward trace. When ``dtype`` is narrower than the request's, rounding the inputs and
    the cotangent to it is charged too.
    """
    dtype = request.dtype if dtype is None else dtype
    if dtype not in DTYPES:
        raise InvalidProgram(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    exact = evaluate(request) if exact is None or exact.trace is None else exact
    if exact.error is not None or exact.trace is None or request.cotangent is None:
        raise InvalidProgram(f"no budget for a request the spec rejects: {exact.error}")
    ctx = _Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]), exact.trace,
               up(exact.slack))
    rounds = dtype != request.dtype
    bounds = {n: _leaf(ctx, v, rounds) for n, v in request.inputs.items()}
    for node in request.program.order:
        bounds[node.name] = RULES[node.op][0](ctx, node, [bounds[a] for a in node.args])
    grads = _reverse(ctx, request, bounds, _leaf(ctx, request.cotangent, rounds))
    slack, out = ctx.slack, bounds[request.program.output]
    return Budget(output=_final(out.err + slack),
                  grads={n: _final(grads[n].err + slack) for n in request.inputs},
                  magnitude=out.mag, grad_magnitudes={n: grads[n].mag for n in request.inputs})


def _leaf(c: _Ctx, values: np.ndarray, rounds: bool) -> _Bound:
    mag = np.abs(np.asarray(values, dtype=np.float64))
    return c.done(mag, c.u * mag + c.tiny) if rounds else _Bound(mag, np.zeros_like(mag))


def _reverse(c: _Ctx, request: Request, bounds: Mapping[str, _Bound], cot: _Bound
             ) -> dict[str, _Bound]:
    parts: dict[str, list[_Bound]] = {request.program.output: [cot]}
    for node in reversed(request.program.order):
        if node.name not in parts:
            continue
        g = _accumulate(c, parts.pop(node.name))
        args = [bounds[a] for a in node.args]
        for arg, part in zip(node.args, RULES[node.op][1](c, node, args, bounds[node.name], g),
                             strict=True):
            parts.setdefault(arg, []).append(part)
    out = {}
    for name, value in request.inputs.items():
        zero = np.zeros(np.shape(value))
        out[name] = _accumulate(c, parts[name]) if name in parts else _Bound(zero, zero)
    return out


def _accumulate(c: _Ctx, parts: list[_Bound]) -> _Bound:
    """k gradient parts summed in any order: their errors plus gamma_{k-1} of their sizes."""
    if len(parts) == 1:
        return parts[0]
    mag = sum((p.mag for p in parts), np.zeros_like(parts[0].mag))
    err = sum((p.err for p in parts), np.zeros_like(parts[0].err))
    size = sum((p.hat for p in parts), np.zeros_like(parts[0].mag))
    return c.done(mag, err + c.gamma(len(parts) - 1) * size, len(parts))
