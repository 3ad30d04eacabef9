"""One report from several runs: the report.json files of ``resverify check`` on different
machines, joined (``resverify join``).

Why join and not rerun: a GPU backend runs on a GPU machine, a macOS build on a Mac, and
each machine writes its own report.json; a final CI job reads them all and shows one
matrix. Why each machine stays its own: the same backend on two machines is two runs,
of two library builds on two devices, so it gets two columns; a merged verdict would hide
which machine failed. Nothing is judged again here: every cell, every backend's verdict
per mode and every claim's side is copied from the run that decided it, with its
machine's label beside it, and each run's whole report.json is kept in the joined
document (``machines[].report``), so its environment, library versions (``backends[].
about``, ``environment.dependencies``) and devices stay with its verdicts.

What must agree, or the join is refused with one line (:class:`~resverify.spec.errors.
UsageError`): each input is a complete JSON document of the report schema this resverify
writes (:data:`~resverify.reports.json_report.SCHEMA_VERSION`), and the runs that checked
claims checked the same catalog (the same claim ids with the same expected values).

The joined document follows ``reports/schema/joined-report.schema.json``
(:data:`JOINED_SCHEMA_VERSION`), whose ``machines[].report`` refers to
``report.schema.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from resverify.impl.backend import MODES
from resverify.reports import json_report
from resverify.reports.matrix import column_name
from resverify.reports.verdicts import joined_claim_status, joined_status
from resverify.spec.codec import packaged_schema
from resverify.spec.errors import UsageError

__all__ = []

JOINED_SCHEMA_VERSION = 2
_REPORT_URI = "https://resverify.invalid/schema/report.schema.json"
"""Where the joined schema's ``$ref`` finds report.schema.json (see :func:`validate_joined`)."""
_SHOWN = 160  # characters of a schema error's message in the one-line refusal


class Run(NamedTuple):
    """One machine's run: the label its columns carry, the file it was read from and its
    report document."""

    label: str
    file: str
    report: Mapping[str, Any]


def _one_line(text: object) -> str:
    said = " ".join(str(text).split())
    return said if len(said) <= _SHOWN else said[:_SHOWN - 1] + "…"


def read_run(path: Path) -> dict[str, Any]:
    """The report document in ``path``, refused with one line naming the file when it
    cannot be read, is not one complete JSON document (a truncated copy), is no report,
    is of another schema version than this resverify writes, or does not follow the
    schema."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {str(path)!r}: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{str(path)!r} is not a complete JSON document ({exc.msg}: line "
                         f"{exc.lineno}, column {exc.colno}): a truncated or partly copied "
                         "report.json? Copy it again from its run") from None
    _check_kind(path, doc)
    import jsonschema

    try:
        json_report.validate(doc)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise UsageError(f"{str(path)!r} does not follow report.schema.json version "
                         f"{json_report.SCHEMA_VERSION} at /{where}: "
                         f"{_one_line(exc.message)}") from None
    return dict(doc)


def _check_kind(path: Path, doc: object) -> None:
    """A report.json of this schema version, or one line saying what it is instead."""
    kind = doc.get("schema") if isinstance(doc, dict) else None
    if kind != "resverify-report":
        joined = " (a joined report: join the runs' own report.json files)" \
            if kind == "resverify-joined-report" else ""
        raise UsageError(f"{str(path)!r} is not a resverify report.json: its \"schema\" is "
                         f"{_one_line(json.dumps(kind))}{joined}")
    assert isinstance(doc, dict)
    version = doc.get("schema_version")
    if version != json_report.SCHEMA_VERSION:
        raise UsageError(f"{str(path)!r} is a report of schema version "
                         f"{_one_line(json.dumps(version))}, but this resverify joins version "
                         f"{json_report.SCHEMA_VERSION}: rerun that machine's check with the "
                         "same resverify as the others")


def default_labels(reports: Sequence[Mapping[str, Any]],
                   given: Sequence[str | None]) -> list[str]:
    """A label for each run: the one ``given``, else its report's system and architecture
    (the start of ``environment.platform`` and ``environment.machine``: ``Linux x86_64``,
    ``macOS arm64``); a derived label that another run has too gets ``#2``, ``#3``, ... in
    input order. Two runs given the same label are refused: each column must say which
    machine it ran on."""
    explicit = [label for label in given if label is not None]
    for label in explicit:
        if not label.strip():
            raise UsageError("a machine's label is empty: write PATH=LABEL with a LABEL")
        if explicit.count(label) > 1:
            raise UsageError(f"two runs are labelled {label!r}: give each machine its own "
                             "label (PATH=LABEL)")
    derived = [f"{str(r['environment']['platform']).split('-')[0]} {r['environment']['machine']}"
               for r in reports]
    labels: list[str] = []
    seen = set(explicit)
    for mine, platform in zip(given, derived, strict=True):
        label, k = mine or platform, 1
        while mine is None and label in seen:
            k += 1
            label = f"{platform} #{k}"
        seen.add(label)
        labels.append(label)
    return labels


def _catalog(report: Mapping[str, Any]) -> dict[str, str]:
    return {str(c["id"]): str(c["expected"]) for c in report["claims"]}


def check_catalogs(runs: Sequence[Run]) -> None:
    """The runs that checked claims checked the same catalog: the same claim ids, each with
    the same expected value; else one line naming the first claim (by id) where two runs
    differ. A run that checked no claim (``--no-claims``, a blocks run) has no catalog to
    disagree with."""
    with_claims = [r for r in runs if r.report["claims"]]
    if not with_claims:
        return
    first, reference = with_claims[0], _catalog(with_claims[0].report)
    for other in with_claims[1:]:
        catalog = _catalog(other.report)
        for claim in sorted(reference.keys() | catalog.keys()):
            mine, theirs = reference.get(claim), catalog.get(claim)
            if mine != theirs:
                raise UsageError(
                    f"{first.file!r} and {other.file!r} disagree about the claims' catalog: "
                    f"claim {claim} expects {_said(mine)} in the first and {_said(theirs)} in "
                    "the second; join runs of the same resverify version")


def _said(expected: str | None) -> str:
    return "nothing (no such claim)" if expected is None else _one_line(repr(expected))


def _columns(runs: Sequence[Run]) -> list[dict[str, str]]:
    return [{"machine": r.label, **c} for r in runs for c in r.report["matrix"]["columns"]]


def _row_key(row: Mapping[str, Any]) -> tuple[int, str, str]:
    """Rows as :func:`resverify.reports.matrix.build_matrix` orders them: VJP first."""
    mode = str(row["mode"])
    return (MODES.index(mode) if mode in MODES else len(MODES), str(row["property"]), mode)


def _joined_matrix(runs: Sequence[Run]) -> dict[str, Any]:
    """The matrices of the runs side by side: every run's columns with its machine, a row
    per property and mode that any run has, each cell copied from its run (``none`` where
    that run has no such row), and each run's verdicts per mode with its machine."""
    rows: dict[tuple[int, str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in runs:
        for row in r.report["matrix"]["rows"]:
            rows.setdefault(_row_key(row), {})[r.label] = row["cells"]
    out = []
    for key, by_machine in sorted(rows.items()):
        cells = [{"machine": r.label, **cell}
                 for r in runs for cell in by_machine.get(r.label) or _none(r)]
        out.append({"property": key[1], "mode": key[2], "cells": cells})
    modes = [{"machine": r.label, **m} for r in runs for m in r.report["matrix"]["modes"]]
    return {"columns": _columns(runs), "rows": out, "modes": modes}


def _none(run: Run) -> list[dict[str, Any]]:
    """A run's cells in a row it has no test for (the status ``none`` of the matrix)."""
    return [{**c, "status": "none", "examples": 0, "examples_wanted": 0, "failed_after": None}
            for c in run.report["matrix"]["columns"]]


_CATALOG_KEYS = ("id", "source", "section", "section_en", "statement", "expected")


def _joined_claims(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each claim of the catalog once, with each machine's checks of it: its exact side,
    its backends' sides and its status there; the claim's ``status`` over the machines is
    :func:`resverify.reports.verdicts.joined_claim_status`."""
    claims: dict[str, dict[str, Any]] = {}
    for r in runs:
        for c in r.report["claims"]:
            entry = claims.setdefault(c["id"], {**{k: c[k] for k in _CATALOG_KEYS},
                                                "machines": []})
            entry["machines"].append({"machine": r.label, "exact_status": c["exact_status"],
                                      "observed": c["observed"], "status": c["status"],
                                      "note": c["note"], "backends": c["backends"]})
    for entry in claims.values():
        entry["status"] = joined_claim_status(m["status"] for m in entry["machines"])
    return [claims[k] for k in sorted(claims)]


def join(runs: Sequence[Run]) -> dict[str, Any]:
    """The joined document of ``runs`` (at least one, labels unique, catalogs checked with
    :func:`check_catalogs`): each machine with its whole report, the matrices side by
    side, the claims once with each machine's checks, the counts over every run, and the
    ``status`` of :func:`resverify.reports.verdicts.joined_status`."""
    assert runs and len({r.label for r in runs}) == len(runs), "labels must be unique"
    claims = _joined_claims(runs)
    summary = json_report.summarize(
        claims, [p for r in runs for p in r.report["properties"]])
    versions = sorted({str(r.report["tool"]["version"]) for r in runs})
    warnings = [f"the runs were made by different resverify versions: {', '.join(versions)}"
                ] if len(versions) > 1 else []
    return {
        "schema": "resverify-joined-report",
        "schema_version": JOINED_SCHEMA_VERSION,
        "status": joined_status(r.report["status"] for r in runs),
        "tool": {"name": "resverify", "version": json_report.tool_version()},
        "machines": [{"label": r.label, "file": r.file, "status": r.report["status"],
                      "report": r.report} for r in runs],
        "matrix": _joined_matrix(runs),
        "claims": claims,
        "summary": summary,
        "warnings": warnings,
    }


def _on(entry: Mapping[str, Any], machine: str, key: str = "backend") -> dict[str, Any]:
    """``entry`` with its backend (``key``) named with its machine (:func:`resverify.
    reports.matrix.column_name`)."""
    return {**entry, key: column_name({"backend": entry[key] or "?", "machine": machine})}


def _flat_claim(claim: Mapping[str, Any]) -> dict[str, Any]:
    """A joined claim as one report holds a claim: every machine's backend sides, each
    backend named with its machine, and the exact side of the first machine where it
    failed (else of the first machine)."""
    machines = claim["machines"]
    exact = next((m for m in machines if m["exact_status"] != "pass"), machines[0])
    return {**{k: claim[k] for k in _CATALOG_KEYS}, "observed": exact["observed"],
            "exact_status": exact["exact_status"], "status": claim["status"],
            "note": next((m["note"] for m in machines if m["note"]), None),
            "backends": [_on(side, m["machine"]) for m in machines for side in m["backends"]]}


def flat_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A joined document read as one report: its ``properties``, ``backends`` and ``claims``
    with each backend named with the machine it ran on (``numpy on gpu-box``), and its
    ``summary``, so the report writers' sections (failures, backends, properties, claims)
    render it as they render one run."""
    machines = doc["machines"]
    return {"properties": [_on(p, m["label"]) for m in machines
                           for p in m["report"]["properties"]],
            "backends": [_on(b, m["label"], "name") for m in machines
                         for b in m["report"]["backends"]],
            "claims": [_flat_claim(c) for c in doc["claims"]], "summary": doc["summary"]}


@cache
def joined_schema() -> dict[str, Any]:
    """The JSON Schema of a joined report, read from the installed package."""
    return packaged_schema("resverify.reports", "joined-report.schema.json")


def validate_joined(doc: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``doc`` does not follow the joined schema
    (each machine's ``report`` checked against report.schema.json)."""
    import jsonschema
    from referencing import Registry, Resource

    report = Resource.from_contents(json_report.load_schema())
    registry: Registry[Any] = Registry().with_resources(
        [(_REPORT_URI, report), (report.id() or _REPORT_URI, report)])
    jsonschema.Draft202012Validator(joined_schema(), registry=registry).validate(doc)
