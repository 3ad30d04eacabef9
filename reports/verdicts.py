"""Every verdict above the element, decided in one place.

Why one module: a verdict that the JSON writer decides and the Markdown writer decides
again drifts apart, and a rule spread over four writers can be read (and tested) nowhere
whole. Here each rule is a pure function, data in and verdict out: no file is read, no
backend is called, nothing is printed. The report writers (:mod:`resverify.reports.
json_report`, :mod:`~resverify.reports.matrix`, :mod:`~resverify.reports.markdown`,
:mod:`~resverify.reports.html`), the known-failures bookkeeping
(:mod:`resverify.reports.known_failures`) and the mutant runner (``tools/mutant_runs.py``)
call these functions and only render, store or count what they return.

The element's verdict (is this number within its budget?) is :mod:`resverify.spec.compare`'s;
everything built on it is decided here, in these sections:

* **Property records**: whether a failed test is charged to its backend
  (:func:`charged`), whether a test checked anything (:func:`checked`, :func:`not_run`),
  whether a passed test ran fewer examples than its profile asks (:func:`ran_short`).
* **Claims**: a backend's side (:func:`claim_side_status`, :func:`claim_failure_kind`) and a
  claim's overall status, an expected side included (:func:`claim_status`).
* **Backends**: a backend's status in the run (:func:`backend_status`).
* **The run**: the status of the whole run (:func:`run_status`).
* **The conformance matrix**: a cell's status (:func:`cell_status`, :func:`worse_cell`) and a
  backend's status in one mode (:func:`mode_status`).
* **Known failures**: an entry's state from its vector (:func:`vector_state`), which entry
  expects a failed test (:func:`expects`, :func:`expecting`), and a claim entry's state from
  the claim's side (:func:`claim_entry_state`).
* **Mutants**: one mutant run's outcome (:func:`mutant_outcome`) and a score's status
  (:func:`score_status`).

A vector's and a group's verdict (:mod:`resverify.reports.judge`) may join as a section of
their own at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from resverify.spec.claims import overall_status

__all__ = [
    "ANY_DTYPE",
    "CELL_STATUSES",
    "FAILURE_KINDS",
    "SuiteResults",
    "backend_status",
    "cell_status",
    "charged",
    "checked",
    "claim_entry_state",
    "claim_failure_kind",
    "claim_side_status",
    "claim_status",
    "expecting",
    "expects",
    "failure_kinds",
    "mode_status",
    "mutant_outcome",
    "not_run",
    "ran_short",
    "run_status",
    "score_status",
    "vector_state",
    "worse_cell",
]

Record = Mapping[str, Any]
"""One entry of report.json (a property, a claim, a backend, a known failure), or one
result of the child pytest: what every verdict here reads."""

FAILURE_KINDS = ("law", "refused", "raised", "timeout", "crash", "bad_result", "internal")
"""The kinds of failure a report names; ``internal`` is resverify's own."""


# --- property records ---------------------------------------------------------------------

def charged(prop: Record) -> bool:
    """A failed property entry counts against its backend: one of its failures (or its
    ``failure_kind``, when it lists none) is of a kind other than ``internal``."""
    kinds = [f["kind"] for f in prop.get("failures") or ()] or [prop.get("failure_kind")]
    return any(kind != "internal" for kind in kinds)


def checked(prop: Record) -> bool:
    """A test checked its backend: it passed, failed or failed as expected, after at least
    one example (or without counting its examples)."""
    return prop["status"] in ("passed", "failed", "expected") and (
        prop["examples"] is None or prop["examples"] > 0)


def not_run(prop: Record) -> bool:
    """A test could not run on its backend: it was skipped, or passed without a single
    example."""
    return prop["status"] == "skipped" or (prop["status"] == "passed" and prop["examples"] == 0)


def ran_short(prop: Record) -> bool:
    """A test passed on fewer examples than its profile asks (``examples_wanted``)."""
    ran, wanted = prop["examples"], prop["examples_wanted"]
    return prop["status"] == "passed" and ran is not None and bool(wanted) and ran < wanted


# --- claims -------------------------------------------------------------------------------

def claim_side_status(reported: object) -> str:
    """A backend's side of a claim: ``pass`` or ``skipped`` as its checker said; anything
    else (``fail``, nothing, a status the report does not know) is ``fail``."""
    return str(reported) if reported in ("pass", "skipped") else "fail"


def claim_failure_kind(side_status: str, reported: object) -> str | None:
    """The kind of a side's failure: none for a side that did not fail, the kind its
    checker named when the report knows it, else ``law``."""
    if side_status != "fail":
        return None
    return str(reported) if reported in FAILURE_KINDS else "law"


def claim_status(exact_status: str, sides: Iterable[str]) -> str:
    """A claim's overall status: ``expected`` when the exact side passes, no backend's side
    fails and a known failure expects one; else the claim checker's rule
    (:func:`resverify.spec.claims.overall_status`: ``fail``, ``skipped`` or ``pass``)."""
    statuses = list(sides)
    if exact_status == "pass" and "fail" not in statuses and "expected" in statuses:
        return "expected"
    return overall_status(exact_status, statuses)


# --- backends -----------------------------------------------------------------------------

def backend_status(name: str, properties: Sequence[Record], claims: Sequence[Record] = (),
                   known: Sequence[Record] = ()) -> str:
    """A backend's status in the run: ``failed`` when a property test failed on it and is
    :func:`charged` to it (a known failure that expects it made it ``expected``), when its
    side of a claim fails, or when a known failure of it is ``fixed``; else ``passed`` when
    a test :func:`checked` it; else ``nothing checked``."""
    mine = [p for p in properties if p["backend"] == name]
    failed = (any(p["status"] == "failed" and charged(p) for p in mine)
              or any(side["backend"] == name and side["status"] == "fail"
                     for claim in claims for side in claim.get("backends") or ())
              or any(k["backend"] == name and k["status"] == "fixed" for k in known))
    if failed:
        return "failed"
    return "passed" if any(checked(p) for p in mine) else "nothing checked"


# --- the run ------------------------------------------------------------------------------

def run_status(*, complete: bool, properties: Sequence[Record], claims: Sequence[Record],
               known: Sequence[Record], backends: Iterable[str]) -> str:
    """The status of the whole run, given the backends' statuses: ``incomplete`` when it
    did not finish; else ``failed`` when a property test or a claim failed (resverify's
    own failures included: they fail the run, not the backend) or a known failure is
    ``fixed``; else ``nothing checked`` when a backend had nothing checked; else
    ``passed``."""
    if not complete:
        return "incomplete"
    if (any(p["status"] in ("fail", "failed") for p in properties)
            or any(c["status"] in ("fail", "failed") for c in claims)
            or any(k["status"] == "fixed" for k in known)):
        return "failed"
    return "nothing checked" if "nothing checked" in set(backends) else "passed"


# --- the conformance matrix ---------------------------------------------------------------

ANY_DTYPE = "any"
"""The matrix column of a property test with no dtype parameter."""
CELL_STATUSES = ("failed", "expected", "passed", "xfailed", "skipped", "not claimed", "none")
"""A cell's statuses, the one that wins a cell first."""
_CELL_RANK = {status: len(CELL_STATUSES) - i for i, status in enumerate(CELL_STATUSES)}


def cell_status(prop: Record, backend: Record | None, dtype: str, mode: str) -> str:
    """What a property test says in its matrix cell: its status, except that a test skipped
    on a backend that does not claim the cell's ``dtype`` (``any`` is always claimed) or the
    test's ``mode`` is ``not claimed``, a claim rather than a verdict. An unknown backend
    (``None``) claims everything, and every backend claims :data:`ANY_DTYPE`."""
    status = str(prop["status"])
    claims = backend is None or (
        (dtype == ANY_DTYPE or dtype in backend["dtypes"]) and mode in backend["modes"])
    return "not claimed" if status == "skipped" and not claims else status


def worse_cell(held: str, new: str) -> str:
    """A cell holding ``held`` that gets a test saying ``new``: the one earlier in
    :data:`CELL_STATUSES` wins (a failure anywhere in the cell is the cell's status); a
    status not listed ranks with ``failed``, and the cell keeps what it held first."""
    top = _CELL_RANK["failed"]
    return new if _CELL_RANK.get(new, top) > _CELL_RANK.get(held, top) else held


def mode_status(properties: Sequence[Record], claimed: bool) -> str:
    """A backend's status in one mode, from its tests in that mode: ``failed`` when one
    failed (whether charged to it or not), else ``not claimed`` when the backend does not
    claim the mode, else ``passed`` when a test :func:`checked` it, else
    ``nothing checked``."""
    if any(p["status"] == "failed" for p in properties):
        return "failed"
    if not claimed:
        return "not claimed"
    return "passed" if any(checked(p) for p in properties) else "nothing checked"


# --- known failures -----------------------------------------------------------------------

def vector_state(verdict: str | None) -> str:
    """A known failure's state from its vector's verdict on its backend (``None``: the
    backend is not part of the run): still failing, ``expected``; passing now, ``fixed``
    (which fails the run until the entry is removed); anything else, ``not checked``."""
    return {"fail": "expected", "pass": "fixed"}.get(verdict or "", "not checked")


def failure_kinds(prop: Record) -> set[str]:
    """The kinds of a test's failures (its ``failure_kind``, ``law`` by default, when it
    lists none)."""
    kinds = {str(f["kind"]) for f in prop.get("failures") or ()}
    return kinds or {str(prop.get("failure_kind") or "law")}


def expects(entry: Record, prop: Record) -> bool:
    """A checked known-failures entry expects a failed test: the entry is ``expected`` (its
    vector still fails), names the test's backend, property and dtype, and every failure of
    the test is of the entry's kind: a crash is never hidden by a known wrong value."""
    return (entry["status"] == "expected" and entry["property"] == prop["property"]
            and entry["backend"] == prop["backend"] and entry["dtype"] == prop["dtype"]
            and failure_kinds(prop) == {entry["kind"]})


def expecting(entries: Sequence[Record], prop: Record) -> Any:
    """The first entry that :func:`expects` the failed test ``prop``, or None."""
    return next((e for e in entries if expects(e, prop)), None)


def claim_entry_state(entry: Record, side: Record) -> tuple[str, str]:
    """A claim entry's state and detail from the claim's side on the entry's backend: the
    side fails with the entry's kind, ``expected``; the side passes, ``fixed``; otherwise
    the entry keeps its state, and the detail says what the side is."""
    if side["status"] == "fail" and side["failure_kind"] == entry["kind"]:
        return "expected", str(side["reason"] or "the claim fails")
    if side["status"] == "pass":
        return "fixed", "the claim passes now"
    return str(entry["status"]), (f"claim {entry['claim']} is {side['status']} "
                                  f"on {entry['backend']}")


# --- mutants ------------------------------------------------------------------------------

class SuiteResults(Protocol):
    """What a mutant's outcome reads of its suite run
    (:class:`resverify.cli.runner.SuiteRun` has it)."""

    @property
    def results(self) -> Sequence[Record]: ...
    @property
    def exitstatus(self) -> int | None: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def finished(self) -> bool: ...
    @property
    def refused(self) -> bool: ...


MESSAGE_CHARS = 300
"""A mutant outcome's message is cut to this many characters."""


def mutant_outcome(suite: SuiteResults) -> dict[str, Any]:
    """The verdict on one mutant from its suite's results, in the order they finished.

    ``killed`` at the first failed test (property, dtype, kind, message), unless that
    failure is resverify's own (kind ``internal``): then ``error``, not a kill. With no
    failure, ``survived`` when the suite ran to its end with pytest's exit status 0, else
    ``error``, with what ended it. ``examples`` counts the examples run until the verdict
    (the failed test's included), ``tests_run`` the tests.
    """
    examples = 0
    for count, result in enumerate(suite.results, start=1):
        props = result["properties"]
        examples += int(props.get("examples") or 0)
        if result["outcome"] == "failed":
            kind = props.get("failure_kind") or "law"
            return {"status": "error" if kind == "internal" else "killed",
                    "property": props.get("property") or result["nodeid"],
                    "dtype": props.get("dtype"), "kind": kind,
                    "message": " ".join(str(result.get("message") or "").split())[:MESSAGE_CHARS],
                    "examples": examples, "tests_run": count}
    survived = suite.exitstatus == 0 and suite.finished
    return {"status": "survived" if survived else "error", "property": None, "dtype": None,
            "kind": None, "examples": examples, "tests_run": len(suite.results),
            "message": None if survived else _ended(suite)}


def _ended(suite: SuiteResults) -> str:
    """Why a suite gave no verdict on its mutant."""
    if suite.refused:
        return "pytest refused its command line (see pytest.log)"
    return (f"the suite ended without a verdict (pytest exit {suite.exitstatus}, "
            f"process exit {suite.returncode}, {len(suite.results)} tests finished)")


def score_status(killed: int, total: int) -> str:
    """A mutant score's status: ``passed`` when every mutant was killed, else ``failed``
    (a survivor is a bug the suite does not catch)."""
    return "passed" if killed == total else "failed"
