"""The file form of a vector group (spec/schema/vectors.schema.json, ``$defs/group``): the
requests a law relating several answers sends and its relations, as JSON.

Why here and only this: the group itself -- which requests a law sends for an example and
which relation must hold between the answers -- is the law's, in
:mod:`resverify.properties.relations`, where the Hypothesis test, the corpus exporter and
``resverify vectors run`` all take it from. A corpus, an engine in another language and a
pinned known failure only need it written down and read back, exactly: rationals as text
(``"-13/4"``), ``"inf"`` where a bound claims nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.properties.relations import (
    INF,
    Group,
    Linear,
    Relation,
    Term,
    VarianceIdentity,
)
from resverify.spec.codec import request_from_dict, request_to_dict
from resverify.spec.errors import UsageError

__all__ = []

Doc = dict[str, Any]


def rational(value: Fraction | int) -> str:
    """``"p/q"`` (or ``"p"``) for a rational."""
    exact = Fraction(value)
    return str(exact) if exact.denominator == 1 else f"{exact.numerator}/{exact.denominator}"


def _bound_text(value: Fraction | float) -> str:
    return "inf" if value == INF else rational(Fraction(value))


def _exact_array(values: np.ndarray) -> Doc:
    return {"shape": list(values.shape),
            "exact": [rational(Fraction(v)) for v in values.reshape(-1).tolist()]}


def relation_doc(rel: Relation) -> Doc:
    """The file form of one relation."""
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
