"""Laws that relate several answers, as vector groups: the requests, the relation the law
checks between the backend's answers, and its exact bound.

Why: some laws cannot be judged on one request. "The output is affine in α" compares three
runs; "x_L = x_0 + Σ a_l x_l" compares the backend's own states at every depth; the sample
variance identity reads the merge's output and the branch's output from two requests. An
entry per request with the spec's value is stricter than such a law (a backend wrong in an
affine way passes it), and one saved request cannot reproduce its failure (JAX's flushed
subnormal passes its single vector: :mod:`resverify.reports.known_failures`). A
:class:`Group` holds every request the law sends and the relation between the answers, so
``resverify vectors run``, an engine in another language and a pinned known failure give
the law's own verdict.

Two relations, each judged exactly in rationals on the backend's floats:

* :class:`Linear`: per element ``i``, ``|Σ_k c_k·A_k[i]| <= bound[i]`` where ``A_k`` is an
  array (``output``, ``grads/NAME``, ``tangent``) of the answer to request ``r_k``, optionally
  weighted element-wise (``w_k``) and summed to one number (``reduce = "sum"``: the duality
  ⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩). The bound is the law's, a rational fixed by the spec; ``inf`` checks
  nothing there. Every term's element must be finite where the bound is finite
  (``finite = "bounded"``), or everywhere (``finite = "all"``, the unrolled sum's rule).
* :class:`VarianceIdentity`: ``|Var y − [Var x + Var f + 2Cov(x, f)]| <= 2·sqrt(Var(x+f)·M) +
  M``, ``M = mean(b²)``, ``b`` the spec's budget of the merge ``x + f`` of the backend's own
  ``f`` (:func:`resverify.properties.laws_variance.check_sample_variance_identity`): its bound
  depends on the answer, so the file holds the rule, not a number.

A builder per property (:data:`BUILDERS`) turns the requests the law sent for one pinned
example (recorded on the exact oracle, in order) into its group, reading the law's
parameters from the example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num
from resverify.spec.budget import error_budget
from resverify.spec.codec import request_from_dict, request_to_dict
from resverify.spec.errors import UsageError
from resverify.spec.request import Request, Value

__all__ = ["BUILDERS", "Group", "Linear", "Term", "VarianceIdentity", "check", "from_doc",
           "to_doc"]

INF = float("inf")
Doc = dict[str, Any]


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
    """The requests one law sends and the relations between their answers."""

    requests: tuple[Request, ...]
    relations: tuple[Relation, ...]


# ----------------------------------------------------------------------------------------
# judging


def pick(value: Value, array: str) -> np.ndarray:
    """The array ``output``, ``tangent`` or ``grads/NAME`` of an answer."""
    if array == "output":
        return np.asarray(value.output)
    if array == "tangent":
        return np.asarray(value.tangent)
    return np.asarray(value.grads[array.removeprefix("grads/")])


def check(backend: Backend, group: Group, answers: Sequence[Value]) -> None:
    """Raise :class:`PropertyFailure` (kind ``law``) unless every relation holds on the
    backend's ``answers`` (one per request, each of the declared form)."""
    __tracebackhide__ = True
    for relation in group.relations:
        if isinstance(relation, VarianceIdentity):
            from resverify.properties.laws_variance import check_sample_variance_identity

            check_sample_variance_identity(backend, group.requests[relation.y])
        else:
            _check_linear(Context(backend.name, group.requests[relation.terms[0].request]),
                          relation, answers)


def _check_linear(ctx: Context, rel: Linear, answers: Sequence[Value]) -> None:
    __tracebackhide__ = True
    arrays = [pick(answers[t.request], t.array) for t in rel.terms]
    bound = np.asarray(rel.bound, dtype=object)
    if rel.reduce == "sum" and bound.item() == INF:
        return  # the analysis allows overflow on a term that counts: nothing to check
    for term, values in zip(rel.terms, arrays, strict=True):
        bad = np.argwhere(~np.isfinite(values.astype(np.float64)) & _needed(rel, term, values))
        ctx.check(bad.size == 0, f"{rel.law}: {term.array}{bad[:1].reshape(-1).tolist()} of "
                  f"request {term.request}: backend {ctx.backend} gives a non-finite value "
                  "where the bound is finite")
    if rel.reduce == "sum":
        total = sum((_weighted(t, a).sum() for t, a in zip(rel.terms, arrays, strict=True)),
                    Fraction(0))
        limit = bound.item()
        ctx.check(abs(total) <= limit, f"{rel.law}: backend {ctx.backend} gives {num(total)}, "
                  f"spec 0 up to {num(limit)}")
        return
    for index in np.ndindex(*bound.shape):
        limit = bound[index]
        if limit == INF:
            continue
        gap = sum((t.coef * _weight(t, index) * Fraction(float(a[index]))
                   for t, a in zip(rel.terms, arrays, strict=True)), Fraction(0))
        if abs(gap) > limit:
            ctx.fail(f"{rel.law}{list(index)}: backend {ctx.backend} misses by {num(gap)}, "
                     f"bound {num(limit)}")


def _needed(rel: Linear, term: Term, values: np.ndarray) -> np.ndarray:
    """Where a term's element must be finite: everywhere (``finite = "all"``), where its
    weight is non-zero (summed), else where the bound is finite."""
    if rel.finite == "all":
        return np.ones(values.shape, bool)
    if rel.reduce == "sum":
        weights = np.ones(values.shape, object) if term.weights is None else term.weights
        return np.asarray([w != 0 for w in weights.reshape(-1)], bool).reshape(values.shape)
    bound = np.asarray(rel.bound, dtype=object)
    return np.asarray([b != INF for b in bound.reshape(-1)], bool).reshape(bound.shape)


def _weight(term: Term, index: tuple[int, ...]) -> Fraction:
    return Fraction(1) if term.weights is None else Fraction(term.weights[index])


def _weighted(term: Term, values: np.ndarray) -> np.ndarray:
    """``coef·w·v`` exactly; a zero weight contributes nothing, whatever the value."""
    weights = np.ones(values.shape, object) if term.weights is None else term.weights
    exact = np.empty(values.shape, dtype=object)
    exact.reshape(-1)[:] = [Fraction(0) if w == 0 else Fraction(v) * term.coef * w
                            for v, w in zip(values.reshape(-1).tolist(),
                                            weights.reshape(-1).tolist(), strict=True)]
    return exact


# ----------------------------------------------------------------------------------------
# builders: the requests a law sent for one example -> its group


def _budget(request: Request, array: str) -> np.ndarray:
    budget = error_budget(request)
    chosen = budget.output if array == "output" else (
        getattr(budget, "tangent", None) if array == "tangent"
        else budget.grads[array.removeprefix("grads/")])
    return np.asarray(INF if chosen is None else chosen, dtype=np.float64)


def _rational_bound(parts: Sequence[tuple[Fraction, np.ndarray]], whole: bool) -> np.ndarray:
    """``Σ |c|·B`` exactly; INF where a budget is infinite (everywhere when ``whole``:
    the affine law skips an array with any infinite budget)."""
    shape = np.shape(parts[0][1])
    infinite = np.any([np.isinf(b) for _, b in parts], axis=0)
    if whole and np.any(infinite):
        infinite = np.ones(shape, bool)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = INF if infinite[index] else sum(
            (abs(c) * Fraction(float(b[index])) for c, b in parts), Fraction(0))
    return out


def _alpha_of(request: Request) -> tuple[str, Fraction]:
    merges = [n for n in request.program.order if n.op == "residual_add"]
    name = merges[-1].args[1]
    node = next(n for n in request.program.nodes if n.name == name)
    assert node.alpha is not None
    return name, Fraction(node.alpha)


def affine_in_alpha(requests: Sequence[Request], example: Mapping[str, Any]) -> Group | None:
    """``y(a) = (1-a)·y(0) + a·y(1)`` for the output and every gradient, within
    ``B_a + |1-a|·B_0 + |a|·B_1``."""
    a = Fraction(example["a"])
    at = {_alpha_of(r)[1]: k for k, r in enumerate(requests)}
    if not {Fraction(0), Fraction(1), a} <= set(at):
        return None
    coefs = ((at[a], Fraction(1)), (at[Fraction(0)], -(1 - a)), (at[Fraction(1)], -a))
    relations = []
    for array in ["output", *(f"grads/{n}" for n in requests[0].program.input_names)]:
        parts = [(c, _budget(requests[k], array)) for k, c in coefs]
        relations.append(Linear(f"{array} at α={a} against (1-α)·y(0) + α·y(1)",
                                tuple(Term(k, array, c) for k, c in coefs),
                                _rational_bound(parts, whole=True)))
    return Group(tuple(requests), tuple(relations))


def unrolled_sum(requests: Sequence[Request], example: Mapping[str, Any]) -> Group | None:
    """``x_L = x_0 + Σ_l a_l x_l`` over the backend's states, within ``B_L + Σ |a_l| B_l``."""
    factors = [Fraction(f) for f in example["factors"]]
    depth = {sum(n.op == "residual_add" for n in r.program.nodes): k
             for k, r in enumerate(requests)}
    if set(depth) != set(range(len(factors) + 1)):
        return None
    coef = dict.fromkeys(range(len(factors) + 1), Fraction(0))
    coef[len(factors)] += 1
    coef[0] -= 1
    for layer, a in enumerate(factors):
        coef[layer] -= a
    bounds = [(Fraction(1), _budget(requests[depth[len(factors)]], "output"))] + [
        (a, _budget(requests[depth[layer]], "output")) for layer, a in enumerate(factors)]
    terms = tuple(Term(depth[d], "output", c) for d, c in coef.items())
    return Group(tuple(requests), (Linear("x_L against x_0 + Σ a_l·x_l from the backend's "
                                          "own states", terms,
                                          _rational_bound(bounds, whole=False), "none",
                                          "all"),))


def variance_identity(requests: Sequence[Request], example: Mapping[str, Any]) -> Group | None:
    """The merge's request (its output node a ``residual_add``) and the branch's."""
    del example
    ends = [{n.name: n for n in r.program.nodes}[r.program.output].op for r in requests]
    if len(requests) != 2 or ends.count("residual_add") != 1:
        return None
    y = ends.index("residual_add")
    merge = {n.name: n for n in requests[y].program.nodes}[requests[y].program.output]
    return Group(tuple(requests), (VarianceIdentity(
        "Var(y) against Var x + Var f + 2Cov(x,f)", merge.args[0], y, 1 - y),))


def _exact(values: np.ndarray) -> np.ndarray:
    out = np.empty(np.shape(values), dtype=object)
    out.reshape(-1)[:] = [Fraction(v) for v in np.asarray(values).reshape(-1).tolist()]
    return out


def duality(requests: Sequence[Request], example: Mapping[str, Any]) -> Group | None:
    """``⟨ȳ, J t⟩ − ⟨Jᵀȳ, t⟩`` on one forward-mode answer, within
    ``Σ|ȳ_i|·B(Jt)_i + Σ_j|t_j|·B(x̄)_j`` (inf when a budget with a non-zero weight is)."""
    del example
    request = requests[0]
    tangents = request.tangents
    if len(requests) != 1 or tangents is None:
        return None
    parts = [("tangent", Fraction(1), _exact(request.cotangent))] + [
        (f"grads/{n}", Fraction(-1), _exact(tangents[n])) for n in request.program.input_names]
    bound: Fraction | float = Fraction(0)
    for array, _, weights in parts:
        budget = _budget(request, array)
        for w, b in zip(weights.reshape(-1).tolist(), budget.reshape(-1).tolist(), strict=True):
            if w != 0:
                bound = INF if bound == INF or b == INF else bound + abs(w) * Fraction(b)
    terms = tuple(Term(0, array, coef, weights) for array, coef, weights in parts)
    return Group((request,), (Linear("duality ⟨ȳ, J t⟩ − ⟨Jᵀȳ, t⟩", terms,
                                     np.array(bound, dtype=object), "sum"),))


def tangent_linearity(requests: Sequence[Request], example: Mapping[str, Any]) -> Group | None:
    """``J(s·t) = s·J t`` exactly for each factor the law uses (bound 0; inf where the
    spec's tangent budget is, as the law skips an overflowing tangent)."""
    from resverify.properties.laws_jvp import linearity_factors, scaled_tangents
    from resverify.reports.corpus import _digest

    del example
    base = requests[0]
    if base.tangents is None:
        return None
    at = {_digest(r): k for k, r in enumerate(requests)}
    relations = []
    for factor in linearity_factors(base.dtype, extremes=False):
        k = at.get(_digest(scaled_tangents(base, factor)))
        if k is None:
            return None
        budget = _budget(base, "tangent")
        limit = np.empty(budget.shape, dtype=object)
        limit.reshape(-1)[:] = [INF if b == INF else Fraction(0) for b in budget.reshape(-1)]
        relations.append(Linear(f"tangent of {factor}·t against {factor}·(tangent of t)",
                                (Term(k, "tangent", Fraction(1)),
                                 Term(0, "tangent", -factor)), limit))
    return Group(tuple(requests), tuple(relations))


Builder = Callable[[Sequence[Request], Mapping[str, Any]], Group | None]
BUILDERS: Mapping[str, Builder] = {
    "output_and_gradients_are_affine_in_alpha": affine_in_alpha,
    "stack_output_is_input_plus_sum_of_branches": unrolled_sum,
    "sample_variance_of_merge_is_sum_plus_twice_covariance": variance_identity,
    "tangent_and_gradients_satisfy_duality": duality,
    "tangent_is_linear_in_the_input_tangents": tangent_linearity,
}
"""Property → the builder of its group (the properties whose law relates answers)."""


FROM_ONE_REQUEST = ("sample_variance_of_merge_is_sum_plus_twice_covariance",)
"""The properties whose law takes one request and sends others itself: the saved vector of
a failure is enough to rebuild the group (:func:`law_requests`)."""


def law_requests(prop: str, request: Request) -> list[Request]:
    """The requests the law of ``prop`` sends when it is called on ``request`` alone (the
    saved vector of a failure), recorded on the exact oracle; only for laws that take one
    request (the sample variance identity)."""
    from resverify.properties.laws_variance import check_sample_variance_identity
    from resverify.reports.corpus import Oracle

    if prop not in FROM_ONE_REQUEST:
        raise UsageError(f"no vector group can be made from one saved request of {prop} "
                         f"(only of {', '.join(FROM_ONE_REQUEST)})")
    oracle = Oracle()
    check_sample_variance_identity(oracle, request)
    return list(oracle.seen.values())


# ----------------------------------------------------------------------------------------
# the file format (spec/schema/vectors.schema.json, $defs group)


def _bound_text(value: Fraction | float) -> str:
    from resverify.reports.corpus import rational

    return "inf" if value == INF else rational(Fraction(value))


def _exact_array(values: np.ndarray) -> Doc:
    from resverify.reports.corpus import rational

    return {"shape": list(values.shape),
            "exact": [rational(Fraction(v)) for v in values.reshape(-1).tolist()]}


def relation_doc(rel: Relation) -> Doc:
    if isinstance(rel, VarianceIdentity):
        return {"kind": "sample_variance_identity", "law": rel.law, "x": rel.x, "y": rel.y,
                "f": rel.f}
    terms = [{"request": t.request, "array": t.array, "coef": _bound_text(t.coef),
              "weights": None if t.weights is None else _exact_array(t.weights)}
             for t in rel.terms]
    bound = np.asarray(rel.bound, dtype=object)
    return {"kind": "linear", "law": rel.law, "reduce": rel.reduce, "finite": rel.finite,
            "terms": terms, "bound": {"shape": list(bound.shape),
                                      "bound": [_bound_text(b) for b in bound.reshape(-1)]}}


def to_doc(group: Group) -> Doc:
    """The ``requests`` and ``relations`` fields of a group file."""
    return {"requests": [request_to_dict(r) for r in group.requests],
            "relations": [relation_doc(r) for r in group.relations]}


def _fractions(texts: Sequence[str], shape: Sequence[int], where: str) -> np.ndarray:
    out = np.empty(len(texts), dtype=object)
    try:
        out[:] = [INF if t == "inf" else Fraction(t) for t in texts]
        return out.reshape(tuple(shape))
    except (ValueError, ZeroDivisionError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def _relation(doc: Mapping[str, Any], count: int, where: str) -> Relation:
    rel: Relation
    if doc["kind"] == "sample_variance_identity":
        rel = VarianceIdentity(doc["law"], doc["x"], doc["y"], doc["f"])
        used = [rel.y, rel.f]
    else:
        terms = tuple(Term(t["request"], t["array"], Fraction(t["coef"]),
                           None if t["weights"] is None else _fractions(
                               t["weights"]["exact"], t["weights"]["shape"], where))
                      for t in doc["terms"])
        rel = Linear(doc["law"], terms, _fractions(doc["bound"]["bound"],
                                                   doc["bound"]["shape"], where),
                     doc["reduce"], doc["finite"])
        used = [t.request for t in terms]
    if any(not 0 <= k < count for k in used):
        raise UsageError(f"{where}: a relation names request {max(used)} of {count}")
    return rel


def from_doc(doc: Mapping[str, Any], where: str) -> Group:
    """A group from its file's fields (already checked against the schema)."""
    requests = tuple(request_from_dict(r) for r in doc["requests"])
    return Group(requests, tuple(_relation(r, len(requests), where) for r in doc["relations"]))
