"""Checking a claim and writing its outcome as plain JSON data.

Why: a claim passes when its check returns exactly the expected value; a check that raises
is a failed claim, reported with its reason, never a crash of the whole catalog. Backends
that lack an op or dtype are skipped, not failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction

import numpy as np

from spec.claims.model import BackendSkip, Claim, ClaimOutcome, Runner

__all__ = ["check_claim", "jsonable", "outcome_dict"]


def _observe(check: Callable[[], object]) -> tuple[object, bool]:
    try:
        return check(), True
    except Exception as exc:  # a broken check is a failed claim, reported, not a crash
        return f"error: {type(exc).__name__}: {exc}", False


def check_claim(claim: Claim, run: Runner | None = None) -> ClaimOutcome:
    """Recompute ``claim``; with a backend's ``run``, also run its backend check."""
    observed, ok = _observe(claim.check)
    passed = ok and observed == claim.expected
    if run is None or claim.backend is None:
        return ClaimOutcome(claim, observed, "pass" if passed else "fail")
    backend = claim.backend
    try:
        got: object = backend(run)
        backend_status = "pass" if got == claim.expected_from_backend else "fail"
    except BackendSkip as skip:
        got, backend_status = f"skipped: {skip}", "skipped"
    except Exception as exc:  # a crashing backend fails the claim, with the reason shown
        got, backend_status = f"error: {type(exc).__name__}: {exc}", "fail"
    status = "pass" if passed and backend_status != "fail" else "fail"
    return ClaimOutcome(claim, observed, status, got, backend_status)


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


def outcome_dict(outcome: ClaimOutcome) -> dict[str, object]:
    """One claim's outcome as plain JSON data (the ``claims`` entries of reports)."""
    claim = outcome.claim
    out: dict[str, object] = {
        "id": claim.id, "source": claim.source.file, "section": claim.source.heading,
        "section_en": claim.source.english, "section_language": claim.source.language,
        "statement": claim.statement, "expected": jsonable(claim.expected),
        "observed": jsonable(outcome.observed), "status": outcome.status, "note": claim.note,
    }
    if isinstance(claim.expected, Fraction):
        out["expected_float"] = float(claim.expected)
    if outcome.backend_status is not None:
        out["backend_expected"] = jsonable(claim.expected_from_backend)
        out["backend_observed"] = jsonable(outcome.backend_observed)
        out["backend_status"] = outcome.backend_status
    return out
