"""The one writer of a report's files, for ``resverify check`` and ``resverify blocks check``
(``--exact`` too).

Why one: both commands write the same document (``reports/schema/report.schema.json``), and
a blocks section is data like any other part of it, which the Markdown and HTML writers
render (:mod:`resverify.reports.markdown`, :mod:`resverify.reports.html`). So one function
writes a document's files whatever it holds: the plots' PNGs (the ones drawn for the
backends, given as bytes, and the blocks and exact sections', drawn here from the sections
by :func:`resverify.reports.blocks.plots` and :func:`resverify.reports.exact.plots`), then
report.json (validated first), report.md
and report.html, each file atomically.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resverify.reports import blocks, exact
from resverify.reports.atomic import write_bytes, write_text
from resverify.reports.html import render_html
from resverify.reports.json_report import dumps_report, validate
from resverify.reports.markdown import append_step_summary, render_markdown

__all__ = ["PLOTS_DIR", "write_files"]

PLOTS_DIR = "plots"
"""The plots' folder, beside the report's files."""
_BLOCK_PLOT = re.compile(r"block\d+-(swamped|zero)\.png|exact-tightness\.png")


def write_files(doc: Mapping[str, Any], *, json_path: Path | None, md_path: Path,
                html_path: Path, plots_dir: Path | None,
                plots: Mapping[str, bytes] | None = None,
                step_summary: bool = False) -> list[Path]:
    """Write the report ``doc``'s files; the paths written.

    ``plots`` are the backends' plots (PNG bytes by name, written as ``NAME.png``); a
    blocks section's plots are drawn from it. ``plots_dir`` None writes no plot (and draws
    none). ``json_path`` None leaves report.json to the caller (``resverify check`` writes
    it as the run goes); else the document is validated against the schema and written.
    ``step_summary`` appends report.md to the CI job summary as well
    (:func:`resverify.reports.markdown.append_step_summary`)."""
    if json_path is not None:
        validate(doc)
    drawn = dict(plots or {})
    section = _section_plots(doc) if plots_dir is not None else None
    written = [] if plots_dir is None else _write_plots(plots_dir, drawn, section)
    markdown = render_markdown(doc)
    pages = ((json_path, dumps_report(doc) if json_path is not None else ""),
             (md_path, markdown),
             (html_path, render_html(doc, drawn, block_plots=section)))
    for path, text in pages:
        if path is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        written.append(path)
    if step_summary:
        append_step_summary(markdown)
    return written


def _section_plots(doc: Mapping[str, Any]) -> dict[str, bytes] | None:
    """The plots of the blocks section and of the exact section, by file name (None: the
    report has neither)."""
    if "blocks" not in doc and "exact" not in doc:
        return None
    drawn = blocks.plots(doc["blocks"]) if "blocks" in doc else {}
    return drawn | (exact.plots(doc["exact"]) if "exact" in doc else {})


def _write_plots(folder: Path, drawn: Mapping[str, bytes],
                 section: Mapping[str, bytes] | None) -> list[Path]:
    """The backends' plots (``drawn``, by name) and the blocks section's (``section``, by
    file name; None: the report has none) into ``folder``; with a section, an earlier
    run's plots of more blocks are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    keep = section or {}
    for stale in [*folder.glob("block*-*.png"), *folder.glob("exact-*.png")] \
            if section is not None else ():
        if _BLOCK_PLOT.fullmatch(stale.name) and stale.name not in keep:
            stale.unlink()
    written = []
    for name, data in {**{f"{n}.png": png for n, png in drawn.items()}, **keep}.items():
        write_bytes(folder / name, data)
        written.append(folder / name)
    return written
