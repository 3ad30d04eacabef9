"""The mutant scores as HTML: a section for report.html, or a page of its own.

:func:`mutants_section` renders the JSON document of ``resverify mutants --out`` (score,
then one row per mutant: class, bug, the property that killed it first, kind, examples
run until the kill, time); :func:`render_page` wraps it in the report's self-contained
page (same style and Content-Security-Policy, no script). Every string goes through
:func:`resverify.reports.html.esc`; times sit in elements of class ``timing``, as in
report.html, so the rest of the page is the same for the same seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resverify.reports.html import CSP, STYLE, esc

__all__ = ["mutants_section", "render_page"]

_HEADERS = ("mutant", "class", "bug", "killed by", "kind", "examples", "time")


def _killer(entry: Mapping[str, Any]) -> str:
    if entry["status"] != "killed":
        return f'<td class="failed nw">{esc(entry["status"])}</td>'
    dtype = f" [{entry['dtype']}]" if entry.get("dtype") else ""
    title = esc(entry.get("message") or "")
    return f'<td class="passed" title="{title}">{esc(entry["property"])}{esc(dtype)}</td>'


def _row(entry: Mapping[str, Any]) -> str:
    cells = [f'<td class="nw">{esc(entry["mutant"])}</td>', f"<td>{esc(entry['bug_class'])}</td>",
             f"<td>{esc(entry['bug'])}</td>", _killer(entry),
             f"<td>{esc(entry.get('kind') or '')}</td>", f"<td>{esc(entry['examples'])}</td>",
             f'<td class="timing nw">{esc(entry["seconds"])} s</td>']
    return "<tr>" + "".join(cells) + "</tr>"


def mutants_section(doc: Mapping[str, Any]) -> str:
    """``<h2>Mutants</h2>``, the score line and the table of a ``resverify mutants`` document."""
    badge = "passed" if doc["killed"] == doc["total"] else "failed"
    head = "".join(f"<th>{esc(h)}</th>" for h in _HEADERS)
    rows = "".join(_row(e) for e in doc["mutants"])
    return (f'<h2 id="mutants">Mutants</h2><p><span class="badge {badge}">'
            f"{esc(doc['killed'])}/{esc(doc['total'])} killed</span> "
            f"deliberately wrong backends, suite run under the {esc(doc['profile'])} profile, "
            f"seed {esc(doc['seed'])}; a survivor is a bug the suite does not catch.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")


def render_page(doc: Mapping[str, Any]) -> str:
    """A self-contained page holding only :func:`mutants_section`."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>resverify mutants</title><style>{STYLE}</style></head>"
            f"<body><h1>resverify mutants</h1>{mutants_section(doc)}</body></html>\n")
