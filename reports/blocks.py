"""The blocks section of the report: what ``resverify blocks check`` found, as data and pages.

Why one document first: :func:`section` turns the law records of each checked block into
one JSON-ready document (``reports/schema/blocks.schema.json``), and every page is a pure
function of that document alone: :func:`markdown`, :func:`html_section` (a fragment) and
:func:`html_page` (a self-contained page), and :func:`plots` (PNG bytes, matplotlib's Agg
canvas, no pyplot). So the section can be rendered from a saved ``blocks.json`` and folded
into the main report by putting the document under its ``"blocks"`` key and appending the
rendered fragments; nothing here imports torch or re-runs a block.

What a block's entry holds: its library and version, what its recipe declares
(:func:`declares`), one row per law, dtype and mode (verdict, examples, seconds, figures such
as the swamped fraction per site and the overflow headroom, and for a failure its message,
the saved vector and the replay command), and two probes the command measures for the plots:
``zero_branch`` (per site and dtype, with that site's branch zeroed: how far the site's exit
is from its entry, which is 0 for a pre-norm site and not for a post-norm or post-activation
one, and how far it is from what the zero-branch law predicts, which is 0 on a correct block)
and ``layerscale`` (the swamped fraction per site and dtype at several LayerScale values).
The probes are figures, never verdicts; nothing in a verdict depends on the seconds, which
sit in keys ending ``_seconds`` as in the main report (its ``strip_timings`` drops them).

The escaping helpers are this module's own (three lines each) rather than those of
:mod:`resverify.reports.markdown` and :mod:`resverify.reports.html`, so the section renders
whatever state those modules are in.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resverify.reports import atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from resverify.blocks.check import LawRecord
    from resverify.blocks.recipe import Recipe

__all__ = ["SCHEMA_VERSION", "BlockRun", "count", "declares", "html_page", "html_section",
           "load_schema", "markdown", "plot_names", "plots", "section", "site_text", "validate",
           "write"]

SCHEMA_VERSION = 1
Doc = dict[str, Any]
VERDICTS = ("pass", "fail", "unjudged")
_ICON = {"pass": "✅ pass", "fail": "❌ fail", "unjudged": "⚠️ unjudged"}
REPLAY_BACKEND = "numpy"
"""The backend a failure's replay command names (the saved merge is an IR request)."""


@dataclass(frozen=True)
class BlockRun:
    """One checked block: its recipe, library, the records in the order they ran, each
    record's seconds, the vector saved for a failing record (by index) and the probes."""

    recipe: Recipe
    source: str
    library: str
    version: str | None
    records: Sequence[LawRecord]
    seconds: Sequence[float] = ()
    vectors: Mapping[int, str] = field(default_factory=dict)
    probes: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)


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


def _failure(record: LawRecord, vector: str | None) -> Doc | None:
    if record.verdict != "fail":
        return None
    from resverify.properties.vectors import replay_command

    kind = record.failure.kind if record.failure is not None else "law"
    return {"message": record.message, "kind": kind, "vector": vector,
            "replay": replay_command(Path(vector), REPLAY_BACKEND) if vector else None}


def _law_row(run: BlockRun, i: int, record: LawRecord) -> Doc:
    seconds = run.seconds[i] if i < len(run.seconds) else None
    return {"law": record.law, "dtype": record.dtype, "mode": record.mode,
            "verdict": record.verdict, "examples": record.examples,
            "time_seconds": None if seconds is None else round(seconds, 3),
            "figures": {k: _number(v) for k, v in sorted(record.figures.items())},
            "message": record.message, "failure": _failure(record, run.vectors.get(i))}


def _verdict(verdicts: Sequence[str]) -> str:
    """``fail`` if any failed, else ``unjudged`` if any (or all: none ran), else ``pass``."""
    if "fail" in verdicts:
        return "fail"
    return "unjudged" if not verdicts or "unjudged" in verdicts else "pass"


def _probes(run: BlockRun) -> Doc:
    def clean(row: Mapping[str, Any]) -> Doc:
        return {k: _number(v) if isinstance(v, float) else v for k, v in row.items()}
    return {kind: [clean(r) for r in run.probes.get(kind, ())]
            for kind in ("zero_branch", "layerscale")}


def _block(run: BlockRun) -> Doc:
    laws = [_law_row(run, i, r) for i, r in enumerate(run.records)]
    return {"name": run.recipe.name, "source": run.source, "library": run.library,
            "version": run.version, "verdict": _verdict([r["verdict"] for r in laws]),
            "time_seconds": round(sum(run.seconds), 3), "declares": declares(run.recipe),
            "laws": laws, "probes": _probes(run)}


def section(runs: Sequence[BlockRun], *, profile: str, seed: int, examples: int,
            skipped: Mapping[str, str] | None = None, interrupted: str | None = None) -> Doc:
    """The blocks section: every block's laws and probes, the counts and the verdict (not
    ``pass`` when the run was ``interrupted``, by the signal named: blocks went unchecked).

    >>> doc = section([run], profile="dev", seed=0, examples=5)  # doctest: +SKIP
    >>> doc["verdict"], doc["counts"]  # doctest: +SKIP
    ('pass', {'pass': 10, 'fail': 0, 'unjudged': 0})
    """
    blocks = [_block(run) for run in runs]
    verdicts = [law["verdict"] for b in blocks for law in b["laws"]]
    return {"schema": "resverify-blocks", "schema_version": SCHEMA_VERSION,
            "profile": profile, "seed": seed, "examples": examples,
            "interrupted": interrupted,
            "verdict": _verdict(verdicts + (["unjudged"] if interrupted else [])),
            "counts": {v: verdicts.count(v) for v in VERDICTS},
            "skipped": [{"source": s, "reason": r} for s, r in sorted((skipped or {}).items())],
            "blocks": blocks}


def load_schema() -> dict[str, Any]:
    """The section's JSON Schema, shipped as ``reports/schema/blocks.schema.json``."""
    from resverify.spec.codec import packaged_schema

    return packaged_schema("resverify.reports", "blocks.schema.json")


def validate(doc: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``doc`` does not follow the schema."""
    import jsonschema

    jsonschema.validate(doc, load_schema(), cls=jsonschema.Draft202012Validator)


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


def count(n: int, what: str) -> str:
    """``1 block``, ``2 blocks``."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def _text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def site_text(site: Mapping[str, Any]) -> str:
    """One line of what a site declares (the listing and the pages show the same)."""
    norm = "no norm" if site["norm"] == "none" else \
        f"{site['norm']}-norm ({', '.join(site['norms'])})"
    gamma = f"γ {site['scale']} = {site['scale_init']}" if site["scale"] else "no γ"
    drop = f"drop path {', '.join(site['drop_path'])}" if site["drop_path"] else "no drop path"
    act = f"then {site['activation']}" if site["activation"] else "no activation"
    return f"{norm}; {gamma}; {drop}; shortcut {site['shortcut']}; {act}"


def _declared_lines(block: Mapping[str, Any]) -> list[tuple[str, str]]:
    d = block["declares"]
    rows = [(f"site {i} ({s['label']})", site_text(s)) for i, s in enumerate(d["sites"])]
    rows.append(("stream dtype", d["stream_dtype"] or "the dtype checked"))
    rows.append(("dtypes, modes", f"{', '.join(d['dtypes'])}; {', '.join(d['modes'])}"))
    if d["zero_init"]:
        rows.append(("zero-init option", "yes (judged by zero_branch)"))
    return rows


# -- Markdown ------------------------------------------------------------------------------

def _cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return html.escape(_text(value), quote=False).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [f"| {' | '.join(headers)} |", f"|{' --- |' * len(headers)}",
            *(f"| {' | '.join(_cell(v) for v in row)} |" for row in rows), ""]


def _md_block(block: Mapping[str, Any], level: int) -> list[str]:
    h = "#" * (level + 1)
    lines = [f"{h} {_cell(block['name'])}: {_ICON[block['verdict']]}", "",
             f"{_cell(block['library'])} {_cell(block['version'] or 'version unknown')}, "
             f"{block['time_seconds']:.1f} s", ""]
    lines += _md_table(["declares", ""], _declared_lines(block))
    lines += _md_table(["law", "dtype", "mode", "verdict", "examples", "s", "figures"],
                       [(r["law"], r["dtype"], r["mode"], _ICON[r["verdict"]], r["examples"],
                         r["time_seconds"], _figure_text(r["figures"])) for r in block["laws"]])
    for r in block["laws"]:
        if r["verdict"] != "pass" and r["message"]:
            lines += [f"- **{_cell(r['law'])}** [{r['dtype']}, {r['mode']}]: "
                      f"`{r['message'].replace('`', chr(39))}`"]
            if r["failure"] and r["failure"]["replay"]:
                lines += [f"  replay: `{r['failure']['replay']}`"]
    return [*lines, ""]


def _stopped(doc: Mapping[str, Any]) -> str:
    return f" Interrupted ({doc['interrupted']}): the blocks after these were not checked." \
        if doc["interrupted"] else ""


def _figure_text(figures: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {_text(v)}" for k, v in figures.items())


def markdown(doc: Mapping[str, Any], level: int = 2) -> str:
    """The section in Markdown, its title at heading ``level`` (2 inside the main report)."""
    counts = doc["counts"]
    lines = [f"{'#' * level} Residual blocks: {_ICON[doc['verdict']]}", "",
             f"{count(len(doc['blocks']), 'block')}, profile {doc['profile']} ({doc['examples']} "
             f"examples a law), seed {doc['seed']}: {counts['pass']} pass, {counts['fail']} "
             f"fail, {counts['unjudged']} unjudged."
             f"{_stopped(doc)}", ""]
    lines += _md_table(["block", "library", "verdict", "laws", "s"],
                       [(b["name"], f"{b['library']} {b['version'] or ''}",
                         _ICON[b["verdict"]], len(b["laws"]), b["time_seconds"])
                        for b in doc["blocks"]])
    lines += [f"- skipped {_cell(s['source'])}: {_cell(s['reason'])}" for s in doc["skipped"]]
    for block in doc["blocks"]:
        lines += _md_block(block, level)
    return "\n".join(lines).rstrip("\n") + "\n"


# -- HTML ----------------------------------------------------------------------------------

def esc(value: object) -> str:
    """HTML-escape any value (None becomes an empty string)."""
    return html.escape(_text(value), quote=True)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict_html(verdict: str) -> str:
    return f'<span class="v-{esc(verdict)}">{esc(_ICON[verdict])}</span>'


def _law_rows(block: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for r in block["laws"]:
        note = esc(r["message"])
        if r["failure"] and r["failure"]["replay"]:
            note += f"<br>replay: <code>{esc(r['failure']['replay'])}</code>"
        rows.append([esc(r["law"]), esc(r["dtype"]), esc(r["mode"]),
                     _verdict_html(r["verdict"]), esc(r["examples"]), esc(r["time_seconds"]),
                     esc(_figure_text(r["figures"])), note])
    return rows


def _html_block(block: Mapping[str, Any], index: int, images: Mapping[str, bytes]) -> str:
    parts = [f'<section class="block" id="block-{index}"><h3>{esc(block["name"])}: '
             f'{_verdict_html(block["verdict"])}</h3>',
             f"<p>{esc(block['library'])} {esc(block['version'] or 'version unknown')}, "
             f"{esc(block['time_seconds'])} s</p>",
             _table(["declares", ""], [[esc(a), esc(b)] for a, b in _declared_lines(block)]),
             _table(["law", "dtype", "mode", "verdict", "examples", "s", "figures", "message"],
                    _law_rows(block))]
    for name in plot_names(block, index):
        if name in images:
            data = base64.b64encode(images[name]).decode("ascii")
            caption = _CAPTIONS[name.rsplit("-", 1)[1].removesuffix(".png")]
            parts.append(f'<figure><img alt="{esc(name)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    return "".join(parts) + "</section>"


def html_section(doc: Mapping[str, Any], images: Mapping[str, bytes] | None = None) -> str:
    """The section as an HTML fragment (``<section id="blocks">``), the plots inlined."""
    counts = doc["counts"]
    rows = [[f'<a href="#block-{i}">{esc(b["name"])}</a>',
             esc(f"{b['library']} {b['version'] or ''}"), _verdict_html(b["verdict"]),
             esc(len(b["laws"])), esc(b["time_seconds"])] for i, b in enumerate(doc["blocks"])]
    skipped = "".join(f"<li>skipped {esc(s['source'])}: {esc(s['reason'])}</li>"
                      for s in doc["skipped"])
    blocks = "".join(_html_block(b, i, images or {}) for i, b in enumerate(doc["blocks"]))
    return (f'<section id="blocks"><h2>Residual blocks: {_verdict_html(doc["verdict"])}</h2>'
            f"<p>{esc(count(len(doc['blocks']), 'block'))}, profile {esc(doc['profile'])} "
            f"({esc(doc['examples'])} examples a law), seed {esc(doc['seed'])}: "
            f"{esc(counts['pass'])} pass, {esc(counts['fail'])} fail, "
            f"{esc(counts['unjudged'])} unjudged.{esc(_stopped(doc))}</p>"
            f'{_table(["block", "library", "verdict", "laws", "s"], rows)}'
            f"<ul>{skipped}</ul>{blocks}</section>")


_STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:70em}"
          "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
          "padding:2px 6px;text-align:left;vertical-align:top}.v-fail{color:#b00}"
          ".v-pass{color:#070}.v-unjudged{color:#a60}img{max-width:100%}")


def html_page(doc: Mapping[str, Any], images: Mapping[str, bytes] | None = None) -> str:
    """The section as one self-contained page (no script, no outside reference)."""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>resverify blocks</title><style>{_STYLE}</style></head><body>"
            f"<h1>resverify blocks</h1>{html_section(doc, images)}</body></html>\n")


# -- plots ---------------------------------------------------------------------------------

_CAPTIONS = {
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
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _bars(ax: Axes, groups: Sequence[str], series: Mapping[str, Sequence[float | None]],
          log: bool) -> None:
    """Grouped bars: one group per ``groups`` entry, one bar per series; a 0 or a missing
    value is written, not drawn (a log axis has no 0)."""
    width = 0.8 / max(1, len(series))
    for k, (label, values) in enumerate(series.items()):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None and v > 0 else math.nan for v in values]
        ax.bar(xs, heights, width, label=label)
        for x, v in zip(xs, values, strict=True):
            if v is None or v <= 0:
                ax.annotate("–" if v is None else "0", (x, 0), xycoords=("data", "axes fraction"),
                            ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    drawn = [v for vs in series.values() for v in vs if v is not None and v > 0]
    if log and drawn:
        ax.set_yscale("log")
    elif not log:
        ax.set_ylim(0, 1.1 * max(drawn, default=1.0))
    ax.legend(fontsize=7)


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
        ax2 = fig.add_subplot(1, 2, 2)
        for (dtype, site) in sorted({(r["dtype"], r["site"]) for r in gamma}):
            pts = sorted((r["gamma"], r["swamped"]) for r in gamma
                         if (r["dtype"], r["site"]) == (dtype, site))
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                     label=f"{dtype} {site}")
        ax2.set_xscale("log")
        ax2.set_ylim(0, 1.05)
        ax2.set_xlabel("LayerScale γ")
        ax2.set_title("by LayerScale γ", fontsize=9)
        ax2.legend(fontsize=7)
    fig.suptitle(block["name"], fontsize=10)
    fig.tight_layout()
    return _png(fig)


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


def write(folder: Path, doc: Mapping[str, Any], with_plots: bool = True) -> list[Path]:
    """Validate ``doc`` and write ``blocks.json``, ``blocks.md``, ``blocks.html`` and the PNGs
    into ``folder``, each file atomically; the paths written."""
    import json

    validate(doc)
    folder.mkdir(parents=True, exist_ok=True)
    images = plots(doc) if with_plots else {}
    files = {"blocks.json": json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False,
                                        allow_nan=False) + "\n",
             "blocks.md": "# resverify blocks\n\n" + markdown(doc),
             "blocks.html": html_page(doc, images)}
    for stale in folder.glob("block*-*.png"):  # an earlier run's plots of more blocks
        if re.fullmatch(r"block\d+-(swamped|zero)\.png", stale.name) and stale.name not in images:
            stale.unlink()
    written = []
    for name, data in images.items():
        atomic.write_bytes(folder / name, data)
        written.append(folder / name)
    for name, text in files.items():
        atomic.write_text(folder / name, text)
        written.append(folder / name)
    return written
