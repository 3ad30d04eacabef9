"""report.json: the machine-readable record of one ``resverify check`` run.

The document follows ``reports/schema/report.schema.json`` (shipped with the package,
version :data:`SCHEMA_VERSION`). Everything that depends on the clock sits under the
top-level ``timings`` object or in a key ending in ``_seconds``: :func:`strip_timings`
removes exactly those, and what remains is the same for two runs with the same seed,
profile and versions.
"""

from __future__ import annotations

import copy
import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from resverify.impl.about import describe_backend
from resverify.impl.backend import Backend
from resverify.properties.known_failures import Checked
from resverify.reports.atomic import write_text
from resverify.reports.coverage import build_coverage
from resverify.reports.matrix import build_matrix
from resverify.reports.verdicts import (
    backend_status,
    claim_side_failure_kind,
    claim_side_status,
    claim_status,
    could_not_run,
    exact_status,
    known_failures_settled,
    property_status,
    ran,
    run_status,
    vector_entry_state,
    vector_verdict,
)
from resverify.spec.codec import packaged_schema

__all__ = ["blocks_report", "claim_entry", "exact_report", "write_report"]

SCHEMA_VERSION = 9
DEPENDENCIES = ("numpy", "sympy", "mpmath", "hypothesis", "pytest",
                "pytest-xdist", "pytest-timeout", "matplotlib", "jsonschema")
NO_KNOWN_FAILURES: Mapping[str, Any] = {"file": None, "entries": []}


@cache
def load_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, read from the installed package."""
    return packaged_schema("resverify.reports", "report.schema.json")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def tool_version() -> str:
    """The installed resverify's version (``unknown`` when it is not installed)."""
    return _version("resverify") or "unknown"


def environment() -> dict[str, Any]:
    """Python, platform and the versions of what resverify depends on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "dependencies": {name: _version(name) for name in DEPENDENCIES},
    }


def backend_entry(backend: Backend, properties: Sequence[Mapping[str, Any]] = (),
                  claims: Sequence[Mapping[str, Any]] = (),
                  known: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A backend, what it claims, and the evidence behind its verdict: the examples that
    ran on it, the tests that ran, and every test that could not run, with the reason.

    Its ``status`` is decided by :func:`resverify.reports.verdicts.backend_status`
    (``fail``, ``pass`` or ``unjudged``); ``tests_run`` and ``examples`` count
    the tests that :func:`~resverify.reports.verdicts.ran`, ``not_run`` lists those that
    :func:`~resverify.reports.verdicts.could_not_run`, ``expected`` counts its expected
    failures.
    ``about`` says what exactly ran (:func:`resverify.impl.about.describe_backend`: library,
    version, device and the settings that change numerics).
    """
    caps = backend.capabilities
    name = str(backend.name)
    mine = [p for p in properties if p["backend"] == name]
    checked = [p for p in mine if ran(p)]
    return {"name": name, "device": str(caps.device),
            "dtypes": [str(d) for d in caps.dtypes], "ops": sorted(str(o) for o in caps.ops),
            "modes": [str(m) for m in caps.modes],
            "status": backend_status(name, mine, claims, known),
            "examples": sum(p["examples"] or 0 for p in checked),
            "tests_run": len(checked), "not_run": [_not_run(p) for p in mine if could_not_run(p)],
            "expected": sum(p["status"] == "expected" for p in mine),
            "about": describe_backend(backend)}


def _not_run(prop: Mapping[str, Any]) -> dict[str, Any]:
    """A test that could not run on its backend, and why (its skip reason, if it has one)."""
    return {"id": prop["id"], "property": prop["property"], "dtype": prop["dtype"],
            "reason": prop["skip_reason"] or "no example ran"}


def _text(value: object) -> str:
    """Strings as they are; anything else as canonical JSON text (sorted keys)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _claim_side(raw: Mapping[str, Any], backend: str) -> dict[str, Any]:
    status = claim_side_status(raw.get("status"))
    observed, reason = raw.get("observed"), raw.get("reason")
    return {
        "backend": backend,
        "expected": _text(raw.get("expected", "")),
        "observed": None if observed is None else _text(observed),
        "status": status,
        "reason": None if reason in (None, "") else _text(reason),
        "failure_kind": claim_side_failure_kind(status, raw.get("failure_kind")),
    }


def claim_entry(raw: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """One claim from the claim checker (:func:`resverify.spec.claims.outcome_dict` data checked on
    one backend, shown as ``backend``), with every value made JSON text.

    ``expected``/``observed``/``exact_status`` are the exact side, ``backends`` each
    backend's side, ``status`` the overall verdict
    (:func:`resverify.reports.verdicts.claim_status`); entries of one claim on several
    backends merge with :func:`resverify.cli.claim_source.merge_claims`.
    """
    section, english = raw.get("section"), raw.get("section_en")
    note = raw.get("note")
    exact = exact_status(raw.get("exact_status", raw.get("status")))
    sides = [_claim_side(side, backend) for side in raw.get("backends") or ()]
    return {
        "id": _text(raw.get("id", "?")),
        "source": _text(raw.get("source", "")),
        "section": None if section is None else _text(section),
        "section_en": None if english is None else _text(english),
        "statement": _text(raw.get("statement", "")),
        "expected": _text(raw.get("expected", "")),
        "observed": _text(raw.get("observed", "")),
        "exact_status": exact,
        "backends": sides,
        "status": claim_status(exact, (s["status"] for s in sides)),
        "note": None if note in (None, "") else _text(note),
    }


def _relative(path: str, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except (ValueError, OSError):
        return path


def property_entry(record: Mapping[str, Any], default_backend: str | None,
                   base: Path) -> dict[str, Any]:
    """One finished property test (a collector ``result`` event) as a report entry.

    Vector paths under ``base`` (the working directory) are written relative to it, in
    the path, the replay command and the message, so the report does not depend on where
    the working directory is.
    """
    props = record.get("properties", {})
    nodeid = str(record["nodeid"])
    failures = [_failure(f, base) for f in props.get("failures") or () if isinstance(f, dict)]
    vector = props.get("vector")
    replay = props.get("replay")
    message = record.get("message")
    if failures:  # each distinct failure in its own words, not "ExceptionGroup: ..."
        message = "\n".join(f["message"] for f in failures)
    if vector is not None:
        replay, message = (_relative_paths(text, str(vector), base) for text in (replay, message))
        vector = _relative(str(vector), base)
    return {
        "id": nodeid,
        "property": str(props.get("property") or nodeid.split("::")[-1].split("[")[0]),
        "backend": props.get("backend") or default_backend,
        "mode": "jvp" if props.get("mode") == "jvp" else "vjp",
        "dtype": props.get("dtype"),
        "status": property_status(record["outcome"]),
        "examples": _count(props.get("examples")),
        "time_seconds": round(float(record.get("duration", 0.0)), 6),
        "vector": vector,
        "replay": replay,
        "skip_reason": record.get("skip_reason"),
        "message": message,
        "examples_wanted": _count(props.get("max_examples")),
        "failed_after": _count(props.get("failed_after")),
        "shrink_seconds": _seconds(props.get("shrink_seconds")),
        "failure_kind": props.get("failure_kind") if record["outcome"] == "failed" else None,
        "failures": failures,
        "known_failure": None,
        "reached": _tag_counts(props.get("reached")),
        "floor": [str(t) for t in props.get("floor") or ()],
        "backend_warnings": [str(w) for w in props.get("backend_warnings") or ()],
    }


def _tag_counts(value: object) -> dict[str, int]:
    """The tags an example reached, with how many examples reached each."""
    if not isinstance(value, Mapping):
        return {}
    return {str(tag): count for tag, n in value.items() if (count := _count(n)) is not None}


def _relative_paths(text: object, path: str, base: Path) -> str | None:
    """``text`` with ``path`` (as given, or absolute) written relative to ``base``."""
    if text is None:
        return None
    shown = _relative(path, base)
    return str(text).replace(str(Path(path).resolve()), shown).replace(path, shown)


def _failure(raw: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """One distinct failure of a test: its message, kind, vector, replay command and first
    failing element."""
    vector = raw.get("vector")
    message, replay = str(raw.get("message", "")), raw.get("replay")
    if vector is not None:
        message = _relative_paths(message, str(vector), base) or ""
        replay = _relative_paths(replay, str(vector), base)
        vector = _relative(str(vector), base)
    element = raw.get("element")
    return {"message": message, "kind": str(raw.get("kind") or "law"), "vector": vector,
            "replay": None if replay is None else str(replay),
            "element": dict(element) if isinstance(element, Mapping) else None}


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return round(float(value), 3)


def _count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        count = int(str(value))
    except ValueError:
        return None
    return count if count >= 0 else None


def summarize(claims: Sequence[Mapping[str, Any]],
              properties: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per status: ``expected`` (a known failure that reproduced) apart from
    ``fail``; pytest's xfailed tests count as skipped."""
    def counts(statuses: Iterable[str]) -> dict[str, int]:
        items = list(statuses)
        return {"total": len(items),
                "pass": sum(s == "pass" for s in items),
                "fail": sum(s == "fail" for s in items),
                "skipped": sum(s in ("skipped", "xfailed") for s in items),
                "expected": sum(s == "expected" for s in items)}
    return {"claims": counts(c["status"] for c in claims),
            "properties": counts(p["status"] for p in properties)}


def _known_counts(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {status: sum(e["status"] == status for e in entries)
            for status in ("expected", "fixed", "unjudged")}


def known_entries(checked: Sequence[Checked], base: Path) -> list[dict[str, Any]]:
    """The report's entry of each checked known failure (:func:`resverify.properties.
    known_failures.judge_entries`): what the file says, its vector's path relative to
    ``base`` when it lies under it, and its state (:func:`resverify.reports.verdicts.
    vector_entry_state`) with the detail: the failure on the vector, why it is ``fixed``,
    or why it is ``unjudged``. A claim entry stays ``unjudged`` with no detail until
    :func:`build_report` settles it from the run's claims."""
    return [_known_entry(c, base) for c in checked]


def _known_entry(checked: Checked, base: Path) -> dict[str, Any]:
    entry = checked.entry
    doc: dict[str, Any] = {
        "entry": entry.number, "backend": checked.backend or entry.backend,
        "property": entry.prop, "claim": entry.claim, "dtype": entry.dtype, "kind": entry.kind,
        "reason": entry.reason, "vector": None if entry.vector is None else _shown(entry.vector,
                                                                                    base),
        "status": "unjudged", "detail": None}
    if checked.backend is None:
        doc["detail"] = f"backend {entry.backend} is not checked in this run"
    elif checked.judged is not None:
        verdict = vector_verdict(checked.judged)
        doc["status"] = vector_entry_state(verdict["status"])
        doc["detail"] = verdict["message"] or "the vector passes now"
    return doc


def _shown(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def build_report(*, run: Mapping[str, Any], backends: Sequence[Backend],
                 claims: Sequence[Mapping[str, Any]], properties: Sequence[Mapping[str, Any]],
                 complete: bool, warnings: Sequence[str], timings: Mapping[str, Any],
                 known: Mapping[str, Any] = NO_KNOWN_FAILURES,
                 plots: Mapping[str, Any] | None = None,
                 blocks: Mapping[str, Any] | None = None,
                 exact: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole report document (see the module docstring for what varies run to run).

    ``known`` is the known-failures file (``file``) and its checked ``entries``
    (:func:`known_entries`): the failures they expect are ``expected`` here
    (:func:`resverify.reports.verdicts.known_failures_settled`; ``properties``, ``claims``
    and ``known`` are not changed).

    ``status`` is decided by :func:`resverify.reports.verdicts.run_status` from the
    statuses of the properties, claims, known failures and backends: ``incomplete``,
    ``fail``, ``unjudged``, ``partly judged`` or ``pass``.

    ``matrix`` is the conformance matrix of the properties, VJP and JVP side by side
    (:func:`resverify.reports.matrix.build_matrix`), after the known failures are applied;
    ``coverage`` what each law's examples reached per backend and dtype, and what of its
    floor they left unreached (:func:`resverify.reports.coverage.build_coverage`).

    ``plots`` is attached as it is, once the plots are drawn: for
    each plot its series (one per backend that claims the plot's mode), the dtype each was
    asked in, the reason of each backend's gaps, and (:func:`resverify.reports.plots.
    plot_summary`) the plot's mode and the backends that do not claim it.

    ``blocks`` is the blocks section (:func:`resverify.reports.blocks.section`), attached as
    it is; its ``verdict`` joins the run's ``status``; so does ``exact``'s, the exact section
    (:func:`resverify.reports.exact.section`).
    """
    known_entries, properties, claims = known_failures_settled(
        copy.deepcopy(list(known["entries"])), copy.deepcopy(list(properties)),
        copy.deepcopy(list(claims)))
    summary = summarize(claims, properties)
    summary["known_failures"] = _known_counts(known_entries)
    entries = [backend_entry(b, properties, claims, known_entries) for b in backends]
    ordered = sorted(properties, key=lambda p: (p["id"], p["backend"] or ""))
    status = run_status(complete=complete, properties=[p["status"] for p in properties],
                        claims=[c["status"] for c in claims],
                        known=[e["status"] for e in known_entries],
                        backends=[b["status"] for b in entries],
                        blocks=None if blocks is None else str(blocks["verdict"]),
                        exact=None if exact is None else str(exact["verdict"]))
    doc = {
        "schema": "resverify-report",
        "schema_version": SCHEMA_VERSION,
        "complete": complete,
        "status": status,
        "tool": {"name": "resverify", "version": tool_version()},
        "environment": environment(),
        "run": dict(run),
        "backends": entries,
        "claims": list(claims),
        "properties": ordered,
        "matrix": build_matrix(ordered, entries),
        "coverage": build_coverage(ordered),
        "summary": summary,
        "known_failures": {"file": known["file"], "entries": known_entries},
        "warnings": list(warnings),
        "timings": dict(timings),
    }
    if plots is not None:
        doc["plots"] = copy.deepcopy(dict(plots))
    if blocks is not None:
        doc["blocks"] = copy.deepcopy(dict(blocks))
    if exact is not None:
        doc["exact"] = copy.deepcopy(dict(exact))
    return doc


def blocks_report(blocks: Mapping[str, Any], *, seconds: float) -> dict[str, Any]:
    """The report of a ``resverify blocks check`` run: the blocks section and no backend.

    How its run-level fields read: ``run`` holds the section's seed and profile, no
    backend, no pytest argument and a null pytest exit code (no pytest ran); ``backends``,
    ``claims`` and ``properties`` are empty (so are the matrix and the counts), no
    known-failures file was read (the documented findings are in the section, per law);
    ``complete`` is false when the run was interrupted; ``status`` is
    :func:`resverify.reports.verdicts.run_status` of the section's verdict alone
    (``incomplete``, ``fail``, ``unjudged``, ``partly judged``, else ``pass``);
    ``timings`` holds ``blocks_seconds``, the seconds the laws took.
    """
    run = {"seed": blocks["seed"], "profile": blocks["profile"], "backends": [],
           "pytest_args": [], "pytest_exit_code": None}
    return build_report(run=run, backends=[], claims=[], properties=[],
                        complete=blocks["interrupted"] is None, warnings=[],
                        timings={"blocks_seconds": round(seconds, 3)}, blocks=blocks)


def exact_report(exact: Mapping[str, Any], *, seconds: float) -> dict[str, Any]:
    """The report of a ``resverify blocks check --exact`` run: the exact section
    (:func:`resverify.reports.exact.section`) and no backend, its run-level fields as
    :func:`blocks_report`'s (``run.profile`` is ``exact``: no Hypothesis profile drew the
    inputs, the section's seed did); ``timings`` holds ``exact_seconds``, the seconds the
    judgements took."""
    run = {"seed": exact["seed"], "profile": "exact", "backends": [], "pytest_args": [],
           "pytest_exit_code": None}
    return build_report(run=run, backends=[], claims=[], properties=[],
                        complete=exact["interrupted"] is None, warnings=[],
                        timings={"exact_seconds": round(seconds, 3)}, exact=exact)


def validate(doc: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``doc`` does not follow the schema."""
    import jsonschema

    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)


def strip_timings(doc: Any) -> Any:
    """``doc`` without the ``timings`` object and without any key ending in ``_seconds``."""
    if isinstance(doc, Mapping):
        return {k: strip_timings(v) for k, v in doc.items()
                if k != "timings" and not str(k).endswith("_seconds")}
    if isinstance(doc, list):
        return [strip_timings(v) for v in doc]
    return doc


def dumps_report(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_report(path: Path, doc: Mapping[str, Any]) -> None:
    write_text(path, dumps_report(doc))
