"""Checking a claim and writing its outcome as plain JSON data.

Why: a claim passes when its check returns exactly the expected value; a check that raises
is a failed claim, reported with its reason, never a crash of the whole catalog. Each
backend gets its own side: ``pass``, ``fail`` (with the kind of failure) or ``skipped``
(the check needs a request the backend does not claim), and the claim's overall status is
:func:`~resverify.spec.claims.model.overall_status` of the exact side and every backend side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

import numpy as np

from resverify.spec.claims.model import (
    BackendRaised,
    BackendSide,
    Claim,
    ClaimOutcome,
    Guard,
    NotClaimed,
    Refused,
    Target,
)
from resverify.spec.errors import BackendFault

__all__ = ["check_claim", "jsonable", "outcome_dict", "side_dict"]


def _observe(check: Callable[[], object]) -> tuple[object, bool]:
    try:
        return check(), True
    except Exception as exc:  # a broken check is a failed claim, reported, not a crash
        return f"error: {type(exc).__name__}: {exc}", False


def _backend_side(claim: Claim, target: Target) -> BackendSide:
    """Run ``claim``'s backend check on ``target`` through a :class:`Guard`."""
    assert claim.backend is not None
    expected, guard = claim.expected_from_backend, Guard(target)

    def failed(reason: str, kind: str) -> BackendSide:
        return BackendSide(target.name, expected, None, "fail", reason, kind)

    try:
        observed = claim.backend(guard)
    except NotClaimed as skip:
        return BackendSide(target.name, expected, None, "skipped", str(skip))
    except (BackendFault, Refused, BackendRaised) as exc:
        return failed(str(exc), exc.kind)
    except Exception as exc:  # the check could not read the answer: name what it was
        if guard.last_error is not None:
            return failed(f"{guard.last_error}, where the claim needs a value", Refused.kind)
        return failed(f"the check raised {type(exc).__name__}: {exc}", BackendRaised.kind)
    if observed == expected:
        return BackendSide(target.name, expected, observed, "pass")
    return BackendSide(target.name, expected, observed, "fail", failure_kind="law")


def check_claim(claim: Claim, *backends: Target) -> ClaimOutcome:
    """Recompute ``claim`` exactly and, where it has a backend check, on each backend."""
    observed, ok = _observe(claim.check)
    exact_status = "pass" if ok and observed == claim.expected else "fail"
    sides = () if claim.backend is None else tuple(_backend_side(claim, b) for b in backends)
    return ClaimOutcome(claim, observed, exact_status, sides)


def jsonable(value: object) -> object:
    """Plain JSON data: Fractions as exact strings ("13/4"), tuples as lists, SymPy as text."""
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    return str(value)


def side_dict(side: BackendSide) -> dict[str, object]:
    """One backend's side of a claim as plain JSON data."""
    return {"backend": side.backend, "expected": jsonable(side.expected),
            "observed": jsonable(side.observed), "status": side.status,
            "reason": side.reason, "failure_kind": side.failure_kind}


def outcome_dict(outcome: ClaimOutcome) -> dict[str, object]:
    """One claim's outcome as plain JSON data (``resverify claims --json``, the reports).

    ``expected``/``observed``/``exact_status`` are the exact side, ``backends`` holds one
    :func:`side_dict` per backend checked (empty for a claim with no backend check), and
    ``status`` is the overall verdict.
    """
    claim = outcome.claim
    out: dict[str, object] = {
        "id": claim.id, "source": claim.source.file, "section": claim.source.heading,
        "section_en": claim.source.english, "section_language": claim.source.language,
        "statement": claim.statement, "expected": jsonable(claim.expected),
        "observed": jsonable(outcome.observed), "exact_status": outcome.exact_status,
        "status": outcome.status, "backends": [side_dict(s) for s in outcome.backends],
        "note": claim.note,
    }
    if isinstance(claim.expected, Fraction):
        out["expected_float"] = float(claim.expected)
    return out
