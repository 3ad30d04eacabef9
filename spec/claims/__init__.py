"""The claim catalog: every checkable fact of the seed documents, with the check that computes it.

Why: the seeds state facts (fixture values, Jacobians, depth and variance laws) that the
project was built from. Each is kept here as a :class:`Claim` with a stable id (``S01`` …
``S30`` of ``SEEDS.md``; ``S07a``/``S07b`` and ``S17a``/``S17b`` where one item holds a
settled fact and an open one), the seed file and section it comes from, a statement in our
own words, the exact expected value, and the function that observes it, with the exact
interpreter (:mod:`resverify.spec.exact`) or the symbolic model
(:mod:`resverify.spec.symbolic`). Each claim is declared by a decorator on that function
(:mod:`~resverify.spec.claims.register`), so all of it reads as one block.

Claims about an implementation also carry a ``backend`` check that takes a backend's
``run(request) -> Result`` wrapped in a :class:`Guard` (capabilities respected, answers
checked for form and dtype); :mod:`spec` imports no backend, so ``reports`` supplies it.
Observations are written once against an *interpreter* (request -> flat :class:`Run`), so
the exact and the backend sides compute the same thing. Claims the seeds get subtly wrong
or leave open carry a ``note`` with the project's decision.

Section headings are quoted in the seed's own language (``ru`` or ``zh``) with our English
translation beside them.

Layout: one module per seed document holds its sections and claims, each claim's
declaration on its observing function (:mod:`~resverify.spec.claims.course` S01–S14,
:mod:`~resverify.spec.claims.lecture` S15–S20, :mod:`~resverify.spec.claims.notes` S21–S30);
adding a claim is one decorated function in one of them.
:mod:`~resverify.spec.claims.register` holds the decorators,
:mod:`~resverify.spec.claims.model` defines claims and runs,
:mod:`~resverify.spec.claims.build` the program and request helpers they share,
:mod:`~resverify.spec.claims.outcome` the verdicts.

Public API: :data:`CLAIMS`, :data:`SEED_FILES`, :class:`Claim`, :class:`Section`,
:class:`ClaimOutcome` with one :class:`BackendSide` per backend, :func:`check_claim`,
:func:`overall_status`, :func:`outcome_dict`, :func:`side_dict`, :func:`jsonable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from resverify.spec.claims.model import (
    BackendSide,
    Claim,
    ClaimOutcome,
    Guard,
    Run,
    Section,
    Target,
    overall_status,
)
from resverify.spec.claims.outcome import check_claim, jsonable, outcome_dict, side_dict

__all__ = [
    "CLAIMS",
    "SEED_FILES",
    "BackendSide",
    "Claim",
    "ClaimOutcome",
    "Guard",
    "Run",
    "Section",
    "Target",
    "check_claim",
    "jsonable",
    "outcome_dict",
    "overall_status",
    "side_dict",
]

if TYPE_CHECKING:
    SEED_FILES: tuple[str, ...]
    CLAIMS: tuple[Claim, ...]


def __getattr__(name: str) -> object:
    """``CLAIMS`` and ``SEED_FILES``, built on first use: the seed modules import SymPy,
    which ``resverify --help`` and the verdict helpers above must not pay for."""
    if name not in ("CLAIMS", "SEED_FILES"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from resverify.spec.claims import course, lecture, notes

    globals().update(SEED_FILES=(course.COURSE, lecture.LECTURE, notes.NOTES),
                     CLAIMS=(*course.CLAIMS, *lecture.CLAIMS, *notes.CLAIMS))
    return globals()[name]
