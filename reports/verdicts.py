"""Every verdict above the element, decided in one place.

Why one module: the element's verdict (a value inside its budget or not) has one rule,
:mod:`resverify.spec.compare`; everything built on it (is this test's failure the
backend's fault, has this backend passed, did the run pass, what does a matrix cell say,
is a known failure still expected) used to be decided where it was shown, by the JSON
writer, the matrix and the known-failures reader.
Two places that decide one verdict drift apart; here each rule is written once, and
report.json, report.md and report.html only render what it decided.

Every function is pure: data in (the report's own records, as report.json holds them), a
verdict out. None reads a file, calls a backend or looks at the
clock, so each rule is tested alone (``tests/reports/test_verdicts.py``).

What it decides, one section each, in this order:

1. a property record: its status from pytest's outcome, whether the test ran (checked an
   example), could not run, ran fewer examples than asked, and whether its failure is
   charged to its backend;
2. a claim: each backend's side, the exact side, and the claim's own status;
3. a backend's status: ``fail``, ``pass`` or ``unjudged``;
4. the run's status: ``incomplete``, ``fail``, ``unjudged``, ``partly judged`` or ``pass``;
5. a conformance-matrix cell, and a backend's verdict in one mode;
6. a known failure's state (``expected``, ``fixed``, ``unjudged``) and which failures
   it expects, and the records once the known failures are applied;
7. a vector's or a group's status (``skipped``, ``fail``, ``pass``) once judged, and a
   property's verdict over its vectors (the judging itself, which asks a backend, is the
   driver :mod:`resverify.properties.judge`, which says what it found and decides nothing);
8. a residual block's law record (a documented finding's failure is ``expected``, its pass
   ``fixed``), a block's verdict over its records, and the blocks section's;
9. a joined report (``resverify join``): its status over its machines' runs, and a
   claim's over the machines that checked it.

Every status is a word of one vocabulary, :data:`STATUSES` (the report schema's
``$defs/status``); each kind of record takes the part of it its rule can give
(:data:`RECORD_STATUSES`). Report schema 8 made it one: ``passed``/``failed`` became
``pass``/``fail``, ``nothing checked`` (a backend, the run, a mode) and ``not checked``
(a known failure) ``unjudged``, and the run's ``partly checked`` ``partly judged``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resverify.spec.claims import overall_status

if TYPE_CHECKING:
    from resverify.properties.judge import Judged

__all__ = []

Record = Mapping[str, Any]


STATUSES = ("pass", "fail", "expected", "fixed", "xfailed", "skipped", "not claimed",
            "unjudged", "partly judged", "incomplete", "none")
"""The one verdict vocabulary: every status of every record the report holds.

``pass`` and ``fail`` as judged; ``expected`` a failure a known failure (or a block's
documented finding) expects, ``fixed`` one that passes now (it fails the run); ``xfailed``
a test pytest expected to fail; ``skipped`` not run (a request the backend does not claim);
``not claimed`` a matrix cell or mode the backend does not claim (a claim, not a verdict);
``unjudged`` nothing was checked (no verdict without evidence); ``partly judged`` some
records judged nothing while the rest held; ``incomplete`` a run that did not finish;
``none`` a matrix cell with no test."""
Doc = dict[str, Any]


# --- 1. a property record ---------------------------------------------------------------

PROPERTY_OUTCOMES: Mapping[str, str] = {"passed": "pass", "failed": "fail",
                                         "skipped": "skipped", "xfailed": "xfailed"}
"""pytest's outcomes a property record keeps, each as its word of :data:`STATUSES`; any
other outcome is a failure."""
_CHECKED = ("pass", "fail", "expected")


def property_status(outcome: object) -> str:
    """A property record's status from pytest's outcome: its word in
    :data:`PROPERTY_OUTCOMES` (``passed`` is ``pass``, ``failed`` is ``fail``), anything else
    (an error in setup, a crashed worker) ``fail``."""
    return PROPERTY_OUTCOMES.get(str(outcome), "fail")


def ran(prop: Record) -> bool:
    """The test checked something: it passed, failed or failed as expected, on at least one
    example (an unknown count, ``None``, is a test that does not count examples)."""
    return prop["status"] in _CHECKED and (prop["examples"] is None or prop["examples"] > 0)


def could_not_run(prop: Record) -> bool:
    """The test was skipped, or passed without running a single example."""
    return bool(prop["status"] == "skipped" or (prop["status"] == "pass"
                                                and prop["examples"] == 0))


def short_of_examples(prop: Record) -> bool:
    """A passed test that ran fewer examples than its profile asks (a known count of each)."""
    done, wanted = prop["examples"], prop.get("examples_wanted")
    return bool(prop["status"] == "pass" and done is not None and wanted and done < wanted)


def charged(prop: Record) -> bool:
    """A failed property record counts against its backend: one of its failures (or its
    ``failure_kind``, when it lists none) is of a kind other than ``internal`` (an error of
    resverify's own check fails the run, not the backend)."""
    kinds = [f["kind"] for f in prop.get("failures") or ()] or [prop.get("failure_kind")]
    return any(kind != "internal" for kind in kinds)


# --- 2. a claim -------------------------------------------------------------------------

FAILURE_KINDS = ("law", "refused", "raised", "timeout", "crash", "bad_result", "internal")
"""The kinds a failure may be of; a failed claim side of any other kind is a ``law``."""


def claim_side_status(raw_status: object) -> str:
    """A backend's side of a claim: ``pass`` or ``skipped`` as it is, anything else ``fail``
    (a side that says nothing clear is not a pass)."""
    return str(raw_status) if raw_status in ("pass", "skipped") else "fail"


def claim_side_failure_kind(status: str, kind: object) -> str | None:
    """The failure kind of a claim side: none unless it failed, else its kind when it is one
    of :data:`FAILURE_KINDS`, else ``law``."""
    if status != "fail":
        return None
    return str(kind) if kind in FAILURE_KINDS else "law"


def exact_status(raw_status: object) -> str:
    """The exact side of a claim: ``pass`` only when it says so, else ``fail``."""
    return "pass" if raw_status == "pass" else "fail"


def claim_status(exact: str, sides: Iterable[str]) -> str:
    """The claim's own status before known failures: ``fail`` when a side fails, else
    ``skipped`` when one could not run, else ``pass``
    (:func:`resverify.spec.claims.overall_status`, the claim checker's own rule)."""
    return overall_status(exact, sides)


def claim_expected(claim: Record) -> bool:
    """A claim whose failures are all expected: its exact side passes, no backend's side
    fails, and at least one side is ``expected`` (a known failure matched it)."""
    sides = [side["status"] for side in claim["backends"]]
    return claim["exact_status"] == "pass" and "fail" not in sides and "expected" in sides


# --- 3. a backend -----------------------------------------------------------------------

def backend_status(name: str, properties: Sequence[Record] = (),
                   claims: Sequence[Record] = (), known: Sequence[Record] = ()) -> str:
    """Backend ``name``'s verdict from the report's records: ``fail`` when a property test
    on it failed and is :func:`charged` to it, a claim fails on its side, or a known failure
    of it is ``fixed``; else ``pass`` when a test :func:`ran` on it; else ``unjudged``
    (nothing was checked). An ``expected`` failure does not fail it."""
    mine = [p for p in properties if p["backend"] == name]
    if _charged_failure(mine) or _claim_fails_on(name, claims) or _fixed_on(name, known):
        return "fail"
    return "pass" if any(ran(p) for p in mine) else "unjudged"


def _charged_failure(properties: Sequence[Record]) -> bool:
    return any(p["status"] == "fail" and charged(p) for p in properties)


def _claim_fails_on(name: str, claims: Sequence[Record]) -> bool:
    sides = (side for claim in claims for side in claim.get("backends") or ())
    return any(side["backend"] == name and side["status"] == "fail" for side in sides)


def _fixed_on(name: str, known: Sequence[Record]) -> bool:
    return any(k["backend"] == name and k["status"] == "fixed" for k in known)


# --- 4. the run -------------------------------------------------------------------------

def run_status(*, complete: bool, properties: Iterable[str], claims: Iterable[str],
               known: Iterable[str], backends: Iterable[str], blocks: str | None = None,
               exact: str | None = None) -> str:
    """The run's verdict from the statuses of its records: ``incomplete`` when it did not
    finish; else ``fail`` when a property test or a claim failed (``expected`` ones do
    not; an ``internal`` failure does: it is resverify's own), a known failure is
    ``fixed`` or the blocks section (``blocks``, its :func:`blocks_verdict`; None: the run
    has none) is ``fail``; else ``unjudged`` when a backend had nothing checked or the
    blocks section judged nothing; else ``partly judged`` when the blocks section is
    (some law records judged nothing, others held: not a pass, and not "nothing"); else
    ``pass``. The exact section (``exact``, its verdict; None: the run has none) counts as
    the blocks section does."""
    if not complete:
        return "incomplete"
    sections = (blocks, exact)
    if "fail" in (*properties, *claims, *sections) or "fixed" in known:
        return "fail"
    if "unjudged" in (*backends, *sections):
        return "unjudged"
    return "partly judged" if "partly judged" in sections else "pass"


# --- 5. the conformance matrix ----------------------------------------------------------

ANY_DTYPE = "any"
"""The column of a property with no dtype parameter."""
CELL_STATUSES = ("fail", "expected", "pass", "xfailed", "skipped", "not claimed", "none")
"""A cell's statuses, the one that wins first: a failure anywhere in the cell wins."""
_RANK = {status: len(CELL_STATUSES) - 2 - i for i, status in enumerate(CELL_STATUSES)}


def claims_column(backend: Record | None, dtype: str, mode: str) -> bool:
    """Whether the backend claims ``dtype`` (the column ``any`` always) and ``mode``; a
    backend the report does not list claims everything (nothing is known against it)."""
    if backend is None:
        return True
    return (dtype == ANY_DTYPE or dtype in backend["dtypes"]) and mode in backend["modes"]


def cell_status(prop: Record, backend: Record | None, dtype: str) -> str:
    """What one property record says in its matrix cell: its status, except that a test
    skipped because the backend does not claim the dtype or the mode is ``not claimed``
    (a claim, not a verdict)."""
    status = str(prop["status"])
    if status == "skipped" and not claims_column(backend, dtype, str(prop.get("mode") or "vjp")):
        return "not claimed"
    return status


def worse_cell_status(current: str, new: str) -> str:
    """The cell's status once one more record joins it: the one first in
    :data:`CELL_STATUSES` (an unknown status counts as ``fail``; ties keep ``current``)."""
    return new if _RANK.get(new, _RANK["fail"]) > _RANK.get(current, _RANK["fail"]) \
        else current


def cell_checked(status: str) -> bool:
    """A cell that checked something or was asked to: any status but ``not claimed`` and
    ``none`` (a folded row counts these dtypes as the ones checked)."""
    return status not in ("not claimed", "none")


def mode_status(props: Sequence[Record], claimed: bool) -> str:
    """A backend's verdict in one mode from its property records in that mode: ``fail``
    when one failed (even in a mode it does not claim), else ``not claimed``, else
    ``pass`` when a test :func:`ran`, else ``unjudged``."""
    if any(p["status"] == "fail" for p in props):
        return "fail"
    if not claimed:
        return "not claimed"
    return "pass" if any(ran(p) for p in props) else "unjudged"


# --- 6. known failures ------------------------------------------------------------------

def vector_entry_state(verdict_status: str) -> str:
    """A known failure's state from its vector's verdict on its backend: still failing,
    ``expected``; passing now, ``fixed`` (which fails the run); anything else (the
    backend could not be asked) ``unjudged``."""
    return {"fail": "expected", "pass": "fixed"}.get(verdict_status, "unjudged")


def failure_kinds(prop: Record) -> set[str]:
    """The kinds of a failed test's failures (its ``failure_kind`` when it lists none,
    ``law`` when it names none)."""
    kinds = {str(f["kind"]) for f in prop.get("failures") or ()}
    return kinds or {str(prop.get("failure_kind") or "law")}


def expects(entry: Record, prop: Record) -> bool:
    """A checked known failure expects a failed property test: the entry is ``expected``,
    names the test's backend, property and dtype, and every failure of the test is of the
    entry's kind (a crash is never hidden by a known wrong value)."""
    return (entry["status"] == "expected" and entry["property"] == prop["property"]
            and entry["backend"] == prop["backend"] and entry["dtype"] == prop["dtype"]
            and failure_kinds(prop) == {entry["kind"]})


def expecting(entries: Sequence[Record], prop: Record) -> Any:
    """The first checked entry that :func:`expects` the failed property test, or None."""
    return next((e for e in entries if expects(e, prop)), None)


@dataclass(frozen=True)
class ClaimSettlement:
    """What a claim entry learns from one side of its claim: its new ``status`` (None: it
    stays as it is), the ``detail`` it shows, and whether that side becomes ``expected``."""

    status: str | None
    detail: str
    side_expected: bool = False


def settle_claim_side(entry: Record, side: Record) -> ClaimSettlement:
    """A claim entry against its backend's side of the claim: a failure of the entry's
    kind is ``expected`` (and so is the side); a pass is ``fixed``; anything else (skipped,
    or a failure of another kind) leaves the entry as it is and says why."""
    if side["status"] == "fail" and side["failure_kind"] == entry["kind"]:
        return ClaimSettlement("expected", side["reason"] or "the claim fails", True)
    if side["status"] == "pass":
        return ClaimSettlement("fixed", "the claim passes now")
    return ClaimSettlement(None, f"claim {entry['claim']} is {side['status']} on "
                                 f"{entry['backend']}")


def known_failures_settled(entries: Sequence[Record], properties: Sequence[Record],
                           claims: Sequence[Record]) -> tuple[list[Doc], list[Doc], list[Doc]]:
    """The records once the checked known-failures ``entries`` are applied, as new records
    (the ones given are not changed): a failed property test an entry :func:`expecting`
    is ``expected`` (with the entry's number in ``known_failure``); each claim entry is
    settled by its backend's side of its claim (:func:`settle_claim_side`; no side: it stays
    ``unjudged`` and says so), the side it expects is ``expected``, and so is a claim
    whose failures are all expected (:func:`claim_expected`). Returns ``(entries,
    properties, claims)``."""
    entries_out = [dict(e) for e in entries]
    claims_out = [{**c, "backends": [dict(s) for s in c["backends"]]} for c in claims]
    props_out: list[Doc] = []
    for prop in properties:
        entry = expecting(entries_out, prop) if prop["status"] == "fail" else None
        props_out.append(dict(prop) if entry is None else
                         {**prop, "status": "expected", "known_failure": entry["entry"]})
    for entry in entries_out:
        if entry["claim"] is not None and entry["detail"] is None:
            _settle_claim(entry, claims_out)
    return entries_out, props_out, claims_out


def _settle_claim(entry: Doc, claims: Sequence[Doc]) -> None:
    """Claim entry ``entry`` settled by its backend's side of each claim it names, on the
    copies :func:`known_failures_settled` made."""
    sides = [(claim, side) for claim in claims if claim["id"] == entry["claim"]
             for side in claim["backends"] if side["backend"] == entry["backend"]]
    if not sides:
        entry["detail"] = f"claim {entry['claim']} was not checked on {entry['backend']}"
    for claim, side in sides:
        settled = settle_claim_side(entry, side)
        if settled.side_expected:
            side["status"] = "expected"
        entry["status"] = settled.status or entry["status"]
        entry["detail"] = settled.detail
        if claim_expected(claim):
            claim["status"] = "expected"


__all__ += ["known_failures_settled"]


# --- 7. a vector, a group, and a property over its vectors ------------------------------

VECTOR_STATUS_RANK: Mapping[str, int] = {"fail": 2, "pass": 1, "skipped": 0}
"""How much a vector's status says about its property: one failure outweighs any pass,
one pass outweighs a skip."""


def vector_status(judged: Judged) -> str:
    """A vector's or a group's status once judged (a corpus entry, a saved vector):
    ``skipped`` when the backend does not claim one of its requests (nothing was sent),
    ``fail`` when a check failed, else ``pass``."""
    if judged.unclaimed is not None:
        return "skipped"
    return "fail" if judged.kind is not None else "pass"


def vector_verdict(judged: Judged) -> dict[str, Any]:
    """The record of a judged vector or group: its :func:`vector_status`, the failure's
    ``kind`` (None unless it failed) and its ``message``: the reason it was skipped, the
    failure's message on one line, or empty for a pass."""
    status = vector_status(judged)
    if status == "skipped":
        return {"status": status, "kind": None, "message": judged.unclaimed}
    if status == "fail":
        return {"status": status, "kind": judged.kind, "message": " ".join(judged.message.split())}
    return {"status": status, "kind": None, "message": ""}


def property_verdicts(verdicts: Iterable[Record]) -> dict[tuple[str, str], Record]:
    """``(property, dtype)`` -> the verdict of its vectors, as the property suite gives one
    verdict per test: the first failure, else the first pass, else the first skip. Each
    verdict is a record with ``property``, ``dtype`` and ``status``."""
    chosen: dict[tuple[str, str], Record] = {}
    for verdict in verdicts:
        key = (verdict["property"], verdict["dtype"])
        held = chosen.get(key)
        if held is None or (VECTOR_STATUS_RANK[verdict["status"]]
                            > VECTOR_STATUS_RANK[held["status"]]):
            chosen[key] = verdict
    return chosen


__all__ += ["VECTOR_STATUS_RANK", "property_verdicts", "vector_status", "vector_verdict"]


# --- 8. residual blocks -----------------------------------------------------------------

BLOCK_LAW_VERDICTS = ("pass", "fail", "unjudged", "expected", "fixed")
"""A block's law record: as judged (``pass``, ``fail``, ``unjudged``), or, where the block's
recipe documents a finding for the law, ``expected`` (it fails as written up) or ``fixed``
(it passes: the finding no longer holds)."""
BLOCK_VERDICTS = ("pass", "expected", "fail", "unjudged", "partly judged")
"""A block's verdict, and the blocks section's."""


def block_law_verdict(outcome: str, kind: str | None, finding_kind: str | None) -> str:
    """A law record's verdict from its ``outcome`` (``pass``, ``fail``, ``unjudged``; any
    other word is ``fail``), its failure's ``kind`` and the kind the recipe's documented
    finding for the law expects (None: no finding). With a finding, a failure of its kind is
    ``expected`` and a pass is ``fixed`` (which fails the block until the declaration is
    removed); a failure of another kind stays ``fail`` (a crash is never hidden by a
    documented wrong value) and an unjudged record stays ``unjudged``."""
    judged = outcome if outcome in ("pass", "fail", "unjudged") else "fail"
    if finding_kind is None or judged == "unjudged":
        return judged
    if judged == "pass":
        return "fixed"
    return "expected" if (kind or "law") == finding_kind else "fail"


def block_verdict(laws: Sequence[str]) -> str:
    """A block's verdict from its law records' verdicts (:data:`BLOCK_LAW_VERDICTS`):
    ``fail`` when one failed or is ``fixed`` (an unknown word counts as ``fail``); else
    ``unjudged`` when none judged anything, or there are none (no verdict without evidence);
    else ``partly judged`` when some judged nothing (or were themselves ``partly
    judged``: a section over blocks) and others held; else ``expected`` when a documented
    finding failed as written up; else ``pass``."""
    if any(v in ("fail", "fixed") or v not in (*BLOCK_LAW_VERDICTS, *BLOCK_VERDICTS)
           for v in laws):
        return "fail"
    if all(v == "unjudged" for v in laws):
        return "unjudged"
    if any(v in ("unjudged", "partly judged") for v in laws):
        return "partly judged"
    return "expected" if "expected" in laws else "pass"


def blocks_verdict(blocks: Sequence[str], interrupted: bool) -> str:
    """The blocks section's verdict from its blocks' verdicts (:data:`BLOCK_VERDICTS`), the
    rule of :func:`block_verdict`: ``fail`` wins, then ``unjudged`` (no block, or none
    judged anything), then ``partly judged`` (some block judged nothing or part, or the run
    was ``interrupted`` so blocks went unchecked), then ``expected``, then ``pass``."""
    return block_verdict([*blocks, *(["unjudged"] if interrupted else [])])


EXACT_JUDGEMENT_VERDICTS = ("pass", "fail", "partly judged")
"""One exact judgement of a block in a dtype (:attr:`resverify.blocks.exact.Judgement.verdict`,
decided there, on the elements)."""
EXACT_VERDICTS = ("pass", "fail", "unjudged", "partly judged")
"""A block's verdict over its exact judgements, and the exact section's: the rule of
:func:`blocks_verdict`, a block not traced counting ``unjudged``."""

__all__ += ["BLOCK_LAW_VERDICTS", "BLOCK_VERDICTS", "EXACT_JUDGEMENT_VERDICTS",
            "EXACT_VERDICTS", "block_law_verdict", "block_verdict", "blocks_verdict"]


# --- 9. a joined report ----------------------------------------------------------------

JOINED_RUN_ORDER = ("incomplete", "fail", "unjudged", "partly judged", "pass")
"""The statuses of runs (:func:`run_status`), the one that wins first in a joined report."""
JOINED_CLAIM_ORDER = ("fail", "expected", "skipped", "pass")
"""A claim's statuses on several machines, the one that wins first."""


def _first_of(order: Sequence[str], statuses: Iterable[str], empty: str) -> str:
    seen = set(statuses)
    return next((status for status in order if status in seen), empty)


def joined_status(runs: Iterable[str]) -> str:
    """A joined report's verdict from its runs' statuses, the rule of :func:`run_status`
    over machines: ``incomplete`` when a run did not finish, else ``fail`` when one
    failed, else ``unjudged`` when one checked nothing (or there is no run), else
    ``partly judged`` when one's blocks were partly judged, else ``pass``. Each run keeps
    its own verdict; this one never hides a machine's."""
    return _first_of(JOINED_RUN_ORDER, runs, "unjudged")


def joined_claim_status(machines: Iterable[str]) -> str:
    """A claim's status over the machines that checked it (each its report's claim
    ``status``): ``fail`` when it failed on one, else ``expected`` when a known failure
    expected it on one, else ``skipped`` when one could not check it (or none did), else
    ``pass``."""
    return _first_of(JOINED_CLAIM_ORDER, machines, "skipped")


__all__ += ["JOINED_CLAIM_ORDER", "JOINED_RUN_ORDER", "joined_claim_status", "joined_status"]


# --- the vocabulary, per record ---------------------------------------------------------

RECORD_STATUSES: Mapping[str, tuple[str, ...]] = {
    "run": ("pass", "fail", "unjudged", "partly judged", "incomplete"),
    "backend": ("pass", "fail", "unjudged"),
    "property": ("pass", "fail", "skipped", "xfailed", "expected"),
    "claim": JOINED_CLAIM_ORDER,
    "claim side": ("pass", "fail", "skipped", "expected"),
    "exact side": ("pass", "fail"),
    "matrix cell": CELL_STATUSES,
    "mode": ("pass", "fail", "unjudged", "not claimed"),
    "known failure": ("expected", "fixed", "unjudged"),
    "vector": tuple(VECTOR_STATUS_RANK),
    "block law": BLOCK_LAW_VERDICTS,
    "block": BLOCK_VERDICTS,
    "exact judgement": EXACT_JUDGEMENT_VERDICTS,
    "exact": EXACT_VERDICTS,
    "exact path": ("pass", "fail", "partly judged", "unjudged"),
    "model layer laws": ("pass", "fail", "unjudged"),
}
"""The part of :data:`STATUSES` each kind of record can take (a vector group's is a
vector's); the report schema's field for each names the same words."""

__all__ += ["RECORD_STATUSES", "STATUSES"]
