"""Error budgets: how far a correct floating-point run may land from the exact result.

A backend computes in a dtype with unit roundoff ``u``; every op it runs rounds. We bound
the damage with a running forward error analysis: each op's error is its own rounding plus
the propagated errors of its arguments. It starts from the usual first-order constants but
keeps the second-order terms (``e_a e_b``), so the bound is rigorous, not only asymptotic.
It is done element by element on NumPy float64 arrays:

* Each value is described by two arrays (a :class:`~resverify.spec.rounding.Bound`):
  ``mag``, an upper bound of the true value's magnitude, found by running the program on
  absolute values (``|x|@|w|`` for linear, ``|a||b|`` for mul, ``min(|a|, 1)`` for tanh,
  ...), and ``err``, an upper bound of ``|computed - true|``. ``hat = mag + err`` bounds
  the computed value's magnitude.
* Each op adds its own rounding and passes on its arguments' errors, forward and reverse:
  its rules (``budget`` and ``budget_vjp``) are in its entry in :mod:`resverify.spec.ops`,
  each with its formula. Dot products of length n and sums of N terms are charged
  ``gamma_n = n u / (1 - n u)``, which holds for any summation order (pairwise, blocked
  BLAS, with or without FMA), or, where the request declares an accumulation dtype
  (``accumulate``), that dtype's gamma and one rounding to the request's dtype at the end
  (:meth:`~resverify.spec.rounding.Ctx.summed`); a value used k times accumulates k
  gradient parts with ``gamma_{k-1}`` (here, in the dtype: autodiff adds them one by one
  in it), a norm's argument gradient counting as the several parts that
  autodiff through its composition delivers (a :class:`~resverify.spec.rounding.Parts`).
* Each value is computed in its own dtype (:func:`contexts`): the inputs in the
  request's, a ``cast`` node in its target, every other node in its arguments' (they must
  agree); each op's rules run with that dtype's ``u``, and the declared ``accumulate``
  holds where that dtype is the request's own.
* Every rounding that could land in the subnormal range adds one smallest subnormal per
  product (sums of floats are exact there). Flush-to-zero backends are not covered.
* Forward mode: the output tangent ``J t`` is computed alongside the value, each op's
  tangent a linear map of its arguments' tangents with the values as coefficients
  (``t_a b + a t_b`` for mul, ``t_x w + x t_w`` for linear, ``t (1 - y²)`` for tanh), so its
  budget is a second forward error analysis over the tangents' own bounds, run beside the
  values' (each op's ``budget_jvp``).
* The exact interpreter's own ``slack`` (non-zero only with tanh and the norms) is added to
  every bound.
* The analysis itself runs in float64 on non-negative numbers; every node's bounds are
  inflated by a relative ``(n + 64) 2**-50`` (n the longest sum involved) and one ulp,
  which covers the rounding of the analysis itself, so every bound is rounded up.
  A value whose ``mag + err`` reaches the dtype's largest finite value makes the bound
  infinite (the backend may overflow there); below it the bound stands.

See docs/error-budget.md for the same derivation in prose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from resverify.spec.compare import cells, decimal
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, Trace, evaluate
from resverify.spec.ir import DTYPES, Node, infer_dtypes
from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.request import Request
from resverify.spec.rounding import INF, UNIT_ROUNDOFF, Bound, Ctx, Parts, holds, up

__all__ = ["UNIT_ROUNDOFF", "Budget", "error_budget"]


def _final(x: np.ndarray) -> np.ndarray:
    """Round up the last step (one addition of non-negative floats); an exact 0 stays 0."""
    arr = np.where(np.isnan(x), INF, x)
    return np.where(arr == 0, 0.0, np.nextafter(arr * (1 + 2.0**-50), INF))


def _site(trace: Trace, node: Node) -> Site:
    return Site(node.attribute, [trace.values[a] for a in node.args],
                [trace.slack[a] for a in node.args], trace.values[node.name],
                trace.slack[node.name])


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
    """Absolute error bounds (float64, >= 0, rounded up) for the output, every gradient and,
    in forward mode, the output tangent (``tangent``: None when the request carried no
    tangents).

    ``magnitude``, ``grad_magnitudes`` and ``tangent_magnitude`` are the upper bounds of the
    true values' sizes the bounds were scaled from: the absolute-value interpretation, or the
    exact value's size where an op's rule reads it from the trace and it is smaller (add,
    mul, a declared linear or matmul), so ``output / (u * magnitude)`` says how many units
    of roundoff the budget allows, and is large where the exact value cancels.
    """

    output: np.ndarray
    grads: dict[str, np.ndarray]
    magnitude: np.ndarray | None = None
    grad_magnitudes: dict[str, np.ndarray] | None = None
    tangent: np.ndarray | None = None
    tangent_magnitude: np.ndarray | None = None

    def misses(self, exact: ExactResult, output: np.ndarray, grads: Mapping[str, np.ndarray],
               tangent: np.ndarray | None = None) -> list[Miss]:
        """Every element of a backend's ``output``/``grads``/``tangent`` farther from ``exact``
        than allowed.

        Each element is judged by :func:`resverify.spec.compare.within` (exact rational comparison;
        where the bound is infinite, anything goes, NaN included: overflow is allowed). When
        the budget has a tangent bound, the tangent is judged too ("tangent missing" when
        none is given); a tangent given to a budget without one is a usage error.
        """
        if exact.output is None or exact.grads is None:
            raise InvalidRequest("an exact result with an output and gradients is needed")
        found = _misses("output", exact.output, output, self.output)
        for name, bound in self.grads.items():
            if name not in grads:
                found.append(Miss(f"grad[{name}] missing", (), float("nan"), Fraction(0), 0.0))
                continue
            found += _misses(f"grad[{name}]", exact.grads[name], grads[name], bound)
        return found + self._tangent_misses(exact, tangent)

    def _tangent_misses(self, exact: ExactResult, tangent: np.ndarray | None) -> list[Miss]:
        if self.tangent is None:
            if tangent is not None:
                raise InvalidRequest("a tangent to judge, but no tangent budget: the request "
                                     "carried no input tangents")
            return []
        if exact.tangent is None:
            raise InvalidRequest("an exact result with a tangent is needed (evaluate the "
                                 "request that carried the tangents)")
        if tangent is None:
            return [Miss("tangent missing", (), float("nan"), Fraction(0), 0.0)]
        return _misses("tangent", exact.tangent, tangent, self.tangent)

    def allows(self, exact: ExactResult, output: np.ndarray,
               grads: Mapping[str, np.ndarray], tangent: np.ndarray | None = None) -> bool:
        """True when every element is inside its budget."""
        return not self.misses(exact, output, grads, tangent)


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
    forward trace. When ``dtype`` is narrower than the request's, rounding the inputs, the
    cotangent and the tangents to it is charged too. The request's declared accumulation
    dtype (``request.accumulate``) holds for the request's own dtype only: a budget in
    another dtype assumes every operation in that dtype, but for the casts (a cast's source
    must then be that dtype: InvalidProgram otherwise). A request with tangents (forward mode)
    gets a tangent bound as well.
    """
    dtype = request.dtype if dtype is None else dtype
    if dtype not in DTYPES:
        raise InvalidRequest(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    exact = evaluate(request) if exact is None or exact.trace is None else exact
    if exact.error is not None or exact.trace is None or request.cotangent is None:
        raise InvalidRequest(f"no budget for a request the spec rejects: {exact.error}")
    ctx, leaf = contexts(request, dtype), Ctx.of(dtype)
    trace, rounds = exact.trace, dtype != request.dtype
    bounds = {n: _leaf(leaf, v, rounds) for n, v in request.inputs.items()}
    for node in request.program.order:
        bounds[node.name] = OP_TABLE[node.op].budget(ctx[node.name], _site(trace, node),
                                                     [bounds[a] for a in node.args])
    last = ctx[request.program.output]  # the cotangent arrives in the output's dtype
    cot = _leaf(last, request.cotangent, rounds or not holds(last.dtype, dtype))
    grads = _reverse(ctx, request, trace, bounds, cot)
    slack, out = up(exact.slack), bounds[request.program.output]
    tangent = None if request.tangents is None else _tangent(ctx, request, trace, bounds, rounds)
    return Budget(output=_final(out.err + slack),
                  grads={n: _final(grads[n].err + slack) for n in request.inputs},
                  magnitude=out.mag, grad_magnitudes={n: grads[n].mag for n in request.inputs},
                  tangent=None if tangent is None else _final(tangent.err + slack),
                  tangent_magnitude=None if tangent is None else tangent.mag)


def contexts(request: Request, dtype: str) -> dict[str, Ctx]:
    """Each name's :class:`Ctx`: the dtype it is computed in when the inputs are in ``dtype``
    (:func:`~resverify.spec.ir.infer_dtypes`: a ``cast`` its target, any other node its
    arguments'), with the request's declared accumulation where that is the request's own
    dtype. Other dtypes accumulate in themselves: a float32 node of a bfloat16 layer (an
    upcast norm, torch's float32 softmax) sums in float32 as torch on CPU does. A program
    without casts has one context, today's."""
    dtypes = infer_dtypes(request.program, dtype)
    made = {own: Ctx.of(own, request.accumulate if own == dtype == request.dtype else None)
            for own in set(dtypes.values())}
    return {name: made[own] for name, own in dtypes.items()}


def _tangent(c: Mapping[str, Ctx], request: Request, trace: Trace,
             bounds: Mapping[str, Bound], rounds: bool) -> Bound:
    """The output tangent's bound: each op's ``budget_jvp`` along the forward order."""
    assert request.tangents is not None
    tangents = {n: _leaf(c[n], v, rounds) for n, v in request.tangents.items()}
    for node in request.program.order:
        tangents[node.name] = OP_TABLE[node.op].budget_jvp(
            c[node.name], _site(trace, node), [bounds[a] for a in node.args], bounds[node.name],
            [tangents[a] for a in node.args])
    return tangents[request.program.output]


def _leaf(c: Ctx, values: np.ndarray, rounds: bool) -> Bound:
    mag = np.abs(np.asarray(values, dtype=np.float64))
    return c.done(mag, c.u * mag + c.tiny) if rounds else Bound(mag, np.zeros_like(mag))


def _reverse(c: Mapping[str, Ctx], request: Request, trace: Trace,
             bounds: Mapping[str, Bound], cot: Bound) -> dict[str, Bound]:
    """Each input's gradient bound: each node's ``budget_vjp`` in its own dtype, the parts of
    a value's gradient summed in the value's dtype."""
    parts: dict[str, list[Bound]] = {request.program.output: [cot]}
    for node in reversed(request.program.order):
        if node.name not in parts:
            continue
        own = c[node.name]
        g = _accumulate(own, parts.pop(node.name))
        args = [bounds[a] for a in node.args]
        op_parts = OP_TABLE[node.op].budget_vjp(own, _site(trace, node), args,
                                                bounds[node.name], g)
        for arg, part in zip(node.args, op_parts, strict=True):
            parts.setdefault(arg, []).append(part)
    out = {}
    for name, value in request.inputs.items():
        zero = np.zeros(np.shape(value))
        out[name] = _accumulate(c[name], parts[name]) if name in parts else Bound(zero, zero)
    return out


def _accumulate(c: Ctx, parts: list[Bound]) -> Bound:
    """k gradient parts summed in any order: their errors plus gamma_{k-1} of their sizes.

    A :class:`Parts` (a norm's VJP, which autodiff delivers in pieces) counts as its
    ``count`` pieces of total size ``size``; alone, it passes on as it is (its own rule
    charges the sum of its pieces)."""
    if len(parts) == 1:
        return parts[0]
    count = sum(p.count if isinstance(p, Parts) else 1 for p in parts)
    mag = sum((p.mag for p in parts), np.zeros_like(parts[0].mag))
    err = sum((p.err for p in parts), np.zeros_like(parts[0].err))
    size = sum((p.size if isinstance(p, Parts) else p.hat for p in parts),
               np.zeros_like(parts[0].mag))
    return c.done(mag, err + c.gamma(count - 1) * size, count)
