"""report.md: a short summary that reads well as a CI job summary, failures first, then
the conformance matrix (VJP and JVP side by side, a cell per backend folding its dtypes,
so ten backends fit); passed
and skipped tests are counted (and the tests that could not run counted by reason), not
listed one a line: report.json lists each.

GitHub renders Markdown job summaries with some HTML allowed, so every text that came
from a backend or a test is HTML-escaped and its table pipes are escaped too; failure
messages go into fenced blocks whose fence is longer than any backtick run inside.
"""

from __future__ import annotations

import html
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from resverify.reports.coverage import heard, short_cells
from resverify.reports.matrix import column_name, fold_row
from resverify.reports.verdicts import cell_checked, short_of_examples

__all__ = ["append_step_summary", "citation", "render_joined_markdown"]

DETAILED_FAILURES = 20  # a job summary must stay small (GitHub caps it at 1 MiB)
MESSAGE_CHARS = 2000
NOT_RUN_SHOWN = 20  # reasons per backend; the rest are in report.json
ICONS = {"pass": "✅ pass", "fail": "❌ fail", "expected": "☑️ expected", "fixed": "❌ fixed",
         "xfailed": "⏭ xfailed", "skipped": "⏭ skipped", "not claimed": "not claimed",
         "unjudged": "⚠️ unjudged", "partly judged": "⚠️ partly judged",
         "incomplete": "incomplete", "none": "—"}
"""How report.md shows each status of the one vocabulary
(:data:`resverify.reports.verdicts.STATUSES`)."""


def cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    text = "" if value is None else str(value)
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def fenced(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def blocks_only(doc: Mapping[str, Any]) -> bool:
    """A report of ``resverify blocks check``: a blocks section (or, with ``--exact``, an
    exact section) and no backend."""
    return ("blocks" in doc or "exact" in doc) and not doc["backends"]


def _header(doc: Mapping[str, Any]) -> list[str]:
    status = str(doc["status"]).upper()
    run = doc["run"]
    backends = ", ".join(f"`{cell(b['name'])}` ({cell(b['device'])})" for b in doc["backends"])
    what = "Residual blocks" if blocks_only(doc) else f"Backends {backends}"
    lines = [f"# resverify: {status}", "",
             f"{what} · profile `{cell(run['profile'])}` · seed {run['seed']} · "
             f"resverify {cell(doc['tool']['version'])} · Python "
             f"{cell(doc['environment']['python'])}", ""]
    if not doc["complete"]:
        lines += ["> **Incomplete run**: the report holds only what finished.", ""]
    lines += [f"> warning: {cell(w)}" for w in doc["warnings"]]
    if doc["warnings"]:
        lines.append("")
    if blocks_only(doc):
        return lines
    return lines + _counts(doc["summary"])


def _counts(summary: Mapping[str, Any]) -> list[str]:
    """The property tests and claims by status."""
    lines = ["| | total | pass | fail | expected | skipped |",
             "| --- | --- | --- | --- | --- | --- |"]
    for part in ("properties", "claims"):
        c = summary[part]
        lines.append(f"| {part} | {c['total']} | {c['pass']} | {c['fail']} | "
                     f"{c['expected']} | {c['skipped']} |")
    return [*lines, ""]


def _failures(doc: Mapping[str, Any]) -> list[str]:
    failed_props = [p for p in doc["properties"] if p["status"] == "fail"]
    failed_claims = [c for c in doc["claims"] if c["status"] == "fail"]
    if not failed_props and not failed_claims:
        return []
    lines = ["## Failures", ""]
    shown = failed_props[:DETAILED_FAILURES]
    for prop in shown:
        lines += _property_failures(prop)
    if len(failed_props) > len(shown):
        lines += [f"... and {len(failed_props) - len(shown)} more failed property tests "
                  "(listed below; details in report.html and report.json)", ""]
    for claim in failed_claims:
        lines += _claim_failure(claim)
    return lines


def _property_failures(prop: Mapping[str, Any]) -> list[str]:
    """A failed property test: its id, backend and dtype, then each distinct failure (the
    test's own message, vector and replay when it recorded no separate failures)."""
    lines = [f"### `{cell(prop['id'])}`", "",
             f"backend `{cell(prop['backend'])}`, dtype `{cell(prop['dtype'])}`", ""]
    failures = prop["failures"] or [{"message": prop["message"], "kind": None,
                                     "vector": prop["vector"], "replay": prop["replay"]}]
    for number, failure in enumerate(failures, 1):
        lines += _failure(failure, f"{number} of {len(failures)}" if len(failures) > 1 else "")
    return lines


def _failure(failure: Mapping[str, Any], count: str) -> list[str]:
    """One distinct failure of a test: kind, message, vector and replay command."""
    lines = []
    if count or failure["kind"]:
        said = ", ".join(x for x in (f"failure {count}" if count else "",
                                     f"kind `{cell(failure['kind'])}`" if failure["kind"]
                                     else "") if x)
        lines += [said, ""]
    if failure["message"]:
        lines += [fenced(str(failure["message"])[:MESSAGE_CHARS]), ""]
    if failure["vector"]:
        lines += [f"test vector: `{cell(failure['vector'])}`", ""]
    if failure["replay"]:
        lines += ["replay:", "", fenced(str(failure["replay"])), ""]
    return lines


def short_note(prop: Mapping[str, Any]) -> str:
    """What a property's row says besides its status: why it was skipped, which known
    failure expects it, or that a test that passed ran fewer examples than its profile asks."""
    if prop.get("known_failure") is not None:
        return f"known failure, entry {prop['known_failure']}"
    if prop["skip_reason"]:
        return str(prop["skip_reason"])
    if short_of_examples(prop):
        return f"ran {prop['examples']} of {prop['examples_wanted']} examples"
    return ""


def _backend_table(doc: Mapping[str, Any]) -> list[str]:
    """Each backend's verdict and its evidence; the tests that could not run, with why."""
    lines = ["## Backends", "",
             "| backend | status | modes | tests run | examples | expected failures | "
             "could not run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for b in doc["backends"]:
        lines.append(f"| `{cell(b['name'])}` | {ICONS.get(b['status'], b['status'])} | "
                     f"{cell(', '.join(b.get('modes', ['vjp'])))} | "
                     f"{b['tests_run']} | {b['examples']} | {b['expected']} | "
                     f"{len(b['not_run'])} |")
    lines += ["", *_about(doc["backends"])]
    for b in doc["backends"]:
        if not b["not_run"]:
            continue
        reasons = Counter(str(n["reason"]) for n in b["not_run"])
        lines += [f"Could not run on `{cell(b['name'])}` (each test in report.json):", ""]
        lines += [f"- {count} test{'s' if count != 1 else ''}: {cell(reason)}"
                  for reason, count in reasons.most_common(NOT_RUN_SHOWN)]
        if len(reasons) > NOT_RUN_SHOWN:
            lines.append(f"- ... and {len(reasons) - NOT_RUN_SHOWN} more reasons (report.json)")
        lines.append("")
    return lines


def _about(backends: Sequence[Mapping[str, Any]]) -> list[str]:
    """What exactly ran: each backend's library, version, device and numerics settings."""
    lines = ["| backend | library | version | device | settings |",
             "| --- | --- | --- | --- | --- |"]
    for b in backends:
        about = b["about"]
        settings = ", ".join(f"{k}={v}" for k, v in sorted(about.items())
                             if k not in ("backend", "library", "version", "device"))
        lines.append(f"| `{cell(b['name'])}` | {cell(about['library'])} | "
                     f"{cell(about['version'])} | {cell(about['device'])} | {cell(settings)} |")
    return [*lines, ""]


def _claim_failure(claim: Mapping[str, Any]) -> list[str]:
    """A failed claim: the side(s) that failed, each with its expected and observed value."""
    lines = [f"### claim `{cell(claim['id'])}` ({cell(claim['source'])})", "",
             cell(claim["statement"]), ""]
    if claim["exact_status"] != "pass":
        lines += [f"exact: expected `{cell(claim['expected'])}`, "
                  f"observed `{cell(claim['observed'])}`", ""]
    for side in claim["backends"]:
        if side["status"] == "fail":
            observed = ("no value" if side["observed"] is None
                        else f"observed `{cell(side['observed'])}`")
            reason = f": {cell(side['reason'])}" if side["reason"] else ""
            lines += [f"on `{cell(side['backend'])}` ({cell(side['failure_kind'])}): "
                      f"expected `{cell(side['expected'])}`, {observed}{reason}", ""]
    return lines


_CELL = {"fail": "❌", "expected": "☑️"}  # the statuses whose dtypes a folded cell names
_MODE_TITLES = {"vjp": "VJP (reverse)", "jvp": "JVP (forward)"}


def _mode_side(side: Mapping[str, Any]) -> str:
    if side["status"] == "not claimed":
        return "not claimed"
    said = f"{ICONS.get(side['status'], side['status'])}: {side['tests_run']} tests, " \
           f"{side['examples']} examples"
    return said + (f", {side['failed']} failed" if side["failed"] else "")


def _matrix(doc: Mapping[str, Any]) -> list[str]:
    """Each backend's verdict per mode, then a compact matrix: one row per property and
    mode, one cell per backend that folds its dtypes (:func:`_folded`), so ten backends
    fit a job summary; each dtype's cell is in report.html and report.json."""
    matrix = doc.get("matrix")
    if not matrix or not matrix["rows"]:
        return []
    modes = list(dict.fromkeys(m["mode"] for m in matrix["modes"]))
    lines = ["## Conformance matrix", "",
             "| backend | " + " | ".join(_MODE_TITLES.get(m, m) for m in modes) + " |",
             "| --- " * (len(modes) + 1) + "|"]
    sides: dict[str, dict[str, Mapping[str, Any]]] = {}
    for m in matrix["modes"]:
        sides.setdefault(column_name(m), {})[m["mode"]] = m
    for name, by_mode in sides.items():
        lines.append(f"| `{cell(name)}` | " + " | ".join(
            cell(_mode_side(by_mode[m])) if m in by_mode else "—" for m in modes) + " |")
    names = list(dict.fromkeys(column_name(c) for c in matrix["columns"]))
    lines += ["", "| property | mode | " + " | ".join(cell(n) for n in names) + " |",
              "| --- " * (len(names) + 2) + "|"]
    for row in matrix["rows"]:
        folded = fold_row(row)
        lines.append(f"| `{cell(row['property'])}` | {cell(row['mode'])} | " + " | ".join(
            _folded(folded.get(n, {})) for n in names) + " |")
    return [*lines, "", _MATRIX_LEGEND, ""]


_MATRIX_LEGEND = (
    "Cells: one per backend, over the dtypes it was tested in: ✅ p/n: p of the n dtypes "
    "checked passed; ❌ the dtypes that failed; ☑️ those that failed as a known failure "
    "expects; ⏭ k: k skipped; n/c: not claimed (none of the dtypes, or not the mode); "
    "— no test. Each dtype's cell, with its examples, is in report.html and report.json.")


def _folded(by_status: Mapping[str, Sequence[str]]) -> str:
    """One backend's cell of a row: failures by dtype first, then passed of checked."""
    checked = sum(len(v) for k, v in by_status.items() if cell_checked(k))
    if not checked:
        return "n/c" if by_status.get("not claimed") else "—"
    parts = [f"{_CELL[k]} {cell(', '.join(by_status[k]))}" for k in ("fail", "expected")
             if by_status.get(k)]
    passed = len(by_status.get("pass", ()))
    if passed:
        parts.append(f"✅ {passed}/{checked}")
    skipped = len(by_status.get("skipped", ())) + len(by_status.get("xfailed", ()))
    if skipped:
        parts.append(f"⏭ {skipped}")
    return " · ".join(parts)


def _property_table(props: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tests with something to say (failed, expected, xfailed, or passed on fewer
    examples than asked), one row each; passed and skipped tests are counted, their cells
    are in the matrix and each is in report.json."""
    order = {"fail": 0, "expected": 1, "xfailed": 2, "skipped": 3, "pass": 4}
    told = [p for p in props if p["status"] in ("fail", "expected", "xfailed")
            or (p["status"] == "pass" and short_note(p))]
    rows = sorted(told, key=lambda p: (order.get(p["status"], 0), p["id"]))
    passed = sum(p["status"] == "pass" for p in props)
    skipped = sum(p["status"] == "skipped" for p in props)
    lines = ["## Properties", "",
             f"{len(props)} property tests: {passed} passed, {skipped} skipped (each counted "
             "in the matrix above, and listed in report.json).", ""]
    if not rows:
        return lines
    lines += ["| property | backend | dtype | status | examples | note |",
              "| --- | --- | --- | --- | --- | --- |"]
    for p in rows:
        status = ICONS.get(p["status"], p["status"])
        if p["failure_kind"]:
            status += f" ({p['failure_kind']})"
        lines.append(f"| `{cell(p['id'].split('::')[-1])}` | {cell(p['backend'])} | "
                     f"{cell(p['dtype'])} | {cell(status)} | "
                     f"{cell(p['examples'])} | {cell(short_note(p))} |")
    return [*lines, ""]


def citation(claim: Mapping[str, Any]) -> str:
    """Where a claim comes from: ``file § heading as written (English title)``.

    The English title (``section_en``) is left out when there is none or when it is the
    heading itself (a source written in English); a claim without a section is its file.
    """
    text = str(claim["source"])
    section = claim.get("section")
    if section:
        text += f" § {section}"
        english = claim.get("section_en")
        if english and english != section:
            text += f" ({english})"
    return text


def _claim_table(claims: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per claim: the overall status, the exact side, each backend's side, and the
    reason of every side that failed or was skipped."""
    if not claims:
        return []
    order = {"fail": 0, "expected": 1, "skipped": 2, "pass": 3}
    rows = sorted(claims, key=lambda c: (order.get(c["status"], 0), c["id"]))
    names = list(dict.fromkeys(s["backend"] for c in claims for s in c["backends"]))
    lines = ["## Claims", "",
             "| id | status | exact | " + "".join(f"{cell(n)} | " for n in names)
             + "source | reasons |",
             "| --- " * (len(names) + 5) + "|"]
    for c in rows:
        sides = {s["backend"]: s for s in c["backends"]}
        cells = "".join((ICONS.get(sides[n]["status"], sides[n]["status"]) if n in sides
                         else "—") + " | " for n in names)
        reasons = "; ".join(f"{s['backend']}: {s['reason']}" for s in c["backends"]
                            if s["status"] != "pass" and s["reason"])
        lines.append(f"| {cell(c['id'])} | {ICONS.get(c['status'], c['status'])} | "
                     f"{ICONS.get(c['exact_status'], c['exact_status'])} | {cells}"
                     f"{cell(citation(c))} | {cell(reasons)} |")
    return [*lines, ""]


def _known_failures(doc: Mapping[str, Any]) -> list[str]:
    """Every entry of the known-failures file, fixed ones first: a fixed entry fails the
    run until it is removed."""
    known = doc["known_failures"]
    if known["file"] is None:
        return []
    order = {"fixed": 0, "expected": 1, "unjudged": 2}
    lines = ["## Known failures", "", f"From `{cell(known['file'])}`.", "",
             "| entry | backend | property or claim | dtype | status | vector | reason | detail |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in sorted(known["entries"], key=lambda e: (order.get(e["status"], 0), e["entry"])):
        what = e["property"] or f"claim {e['claim']}"
        vector = f"`{cell(e['vector'])}`" if e["vector"] else ""
        lines.append(f"| {e['entry']} | `{cell(e['backend'])}` | `{cell(what)}` | "
                     f"{cell(e['dtype'])} | {ICONS.get(e['status'], e['status'])} | {vector} | "
                     f"{cell(e['reason'])} | {cell(e['detail'])} |")
    if any(e["status"] == "fixed" for e in known["entries"]):
        lines += ["", "A fixed entry passes now and fails the run: remove it from the file."]
    return [*lines, ""]


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table, every cell escaped."""
    return [f"| {' | '.join(headers)} |", f"|{' --- |' * len(headers)}",
            *(f"| {' | '.join(cell(v) for v in row)} |" for row in rows), ""]


def _seconds_text(value: object) -> str:
    return "" if value is None else f"{float(str(value)):.3g}"


def _block_notes(block: Mapping[str, Any]) -> list[str]:
    """A line for each record that did not simply pass: its message and replay command,
    the documented finding it fails as, or that the finding no longer holds."""
    from resverify.reports.blocks import replay_lines

    lines = []
    for r in block["laws"]:
        where = f"- **{cell(r['law'])}** [{cell(r['dtype'])}, {cell(r['mode'])}]"
        known = r["known"]
        if r["verdict"] == "fixed" and known:
            lines.append(f"{where}: ❌ fixed: passes now, but the recipe documents it as "
                         f"failing ({cell(known['doc'])}); remove the finding from the recipe")
            continue
        if r["verdict"] == "pass" or not r["message"]:
            continue
        lines.append(f"{where}: `{r['message'].replace('`', chr(39))}`")
        if r["verdict"] == "expected" and known:
            lines.append(f"  documented finding: {cell(known['reason'])} ({cell(known['doc'])})")
        lines += [f"  {what}: `{cmd}`" for what, cmd in replay_lines(r["failure"])]
    return lines


def _block(block: Mapping[str, Any]) -> list[str]:
    from resverify.reports.blocks import (
        declared_lines,
        examples_count,
        figure_text,
        library_text,
    )

    lines = [f"### {cell(block['name'])}: {ICONS[block['verdict']]}", "",
             f"{cell(library_text(block))}, {block['time_seconds']:.1f} s", ""]
    lines += _table(["declares", ""], declared_lines(block))
    lines += _table(["law", "dtype", "mode", "verdict", "examples", "s", "figures"],
                    [(r["law"], r["dtype"], r["mode"], ICONS[r["verdict"]],
                      examples_count(r["verdict"], r["examples"], r.get("examples_asked", 0)),
                      _seconds_text(r["time_seconds"]), figure_text(r["figures"]))
                     for r in block["laws"]])
    return [*lines, *_block_notes(block), ""]


def _blocks(doc: Mapping[str, Any]) -> list[str]:
    """The blocks section (``resverify blocks check``): the summary, a row per block, the
    libraries skipped, then per block what its recipe declares and a row per law record."""
    section = doc.get("blocks")
    if section is None:
        return []
    from resverify.reports.blocks import counts_text

    lines = [f"## Residual blocks: {ICONS[section['verdict']]}", "", cell(counts_text(section)),
             ""]
    lines += _table(["block", "library", "verdict", "laws", "s"],
                    [(b["name"], f"{b['library']} {b['version'] or ''}", ICONS[b["verdict"]],
                      len(b["laws"]), _seconds_text(b["time_seconds"]))
                     for b in section["blocks"]])
    lines += [f"- skipped {cell(s['source'])}: {cell(s['reason'])}" for s in section["skipped"]]
    if section["skipped"]:
        lines.append("")
    for block in section["blocks"]:
        lines += _block(block)
    return lines


def _exact_notes(exact: Mapping[str, Any]) -> list[str]:
    """Per judgement its details (:func:`resverify.reports.exact.detail_lines`): what the
    table has no column for, the vector and its replay command; a block not traced, what
    stopped it."""
    from resverify.reports.exact import detail_lines, dtype_text, not_traced_text

    lines = []
    for block in exact["blocks"]:
        for j in block["judgements"]:
            said = detail_lines(j)
            lines.append(f"- **{cell(block['name'])}** [{cell(dtype_text(j))}] "
                         f"{ICONS[j['verdict']]}: " + "; ".join(
                             f"{what} {cell(text)}" for what, text in said
                             if what not in ("vector", "replay")))
            lines += [f"  - {what}: `{text}`" for what, text in said
                      if what in ("vector", "replay")]
        if block["not_traced"] is not None:
            lines.append(f"- **{cell(block['name'])}**: "
                         f"{cell(not_traced_text(block['not_traced']))}")
    return lines


def _exact(doc: Mapping[str, Any]) -> list[str]:
    """The exact section (``resverify blocks check --exact``): its summary and claim, the
    table "exact judgement" (a row per layer and dtype, a failure's vector beside it), then
    each judgement's details."""
    exact = doc.get("exact")
    if exact is None:
        return []
    from resverify.reports.exact import (
        HEADERS,
        PATH_HEADERS,
        counts_text,
        path_table_rows,
        table_rows,
    )

    rows = [(*row[:2], ICONS.get(row[2], f"⚠️ {row[2]}"), *row[3:]) for row in table_rows(exact)]
    paths = [(*row[:3], ICONS.get(row[3], f"⚠️ {row[3]}"), *row[4:])
             for row in path_table_rows(exact)]
    by_path = ["", "### paths", "", "Each path against the same exact answer, the failing first; "
               "stream ≠ eager: the fraction of stream elements (the output and the input of "
               "each later pre-norm) not bitwise the eager path's.", "",
               *_table(PATH_HEADERS, paths)] if paths else []
    return [f"## Exact judgement: {ICONS[exact['verdict']]}", "", cell(counts_text(exact)), "",
            "### exact judgement", "",
            "median, p99 and max are of |error| / bound over every element judged (1 is the "
            "edge of the budget).", "", *_table(HEADERS, rows), *by_path,
            *_exact_notes(exact), ""]


def _coverage(doc: Mapping[str, Any]) -> list[str]:
    """The cells that left part of their law's floor unreached (the whole table is in
    report.json and report.html), and the warnings the backends raised."""
    short, warned = short_cells(doc.get("coverage", ())), heard(doc["properties"])
    lines = ["## Coverage short of its floor", "",
             "Laws whose examples did not reach every kind of example they are written for "
             "(the values they judged were judged; report.html has the whole table):", "",
             *[f"- {cell(line)}" for line in short], ""] if short else []
    if warned:
        lines += ["## Warnings the backends raised", "",
                  "Recorded, never a verdict (docs/properties.md, backend warnings):", "",
                  *[f"- {cell(line)}" for line in warned], ""]
    return lines


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The Markdown summary of a report document (see :mod:`resverify.reports.json_report`);
    a blocks-only report (:func:`blocks_only`) is its header and its blocks section (or its
    exact section, :func:`_exact`)."""
    if blocks_only(doc):
        return "\n".join(_header(doc) + _blocks(doc) + _exact(doc)).rstrip() + "\n"
    parts = (_header(doc) + _failures(doc) + _matrix(doc) + _known_failures(doc)
             + _blocks(doc) + _exact(doc)
             + _backend_table(doc)
             + _property_table(doc["properties"])
             + _coverage(doc)
             + _claim_table(doc["claims"]))
    return "\n".join(parts).rstrip() + "\n"


def _joined_header(doc: Mapping[str, Any]) -> list[str]:
    """A joined report's title, warnings, a row per machine (its verdict, what ran it and
    its backends with device and library version), and the counts over every machine."""
    lines = [f"# resverify joined: {str(doc['status']).upper()}", "",
             f"{len(doc['machines'])} runs, a column per machine, backend and dtype.", ""]
    lines += [f"> warning: {cell(w)}" for w in doc["warnings"]] + ([""] if doc["warnings"] else [])
    rows = []
    for m in doc["machines"]:
        report = m["report"]
        env = report["environment"]
        backends = ", ".join(f"{b['name']} ({b['device']}, {b['about']['library']} "
                             f"{b['about']['version']})" for b in report["backends"])
        rows.append((m["label"], ICONS.get(m["status"], m["status"]), backends or "blocks",
                     f"{env['platform']}, Python {env['python']}, resverify "
                     f"{report['tool']['version']}", m["file"]))
    return lines + _table(["machine", "status", "backends", "platform", "report.json"], rows) \
        + _counts(doc["summary"])


def render_joined_markdown(doc: Mapping[str, Any]) -> str:
    """The Markdown summary of a joined report (:mod:`resverify.reports.join`): the
    machines, the failures, the matrix with a column per backend on its machine, then the
    backends and claims, each backend named with its machine
    (:func:`resverify.reports.join.flat_view`)."""
    from resverify.reports.join import flat_view

    flat = flat_view(doc)
    parts = (_joined_header(doc) + _failures(flat) + _matrix(doc) + _backend_table(flat)
             + _property_table(flat["properties"]) + _claim_table(flat["claims"]))
    return "\n".join(parts).rstrip() + "\n"


def append_step_summary(text: str, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Append ``text`` to the file named by GITHUB_STEP_SUMMARY, when that is set."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text if text.endswith("\n") else text + "\n")
    return path
