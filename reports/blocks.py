"""The blocks section of the report: what ``resverify blocks check`` found, as data and plots.

Why a section of the main report: a blocks run writes the report ``resverify check`` writes
(``reports/schema/report.schema.json``, its optional ``blocks`` key), so one reader, one
schema and one set of writers serve both. :func:`section` turns the law records of each
checked block into that key's document; :func:`resverify.reports.json_report.blocks_report`
puts it into a report with no backend; the Markdown and HTML writers
(:mod:`resverify.reports.markdown`, :mod:`resverify.reports.html`) render it, with the text
helpers here (:func:`site_text`, :func:`declared_lines`, :func:`figure_text`) so both say
the same; :func:`plots` draws its PNGs (matplotlib's Agg canvas, no pyplot), and
:func:`resverify.reports.writer.write_files`, the one writer of every report, writes them.
Every verdict in it (a law record's, a block's, the section's) is decided by
:mod:`resverify.reports.verdicts`; nothing here imports torch or re-runs a block.

What a block's entry holds: its library and version, what its recipe declares
(:func:`declares`), one row per law, dtype and mode (verdict, examples, seconds, figures such
as the swamped fraction per site and the overflow headroom, for a failure its message, the
saved vector and the replay command, and the recipe's documented finding for the law), and
the two probes the plots draw, read from the laws' own figures (:func:`probes`):
``zero_branch`` (per site and dtype, with that site's branch zeroed: how far the site's exit
is from its entry, which is 0 for a pre-norm site and not for a post-norm or post-activation
one, and how far it is from what the zero-branch law predicts, which is 0 on a correct
block; the zero_branch law's eval figures, :mod:`resverify.blocks.laws_zero`) and
``layerscale`` (the swamped fraction per site and dtype at several LayerScale values; the
affine_in_gamma law's, :mod:`resverify.blocks.laws_gamma`). The probes are figures, never
verdicts; nothing in a verdict depends on the seconds, which sit in keys ending
``_seconds`` as in the rest of the report (``strip_timings`` drops them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resverify.reports.verdicts import (
    BLOCK_LAW_VERDICTS,
    block_law_verdict,
    block_verdict,
    blocks_verdict,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from resverify.blocks.check import LawRecord
    from resverify.blocks.recipe import Recipe

__all__ = ["BlockRun"]

Doc = dict[str, Any]


@dataclass(frozen=True)
class BlockRun:
    """One checked block: its recipe, where it came from (``source``: a catalog source or
    the ``module:RECIPE`` it was named by), its library, the records in the order they ran,
    each record's seconds, the vector saved for a failure at a merge (by index), and the
    command that replays a failing record's example (by index)."""

    recipe: Recipe
    source: str
    library: str
    version: str | None
    records: Sequence[LawRecord]
    seconds: Sequence[float] = ()
    vectors: Mapping[int, str] = field(default_factory=dict)
    replays: Mapping[int, str] = field(default_factory=dict)


def declares(recipe: Recipe) -> Doc:
    """What ``recipe`` declares about its block, as plain data (the listing shows the same)."""
    sites = [{"label": s.label, "norm": s.norm, "norms": list(s.norms), "scale": s.scale,
              "scale_init": s.scale_init, "drop_path": list(s.drop_path),
              "shortcut": s.shortcut, "activation": s.activation, "alpha": s.alpha,
              "exact": s.exact, "zero": list(s.zero)} for s in recipe.sites]
    return {"sites": sites, "dtypes": list(recipe.dtypes), "stream_dtype": recipe.stream_dtype,
            "modes": list(recipe.modes), "zero_init": recipe.zero_init is not None,
            "context": sorted(recipe.context), "notes": recipe.notes}


def _number(value: float | None) -> float | str | None:
    """A figure as JSON: a finite float, or ``"inf"``, ``"-inf"``, ``"nan"`` as text."""
    if value is None:
        return None
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _failure(record: LawRecord, vector: str | None, replay: str | None) -> Doc | None:
    """A failure: its message and kind, ``replay`` (the command that judges the law again
    on the failing example), and for a failure at a merge the saved ``vector`` with
    ``vector_replay``, its command on a backend that claims its dtype (None where none
    installed here does)."""
    if record.verdict != "fail":
        return None
    from resverify.properties.vectors import backend_for, replay_command

    failure = record.failure
    kind = failure.kind if failure is not None else "law"
    backend = backend_for(failure.request) if vector and failure is not None else None
    return {"message": record.message, "kind": kind, "vector": vector, "replay": replay,
            "vector_replay": replay_command(Path(vector), backend) if vector and backend
            else None}


def _known(run: BlockRun, law: str) -> Doc | None:
    """The recipe's documented finding for ``law``, as data (None: it declares none)."""
    found = run.recipe.findings.get(law)
    return None if found is None else {"reason": found.reason, "doc": found.doc,
                                       "kind": found.kind}


def _law_row(run: BlockRun, i: int, record: LawRecord) -> Doc:
    seconds = run.seconds[i] if i < len(run.seconds) else None
    known = _known(run, record.law)
    kind = record.failure.kind if record.failure is not None else None
    return {"law": record.law, "dtype": record.dtype, "mode": record.mode,
            "verdict": block_law_verdict(record.verdict, kind,
                                         None if known is None else known["kind"]),
            "examples": record.examples, "examples_asked": record.asked,
            "time_seconds": None if seconds is None else round(seconds, 3),
            "figures": {k: _number(v) for k, v in sorted(record.figures.items())},
            "message": record.message,
            "failure": _failure(record, run.vectors.get(i), run.replays.get(i)),
            "known": known}


_GAMMA_KEY = re.compile(r"swamped_at_gamma\[(.*?)\]\[(.*)\]")


def _zero_rows(run: BlockRun) -> list[Doc]:
    """Per dtype the zero_branch law judged in eval, and per site: its exit's distance from
    its entry and from the law's prediction, that site's branch zeroed (the law's figures
    ``max_from_identity[site]``, ``max_from_law[site]``), with a note where one is missing."""
    rows = []
    for record in run.records:
        if (record.law, record.mode) != ("zero_branch", "eval"):
            continue
        for site in run.recipe.sites:
            ident = record.figures.get(f"max_from_identity[{site.label}]")
            law = record.figures.get(f"max_from_law[{site.label}]")
            note = "" if ident is not None else "the site changes shape" if law is not None \
                else f"not measured: zero_branch {record.verdict}"
            rows.append({"dtype": record.dtype, "site": site.label,
                         "from_identity": _number(ident), "from_law": _number(law),
                         "note": note})
    return rows


def _gamma_rows(run: BlockRun) -> list[Doc]:
    """Per dtype the affine_in_gamma law judged, LayerScale value and site: the swamped
    fraction of the site's sum (the law's figures ``swamped_at_gamma[γ][site]``)."""
    order = {s.label: i for i, s in enumerate(run.recipe.sites)}
    rows = []
    for record in run.records:
        if record.law != "affine_in_gamma":
            continue
        found = [(float(m.group(1)), m.group(2), value) for key, value in record.figures.items()
                 if (m := _GAMMA_KEY.fullmatch(key))]
        rows += [{"dtype": record.dtype, "site": site, "gamma": gamma,
                  "swamped": _number(value)}
                 for gamma, site, value in sorted(found, key=lambda f: (f[0], order[f[1]]))]
    return rows


def probes(run: BlockRun) -> Doc:
    """The probes the plots draw, from the laws' figures: ``zero_branch`` rows (dtype, site,
    ``from_identity``, ``from_law``, ``note``) and ``layerscale`` rows (dtype, site,
    ``gamma``, ``swamped``)."""
    return {"zero_branch": _zero_rows(run), "layerscale": _gamma_rows(run)}


def _block(run: BlockRun) -> Doc:
    laws = [_law_row(run, i, r) for i, r in enumerate(run.records)]
    return {"name": run.recipe.name, "source": run.source, "library": run.library,
            "version": run.version, "verdict": block_verdict([r["verdict"] for r in laws]),
            "time_seconds": round(sum(run.seconds), 3), "declares": declares(run.recipe),
            "laws": laws, "probes": probes(run)}


def section(runs: Sequence[BlockRun], *, profile: str, seed: int, examples: int,
            skipped: Mapping[str, str] | None = None, interrupted: str | None = None) -> Doc:
    """The blocks section: every block's laws and probes, the counts of the law records by
    verdict and the section's verdict (:func:`resverify.reports.verdicts.blocks_verdict`:
    not ``pass`` when the run was ``interrupted``, by the signal named, since blocks went
    unchecked).

    >>> doc = section([run], profile="dev", seed=0, examples=5)  # doctest: +SKIP
    >>> doc["verdict"], doc["counts"]["pass"]  # doctest: +SKIP
    ('pass', 10)
    """
    blocks = [_block(run) for run in runs]
    verdicts = [law["verdict"] for b in blocks for law in b["laws"]]
    return {"profile": profile, "seed": seed, "examples": examples,
            "interrupted": interrupted,
            "verdict": blocks_verdict([b["verdict"] for b in blocks], interrupted is not None),
            "counts": {v: verdicts.count(v) for v in BLOCK_LAW_VERDICTS},
            "skipped": [{"source": s, "reason": r} for s, r in sorted((skipped or {}).items())],
            "blocks": blocks}


# -- reading the document ------------------------------------------------------------------

def swamped(block: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Site -> dtype -> the swamped fraction the stream-dtype law measured (eval)."""
    out: dict[str, dict[str, float]] = {}
    for law in block["laws"]:
        if law["law"] != "stream_dtype":
            continue
        for key, value in law["figures"].items():
            match = re.fullmatch(r"swamped\[(.*)\]", key)
            if match and isinstance(value, float | int):
                out.setdefault(match.group(1), {})[law["dtype"]] = float(value)
    return out


def headroom(block: Mapping[str, Any]) -> dict[str, float | str]:
    """Dtype -> the least overflow headroom (log2) the stream-dtype law measured."""
    return {law["dtype"]: law["figures"]["headroom_log2"] for law in block["laws"]
            if law["law"] == "stream_dtype" and "headroom_log2" in law["figures"]}


def examples_count(verdict: str, examples: int, asked: int) -> str:
    """``25``, or ``4 of 25`` for a pass on fewer examples than asked: the rule of
    :func:`resverify.blocks.check.examples_count`, imported when a blocks section is
    rendered (a report without one never loads the block laws)."""
    from resverify.blocks.check import examples_count as rule

    return rule(verdict, examples, asked)


def examples_text(verdict: str, examples: int, asked: int) -> str:
    """:func:`examples_count` with its unit: ``25 examples``, ``4 of 25 examples``."""
    return f"{examples_count(verdict, examples, asked)} examples"


def count(n: int, what: str) -> str:
    """``1 block``, ``2 blocks``."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def library_text(block: Mapping[str, Any]) -> str:
    """``x-transformers 2.31.10; recipe from myrecipes:RECIPE``: what was checked and
    where its recipe came from (the listing, the pages)."""
    return (f"{block['library']} {block['version'] or 'version unknown'}; recipe from "
            f"{block['source']}")


def replay_lines(failure: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(what, command)`` for a failure: the example's replay, then the merge vector's."""
    if not failure:
        return []
    said = [("replay", failure.get("replay")), ("replay the merge", failure.get("vector_replay"))]
    return [(what, cmd) for what, cmd in said if cmd]


def site_text(site: Mapping[str, Any]) -> str:
    """One line of what a site declares (the listing and the pages show the same)."""
    norm = "no norm" if site["norm"] == "none" else \
        f"{site['norm']}-norm ({', '.join(site['norms'])})"
    gamma = f"γ {site['scale']} = {site['scale_init']}" if site["scale"] else "no γ"
    drop = f"drop path {', '.join(site['drop_path'])}" if site["drop_path"] else "no drop path"
    act = f"then {site['activation']}" if site["activation"] else "no activation"
    return f"{norm}; {gamma}; {drop}; shortcut {site['shortcut']}; {act}"


def declared_lines(block: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(what, declared)`` rows of a block's recipe, as the pages show them."""
    d = block["declares"]
    rows = [(f"site {i} ({s['label']})", site_text(s)) for i, s in enumerate(d["sites"])]
    rows.append(("stream dtype", d["stream_dtype"] or "the dtype checked"))
    rows.append(("dtypes, modes", f"{', '.join(d['dtypes'])}; {', '.join(d['modes'])}"))
    if d["zero_init"]:
        rows.append(("zero-init option", "yes (judged by zero_branch)"))
    return rows


def figure_text(figures: Mapping[str, Any]) -> str:
    """A law record's figures on one line: ``name value, ...`` (3 significant digits)."""
    return ", ".join(f"{k} {_text(v)}" for k, v in figures.items())


def stopped_text(blocks: Mapping[str, Any]) -> str:
    """What the pages say of an interrupted section (empty for one that finished)."""
    return f" Interrupted ({blocks['interrupted']}): the blocks after these were not " \
        "checked." if blocks["interrupted"] else ""


def counts_text(blocks: Mapping[str, Any]) -> str:
    """The section's summary line: blocks, profile, seed and the records by verdict."""
    c = blocks["counts"]
    return (f"{count(len(blocks['blocks']), 'block')}, profile {blocks['profile']} "
            f"({blocks['examples']} examples a law), seed {blocks['seed']}: "
            f"{c['pass']} pass, {c['fail']} fail, {c['unjudged']} unjudged, "
            f"{c['expected']} expected (documented findings), {c['fixed']} fixed."
            f"{stopped_text(blocks)}")


# -- plots ---------------------------------------------------------------------------------

PLOT_CAPTIONS = {
    "swamped": "Swamped fraction: the share of each site's outputs bitwise equal to its "
               "input (the update lost to rounding), by dtype; right, by LayerScale γ",
    "zero": "With one site's branch zeroed: max |exit - entry| per site and dtype (0 is the "
            "identity; a post-norm or post-activation site is not); the title gives the "
            "zero-branch law's own difference, which is 0 on a correct block",
}


def plot_names(block: Mapping[str, Any], index: int) -> list[str]:
    """The PNG names of a block's plots (``block<i>-swamped.png``, ...), those it has data
    for."""
    names = []
    if swamped(block) or block["probes"]["layerscale"]:
        names.append(f"block{index}-swamped.png")
    if block["probes"]["zero_branch"]:
        names.append(f"block{index}-zero.png")
    return names


def _png(fig: Figure) -> bytes:
    from resverify.reports.plots import png

    return png(fig)


def _bars(ax: Axes, groups: Sequence[str], series: Mapping[str, Sequence[float | None]],
          log: bool) -> None:
    """Grouped bars: one group per ``groups`` entry, one bar per series; a 0 or a missing
    value is written, not drawn (a log axis has no 0)."""
    width = 0.8 / max(1, len(series))
    for k, (label, values) in enumerate(series.items()):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None and v > 0 else math.nan for v in values]
        ax.bar(xs, heights, width, label=label)
        _undrawn(ax, xs, values)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    drawn = [v for vs in series.values() for v in vs if v is not None and v > 0]
    if log and drawn:
        ax.set_yscale("log")
    elif not log:
        ax.set_ylim(0, 1.1 * max(drawn, default=1.0))
    if series:  # none where the laws that measure it were not run (--law)
        ax.legend(fontsize=7)


def _undrawn(ax: Axes, xs: Sequence[float], values: Sequence[float | None]) -> None:
    """Write ``0`` or ``–`` (missing) at the foot of each bar that cannot be drawn."""
    for x, v in zip(xs, values, strict=True):
        if v is None or v <= 0:
            ax.annotate("–" if v is None else "0", (x, 0), xycoords=("data", "axes fraction"),
                        ha="center", va="bottom", fontsize=8)


def _swamped_plot(block: Mapping[str, Any]) -> bytes:
    from matplotlib.figure import Figure

    by_site = swamped(block)
    gamma = block["probes"]["layerscale"]
    fig = Figure(figsize=(9 if gamma else 5, 3.2))
    ax = fig.add_subplot(1, 2 if gamma else 1, 1)
    dtypes = [d for d in block["declares"]["dtypes"] if any(d in v for v in by_site.values())]
    order = [s["label"] for s in block["declares"]["sites"] if s["label"] in by_site]
    _bars(ax, dtypes, {site: [by_site[site].get(d) for d in dtypes] for site in order}, False)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("swamped fraction")
    ax.set_title("by dtype (drawn branch scales)", fontsize=9)
    if gamma:
        _by_gamma(fig.add_subplot(1, 2, 2), gamma)
    fig.suptitle(block["name"], fontsize=10)
    fig.tight_layout()
    return _png(fig)


def _by_gamma(ax: Axes, gamma: Sequence[Mapping[str, Any]]) -> None:
    """The swamped fraction against LayerScale γ, one line per dtype and site."""
    for (dtype, site) in sorted({(r["dtype"], r["site"]) for r in gamma}):
        pts = sorted((r["gamma"], r["swamped"]) for r in gamma
                     if (r["dtype"], r["site"]) == (dtype, site))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{dtype} {site}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("LayerScale γ")
    ax.set_title("by LayerScale γ", fontsize=9)
    ax.legend(fontsize=7)


def _zero_plot(block: Mapping[str, Any]) -> bytes:
    from matplotlib.figure import Figure

    rows = block["probes"]["zero_branch"]
    sites = list(dict.fromkeys(r["site"] for r in rows))
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    at = {(r["site"], r["dtype"]): r for r in rows}

    def values(key: str, dtype: str) -> list[float | None]:
        return [_float(at.get((s, dtype), {}).get(key)) for s in sites]

    fig = Figure(figsize=(5.5, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    _bars(ax, sites, {d: values("from_identity", d) for d in dtypes}, False)
    law = [v for d in dtypes for v in values("from_law", d) if v]
    said = f" (law's difference up to {max(law):.3g})" if law else \
        " (law: bitwise at every site)"
    ax.set_ylabel("max |exit - entry|, branch zeroed")
    ax.set_title(block["name"] + said, fontsize=9, color="#b00" if law else "black")
    fig.tight_layout()
    return _png(fig)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, float | int) else None


def plots(doc: Mapping[str, Any]) -> dict[str, bytes]:
    """Every block's plots, by file name, as PNG bytes (the same bytes for the same
    document)."""
    out = {}
    for i, block in enumerate(doc["blocks"]):
        for name in plot_names(block, i):
            draw = _swamped_plot if name.endswith("-swamped.png") else _zero_plot
            out[name] = draw(block)
    return out
