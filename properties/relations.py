"""Laws that relate several answers, as one object: a :class:`Group` holds the requests a
law sends for one example and the relations that must hold between the backend's answers.

Why one object. "The output is affine in α" compares three runs; "x_L = x_0 + Σ a_l x_l"
compares the backend's own states at every depth; the sample variance identity reads the
merge's output and the branch's output from two requests; the duality pairs the tangent
with the gradients of one answer. None of these can be judged on one request alone, and
an entry per request with the spec's value is a different law (a backend wrong in an affine
way passes it). So each such law builds its group (its function in ``laws_depth``,
``laws_variance`` or ``laws_jvp``), and three drivers use that same group:

* the Hypothesis test: :func:`holds` sends every request and checks the relations;
* the corpus exporter (:mod:`resverify.properties.corpus`): the law runs on the exact oracle
  inside :func:`recording`, which keeps every group it built, to be written as a group
  file (:mod:`resverify.properties.groups` holds only that file format);
* ``resverify vectors run``: a group read back from its file is judged by :func:`check`
  (:func:`resverify.properties.judge.judge_group`), in resverify or in an engine in another
  language that implements the same two rules.

The two relations, judged exactly in rationals on the backend's floats:

* :class:`Linear`: per element ``i``, ``|Σ_k c_k·A_k[i]| <= bound[i]`` where ``A_k`` is an
  array (``output``, ``grads/NAME``, ``tangent``) of the answer to request ``r_k``,
  optionally weighted element-wise (``w_k``) and summed to one number (``reduce = "sum"``:
  the duality ⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩). The bound is fixed by the spec; ``inf`` claims nothing
  about its element. Every term's element must be finite where the bound is finite (summed:
  where its weight is non-zero); ``finite = "all"`` (written by earlier corpora) demands
  finite values everywhere.
* :class:`VarianceIdentity`: ``|Var y − [Var x + Var f + 2Cov(x, f)]| <= 2·sqrt(Var(x+f)·M)
  + M``, ``M = mean(b²)``, ``b`` the spec's budget of the merge ``x + f`` of the backend's
  own ``f``: its bound depends on the answer, so the group holds the rule, not a number.

A failure carries the last request the relation reads (the run at α = a, the deepest
state, the scaled tangents), or the request whose answer is not finite.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num, run_ok
from resverify.properties.laws_structure import merge_request
from resverify.spec.budget import error_budget
from resverify.spec.codec import request_to_dict
from resverify.spec.exact import as_fractions
from resverify.spec.request import Request, Value

__all__ = []

INF = float("inf")


@dataclass(frozen=True)
class Term:
    """``coef`` times the array ``array`` of the answer to request ``request`` (element-wise
    times ``weights``, an object array of Fractions, when given)."""

    request: int
    array: str
    coef: Fraction
    weights: np.ndarray | None = None


@dataclass(frozen=True)
class Linear:
    """``|Σ terms| <= bound`` element by element, or summed (``reduce == "sum"``)."""

    law: str
    terms: tuple[Term, ...]
    bound: np.ndarray
    """Object array of Fractions, ``INF`` where nothing is claimed; shape ``()`` when summed."""
    reduce: str = "none"
    finite: str = "bounded"


@dataclass(frozen=True)
class VarianceIdentity:
    """The sample variance identity of the merge ``y`` (request ``y``) of input ``x`` and the
    branch output ``f`` (request ``f``)."""

    law: str
    x: str
    y: int
    f: int


Relation = Linear | VarianceIdentity


@dataclass(frozen=True)
class Group:
    """The requests one law sends for one example and the relations between their answers."""

    requests: tuple[Request, ...]
    relations: tuple[Relation, ...]


def digest(request: Request) -> str:
    """A short digest of a request's JSON form: two requests with the same bits have the
    same digest (the corpus and a group are keyed by it)."""
    text = json.dumps(request_to_dict(request), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def distinct(requests: Iterable[Request]) -> tuple[tuple[Request, ...], list[int]]:
    """The requests once each, in the order first sent, and where each given one went."""
    kept: dict[str, int] = {}
    unique: list[Request] = []
    where = []
    for request in requests:
        key = digest(request)
        if key not in kept:
            kept[key] = len(unique)
            unique.append(request)
        where.append(kept[key])
    return tuple(unique), where


# ----------------------------------------------------------------------------------------
# driving a group: on a backend, or recorded for the corpus


_RECORDED: ContextVar[list[Group] | None] = ContextVar("resverify_groups", default=None)


@contextmanager
def recording() -> Iterator[list[Group]]:
    """Within the block, every group :func:`holds` drives is appended to the list yielded
    (the corpus runs a law on the exact oracle this way and writes the groups it built)."""
    groups: list[Group] = []
    token = _RECORDED.set(groups)
    try:
        yield groups
    finally:
        _RECORDED.reset(token)


def holds(backend: Backend, group: Group) -> None:
    """Send every request of ``group`` to ``backend`` (each must answer a value of the
    declared form: :func:`~resverify.properties.assertions.run_ok`) and raise
    :class:`~resverify.properties.assertions.PropertyFailure` unless every relation holds."""
    __tracebackhide__ = True
    recorded = _RECORDED.get()
    if recorded is not None:
        recorded.append(group)
    answers = [run_ok(backend, request) for request in group.requests]
    check(backend, group, answers)


def check(backend: Backend, group: Group, answers: Sequence[Value]) -> None:
    """Raise :class:`~resverify.properties.assertions.PropertyFailure` (kind ``law``) unless
    every relation holds on the backend's ``answers`` (one per request, each of the
    declared form)."""
    __tracebackhide__ = True
    for relation in group.relations:
        if isinstance(relation, VarianceIdentity):
            _check_variance(backend.name, group, relation, answers)
        elif relation.reduce == "sum":
            _check_sum(backend.name, group, relation, answers)
        else:
            _check_elements(backend.name, group, relation, answers)


def pick(value: Value, array: str) -> np.ndarray:
    """The array ``output``, ``tangent`` or ``grads/NAME`` of an answer."""
    if array == "output":
        return np.asarray(value.output)
    if array == "tangent":
        return np.asarray(value.tangent)
    return np.asarray(value.grads[array.removeprefix("grads/")])


# ----------------------------------------------------------------------------------------
# the linear relation


def _needs_finite(rel: Linear) -> np.ndarray:
    """Where a term's element must be finite (element by element): where the bound is."""
    bound = np.asarray(rel.bound, dtype=object)
    if rel.finite == "all":
        return np.ones(bound.shape, bool)
    return np.asarray([b != INF for b in bound.reshape(-1)], bool).reshape(bound.shape)


def _check_elements(backend: str, group: Group, rel: Linear, answers: Sequence[Value]) -> None:
    __tracebackhide__ = True
    arrays = [pick(answers[t.request], t.array) for t in rel.terms]
    needed = _needs_finite(rel)
    for term, values in zip(rel.terms, arrays, strict=True):
        bad = np.argwhere(~np.isfinite(values.astype(np.float64)) & needed)
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            Context(backend, group.requests[term.request]).fail(
                f"{rel.law}: {term.array}{list(index)} of request {term.request}: backend "
                f"{backend} gives a non-finite value {float(values[index])!r} where the bound "
                "is finite (spec: finite)")
    ctx = Context(backend, group.requests[max(t.request for t in rel.terms)])
    bound = np.asarray(rel.bound, dtype=object)
    for index in np.ndindex(*bound.shape):
        limit = bound[index]
        if limit == INF:
            continue
        parts = [t.coef * _weight(t, index) * Fraction(float(a[index]))
                 for t, a in zip(rel.terms, arrays, strict=True)]
        gap = sum(parts, Fraction(0))
        if abs(gap) > limit:
            shown = " + ".join(f"({num(t.coef)})·{num(Fraction(float(a[index])))}"
                               for t, a in zip(rel.terms, arrays, strict=True))
            ctx.fail(f"{rel.law}: {rel.terms[0].array}{list(index)}: backend {backend} "
                     f"gives {shown} = {num(gap)}, spec 0 up to the bound {num(limit)}")


def _weight(term: Term, index: tuple[int, ...]) -> Fraction:
    return Fraction(1) if term.weights is None else Fraction(term.weights[index])


class Pairing:
    """``Σ wᵢ·vᵢ`` over pairs of arrays, exactly, with the bound ``Σ |wᵢ|·Bᵢ`` of its error.

    ``w`` are exact weights (the request's cotangent or tangents), ``v`` the backend's
    floats and ``B`` their budgets. A zero weight contributes nothing, whatever its value.
    ``unbounded`` names the first element with a non-zero weight and an infinite budget
    (the analysis allows overflow there: the inner product is then not checked);
    ``broken`` the first with a finite budget and a NaN or infinite value.
    """

    def __init__(self) -> None:
        self.total = Fraction(0)
        self.slack = Fraction(0)
        self.unbounded: str | None = None
        self.broken: str | None = None

    def add(self, what: str, weights: np.ndarray, values: np.ndarray,
            bounds: np.ndarray) -> None:
        shape = np.shape(weights)
        limits = np.broadcast_to(np.asarray(bounds, dtype=np.float64), shape)
        for index, w, v, b in zip(np.ndindex(*shape), np.asarray(weights).reshape(-1).tolist(),
                                  np.asarray(values).reshape(-1).tolist(),
                                  limits.reshape(-1).tolist(), strict=True):
            if w == 0:
                continue
            where = f"{what}{list(index)}"
            if not np.isfinite(b):
                self.unbounded = self.unbounded or where
            elif not np.isfinite(v):
                self.broken = self.broken or f"{where} = {v!r}"
            else:
                self.total += Fraction(w) * Fraction(v)
                self.slack += abs(Fraction(w)) * Fraction(b)


def pairing(parts: Iterable[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> Pairing:
    """The :class:`Pairing` of ``(what, weights, values, bounds)`` parts."""
    found = Pairing()
    for what, weights, values, bounds in parts:
        found.add(what, weights, values, bounds)
    return found


def _check_sum(backend: str, group: Group, rel: Linear, answers: Sequence[Value]) -> None:
    """``|Σ_k c_k·⟨w_k, A_k⟩| <= bound``; an infinite bound claims nothing."""
    __tracebackhide__ = True
    limit = np.asarray(rel.bound, dtype=object).item()
    if limit == INF:
        return  # the analysis allows overflow on a term that counts: nothing to check
    ctx = Context(backend, group.requests[max(t.request for t in rel.terms)])
    found = Pairing()
    for term in rel.terms:
        values = pick(answers[term.request], term.array)
        weights = np.ones(values.shape, object) if term.weights is None else term.weights
        # the bound is the relation's: each element is only asked to be finite here
        found.add(f"{term.array} of request {term.request}", weights * term.coef, values,
                  np.zeros(values.shape))
    ctx.check(found.broken is None, f"{rel.law}: {found.broken}: backend {backend} gives a "
              "non-finite value where the bound is finite (spec: finite)")
    ctx.check(abs(found.total) <= limit,
              f"{rel.law}: backend {backend} gives {num(found.total)}, |diff| = "
              f"{num(abs(found.total))} > bound {num(limit)} (spec: 0)")


def array_budget(request: Request, array: str) -> np.ndarray:
    """The spec's budget of one array of the answer to ``request`` (``inf`` where it has
    none: the tangent of a reverse-mode request)."""
    budget = error_budget(request)
    chosen = budget.output if array == "output" else (
        budget.tangent if array == "tangent" else budget.grads[array.removeprefix("grads/")])
    return np.asarray(INF if chosen is None else chosen, dtype=np.float64)


def rational_bound(parts: Sequence[tuple[Fraction, np.ndarray]], whole: bool) -> np.ndarray:
    """``Σ |c|·B`` exactly; INF where a budget is infinite (everywhere when ``whole``: a law
    that skips an array with any infinite budget)."""
    shape = np.shape(parts[0][1])
    infinite = np.any([np.isinf(b) for _, b in parts], axis=0)
    if whole and np.any(infinite):
        infinite = np.ones(shape, bool)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = INF if infinite[index] else sum(
            (abs(c) * Fraction(float(b[index])) for c, b in parts), Fraction(0))
    return out


def exact_array(values: np.ndarray) -> np.ndarray:
    """An array's floats as an object array of Fractions."""
    out = np.empty(np.shape(values), dtype=object)
    out.reshape(-1)[:] = [Fraction(v) for v in np.asarray(values).reshape(-1).tolist()]
    return out


# ----------------------------------------------------------------------------------------
# the sample variance identity (its derivation: resverify.properties.laws_variance)


def _moments(a: np.ndarray, b: np.ndarray) -> Fraction:
    """Population covariance of two object arrays of Fractions."""
    n = len(a)
    ma, mb = sum(a, Fraction(0)) / n, sum(b, Fraction(0)) / n
    return sum(((p - ma) * (q - mb) for p, q in zip(a, b, strict=True)), Fraction(0)) / n


def _merge_budget(x: np.ndarray, f: np.ndarray, dtype: str) -> np.ndarray:
    """The spec's budget of ``residual_add(x, f)`` alone, on the backend's own ``f``."""
    merge = merge_request("residual_add", x, f, dtype, np.ones_like(f))
    return np.asarray(error_budget(merge).output, dtype=np.float64)


def _check_variance(backend: str, group: Group, rel: VarianceIdentity,
                    answers: Sequence[Value]) -> None:
    __tracebackhide__ = True
    request = group.requests[rel.y]
    ctx = Context(backend, request)
    y_raw, f_raw = np.asarray(answers[rel.y].output), np.asarray(answers[rel.f].output)
    if not (np.all(np.isfinite(y_raw)) and np.all(np.isfinite(f_raw))):
        overflow = np.isinf(error_budget(request).output)
        bad = ~np.isfinite(y_raw) | ~np.isfinite(f_raw)
        ctx.check(bool(np.all(overflow[bad])), f"backend {backend} gives a non-finite output "
                  "where the spec's budget rules out overflow")
        return
    budget = _merge_budget(request.inputs[rel.x], f_raw, request.dtype)
    if not np.all(np.isfinite(budget)):
        return  # the analysis allows overflow in the merge: no bound to check
    y, x, f = (as_fractions(v) for v in (y_raw, request.inputs[rel.x], f_raw))
    bound = as_fractions(budget)
    exact_sum = x + f
    gap = abs(_moments(y, y) - (_moments(x, x) + _moments(f, f) + 2 * _moments(x, f)))
    m = sum((b * b for b in bound), Fraction(0)) / len(bound)
    if gap <= m or (gap - m) ** 2 <= 4 * _moments(exact_sum, exact_sum) * m:
        return
    product = m * _moments(exact_sum, exact_sum)
    allowed = 2 * mpmath.sqrt(mpmath.mpf(product.numerator) / product.denominator) + (
        mpmath.mpf(m.numerator) / m.denominator)
    ctx.fail(f"Var(y) - [Var x + Var f + 2Cov(x,f)] = {num(gap)} on backend {backend}'s "
             f"outputs; spec: 0 up to the merge budget {mpmath.nstr(allowed, 3)}")

