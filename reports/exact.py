"""The exact section of the report: per layer and dtype, how tight the budgets are.

Why a section of its own: ``resverify blocks check --exact`` judges every element of a
traced block's output and gradients against the exact oracle
(:mod:`resverify.blocks.exact`), not the block laws, so what it found has other fields than a
law record: elements judged of the total, the distribution of ``|error| / bound``, the
elements the exact interpreter decided, the patterns matched and constants lifted, the
local (op by op) judgement and whether the traced graph ran as eager did. :func:`section`
turns the judgements (plain data, :meth:`resverify.blocks.exact.Judgement.as_doc`) into the
report's optional ``exact`` key (``reports/schema/report.schema.json``); the Markdown and
HTML writers render it with the text helpers here, and :func:`plots` draws the
distribution, so the one writer (:func:`resverify.reports.writer.write_files`) writes it
with the rest. Nothing here imports torch or runs a block.

Every verdict is pointwise: about the inputs drawn (from the section's ``seed``), the
block's parameters and the cotangent, not about every input of a box; the section's
``claim`` and every page that shows it say so (:data:`CLAIM`). A block the IR cannot
express is ``unjudged``, its entry's ``not_traced`` naming the ATen ops that stopped it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resverify.reports.verdicts import blocks_verdict

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ExactRun"]

Doc = dict[str, Any]

CLAIM = ("pointwise: these inputs (the input, parameters and cotangent drawn from the "
         "seed), not every input of a box")
"""What every exact verdict claims, as the report says it."""
PLOT = "exact-tightness.png"
"""The file name of the section's plot."""
CAPTION = ("|error| / bound over every element judged, per layer and dtype: the box spans "
           "the 25th to 75th percentile, the whisker the 1st to 99th, the dot the median, "
           "the cross the maximum; the red line is the edge of the budget (1). Ratios under "
           "1e-10 (0 among them) are drawn at the left edge. Pointwise: these inputs.")
FLOOR = 1e-10
"""The smallest ratio the plot draws where it is (a log axis has no 0)."""
NOT_TRACED = "not traced"
"""How the pages show the verdict of a block the IR cannot express (``unjudged`` in
report.json, its ``not_traced`` naming the ops)."""


@dataclass(frozen=True)
class ExactRun:
    """One block as the exact judgement found it: its name, where its recipe came from, its
    library, each judgement (:meth:`~resverify.blocks.exact.Judgement.as_doc`, with the
    ``vector`` saved and its ``replay`` command), in the order its dtypes ran, and, for a
    block the IR cannot express, ``not_traced``: the ``dtype`` tried, the ATen ``ops`` that
    stopped it, the ``nodes`` refused and the ``reason``."""

    name: str
    source: str
    library: str
    version: str | None
    judged: Sequence[Mapping[str, Any]] = ()
    not_traced: Mapping[str, Any] | None = None


def _block(run: ExactRun) -> Doc:
    found = [v for j in run.judged for v in verdicts(j)]
    found += ["unjudged"] if run.not_traced is not None else []
    return {"name": run.name, "source": run.source, "library": run.library,
            "version": run.version, "verdict": blocks_verdict(found, False),
            "judgements": [dict(j) for j in run.judged],
            "not_traced": None if run.not_traced is None else dict(run.not_traced)}


def verdicts(judgement: Mapping[str, Any]) -> list[str]:
    """A judgement's verdict and those of its paths that were judged (``--paths``)."""
    laws = judgement.get("layer_laws")
    return [judgement["verdict"], *(p["verdict"] for p in judgement.get("paths", ())
                                    if p["verdict"] != "unjudged"),
            *([laws["verdict"]] if laws is not None and laws["verdict"] != "unjudged" else [])]


def section(runs: Sequence[ExactRun], *, seed: int, interrupted: str | None = None) -> Doc:
    """The exact section: every block's judgements, the counts by verdict (a block not
    traced counts once, as ``not traced``), and the section's verdict (``fail`` when an
    element or an op is outside its budget; ``unjudged`` when nothing was judged; ``partly
    judged`` when some judgement bounded only part of its elements, a block was not traced
    or the run was ``interrupted``; else ``pass``)."""
    blocks = [_block(run) for run in runs]
    rows = [v for b in blocks for j in b["judgements"] for v in verdicts(j)]
    refused = sum(b["not_traced"] is not None for b in blocks)
    verdict = blocks_verdict([*rows, *["unjudged"] * refused], interrupted is not None)
    return {"seed": seed, "claim": CLAIM, "interrupted": interrupted, "verdict": verdict,
            "counts": {"pass": rows.count("pass"), "fail": rows.count("fail"),
                       "partly judged": rows.count("partly judged"), "not traced": refused},
            "blocks": blocks}


# -- text the pages share --------------------------------------------------------------------

def ratio_text(value: object) -> str:
    """A ratio of the tightness: 3 significant digits, or ``inf``."""
    return f"{value:.3g}" if isinstance(value, float | int) else str(value)


def judged_text(judgement: Mapping[str, Any]) -> str:
    """``2480 of 2480``: elements judged of the total."""
    return f"{judgement['elements']} of {judgement['total']}"


def dtype_text(judgement: Mapping[str, Any]) -> str:
    """``bfloat16 (sums in float32)``, or the dtype alone."""
    wide = judgement["accumulate"]
    return judgement["dtype"] if wide is None else f"{judgement['dtype']} (sums in {wide})"


def not_traced_text(refused: Mapping[str, Any]) -> str:
    """Why a block was not traced: the ATen ops it lacks, or the reason."""
    if refused["ops"]:
        nodes = refused["nodes"]
        return (f"not traced: the IR lacks {', '.join(refused['ops'])} ({nodes} "
                f"{'node' if nodes == 1 else 'nodes'})")
    return f"not traced: {refused['reason']}"


def note_text(judgement: Mapping[str, Any]) -> str:
    """What a judgement's row says beside its figures: for a failure the elements outside,
    the first op out of its budget and the vector; for a partial one what went unbounded."""
    local = judgement["local"]
    if judgement["verdict"] == "fail":
        said = [f"{judgement['outside']} elements outside the budget"] \
            if judgement["outside"] else []
        if local is not None and local["first"] is not None:
            first = local["first"]
            where = f" in {first['module']}" if first["module"] else ""
            said.append(f"first op out of budget: {first['node']} ({first['target']}{where}), "
                        f"{first['outside']} of {first['elements']} elements, |error|/bound "
                        f"max {ratio_text(first['worst'])}")
        return "; ".join([*said, f"vector {judgement['vector']}"])
    if judgement["verdict"] == "partly judged":
        return (f"{judgement['total'] - judgement['elements']} elements have no finite bound "
                "in this dtype (nothing claimed of them)")
    return ""


def detail_lines(judgement: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(what, said)`` of a judgement beyond its row: decided exactly, patterns, constants,
    untrained inputs, the local judgement, graph vs eager, the seconds of each stage, the
    elements outside, the vector and its replay command."""
    local = judgement["local"]
    rows = [("decided exactly", str(judgement["decided_exactly"])),
            ("matched patterns", ", ".join(judgement["matched"]) or "none"),
            ("constants lifted", ", ".join(judgement["constants"]) or "none"),
            ("untrained inputs", ", ".join(judgement["untrained"]) or "none")]
    if local is not None:
        first = local["first"]
        rows += [("local", f"{local['ops_judged']} ops judged, {local['out_of_budget']} out of "
                           "budget" + (f", first {first['node']} ({first['target']}"
                                       f"{' in ' + first['module'] if first['module'] else ''})"
                                       if first else "")
                  + (f"; not judged: {', '.join(local['not_judged'])}"
                     if local["not_judged"] else "")),
                 ("graph vs eager", local["faithful"] or "not compared")]
    rows.append(("seconds", ", ".join(f"{k.removesuffix('_seconds')} {v:.3g}"
                                      for k, v in judgement["stage_seconds"].items())))
    rows += [("outside the budget", m) for m in judgement["misses"]]
    rows.append(("vector", judgement["vector"]))
    if judgement["replay"]:
        rows.append(("replay", judgement["replay"]))
    return rows


def counts_text(exact: Mapping[str, Any]) -> str:
    """The section's summary line, with its claim."""
    c = exact["counts"]
    stopped = (f" Interrupted ({exact['interrupted']}): the blocks after these were not "
               "judged." if exact["interrupted"] else "")
    judged = sum(len(b["judgements"]) for b in exact["blocks"])
    return (f"{judged} judgement(s) of {len(exact['blocks'])} block(s), seed {exact['seed']}: "
            f"{c['pass']} pass, {c['fail']} fail, {c['partly judged']} partly judged; "
            f"{c['not traced']} block(s) not traced; {exact['claim']}.{stopped}")


def table_rows(exact: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The rows of the table "exact judgement": layer, dtype, verdict, judged/total, median,
    p99, max, seconds and the note (a failure's vector beside its row); a block not traced
    is one row, its verdict :data:`NOT_TRACED` (``unjudged`` in report.json), its note
    naming what stopped it."""
    rows: list[tuple[str, ...]] = []
    for block in exact["blocks"]:
        for j in block["judgements"]:
            t = j["tightness"]
            rows.append((block["name"], dtype_text(j), j["verdict"], judged_text(j),
                         ratio_text(t["median"]), ratio_text(t["p99"]), ratio_text(t["max"]),
                         f"{j['time_seconds']:.3g}", note_text(j)))
            rows += [path_row(block["name"], j, p) for p in j.get("paths", ())]
            rows += [layer_row(block["name"], j, part) for part in j.get("layers", ())]
            rows += law_rows(block["name"], j)
        refused = block["not_traced"]
        if refused is not None:
            rows.append((block["name"], refused["dtype"] or "", NOT_TRACED, "", "", "", "",
                         "", not_traced_text(refused)))
    return rows


def path_row(name: str, judgement: Mapping[str, Any], path: Mapping[str, Any]
             ) -> tuple[str, ...]:
    """A path's row under its judgement's: the dtype column ``float32 · path compile``, the
    note its evidence and how often its output is not eager's (or why it did not run)."""
    dtype = f"{dtype_text(judgement)} · path {path['path']}"
    if path["verdict"] == "unjudged":
        return (name, dtype, "unjudged", "", "", "", "", "", path["reason"])
    t = path["tightness"]
    what = "" if path["gradients"] else "the output only; "
    note = f"{what}{path['evidence']}; {_stream_text(path)}"
    if path["outside"]:
        note = f"{path['outside']} elements outside the budget; {note}"
    if path.get("vector"):
        note = f"{note}; vector {path['vector']}"
    return (name, dtype, path["verdict"], f"{path['elements']} of {path['total']}",
            ratio_text(t["median"]), ratio_text(t["p99"]), ratio_text(t["max"]),
            f"{path['time_seconds']:.3g}", note)


def layer_row(name: str, judgement: Mapping[str, Any], part: Mapping[str, Any]
              ) -> tuple[str, ...]:
    """A part's row under a model's judgement (``resverify model``): the dtype column
    ``float32 · model.layers.0``, the note what is outside (the stream's elements, the
    gradients', the first op out of its own budget) and whether the failure is charged to
    it."""
    t = part["tightness"]
    said = [f"{n} {what} elements outside the budget" for n, what in
            ((part["stream_outside"], "stream"), (part["grads_outside"], "gradient")) if n]
    first = part["first_op"]
    if first is not None:
        said.append(f"first op out of budget: {first['node']} ({first['target']} in "
                    f"{first['module']})")
    if judgement.get("culprit") == part["name"]:
        said.insert(0, "the first layer out of budget")
    return (name, f"{dtype_text(judgement)} · {part['name']}", part["verdict"],
            f"{part['elements']} of {part['total']}", ratio_text(t["median"]),
            ratio_text(t["p99"]), ratio_text(t["max"]), "", "; ".join(said))


def law_rows(name: str, judgement: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """A model's layer laws under its judgement: a row per layer, the dtype column
    ``float32 · model.layers.1 laws``, the note the laws that failed and where the stream
    left the identity (one row saying why, where no law was run)."""
    laws = judgement.get("layer_laws")
    if laws is None:
        return []
    dtype = dtype_text(judgement)
    if laws["verdict"] == "unjudged":
        return [(name, f"{dtype} · layer laws", "unjudged", "", "", "", "", "", laws["reason"])]
    rows: list[tuple[str, ...]] = []
    for layer in laws["layers"]:
        failed = ", ".join(layer["failed"])
        where = layer["location"]
        note = f"fails {failed}" if failed else "every law passes"
        if where is not None:
            note += f"; the stream leaves the identity at {where['op']} in {where['module']}"
        elif layer["unlocated"]:
            note += f"; {layer['unlocated']}"
        if laws["first"] == layer["index"]:
            note = f"the first failing layer; {note}"
        rows.append((name, f"{dtype} · {layer['name']} laws", "fail" if failed else "pass",
                     "", "", "", "", "", note))
    return rows


HEADERS = ("layer", "dtype", "verdict", "judged/total", "median", "p99", "max", "s", "note")
"""The columns of the table "exact judgement"; median, p99 and max are of |error|/bound."""


def _stream_text(path: Mapping[str, Any]) -> str:
    """``stream not bitwise eager's on 12.5% of 256 elements (block.ln_2, output); output on
    9.4%``, and the stream's failure where it has one."""
    stream = path.get("stream")
    if stream is None:  # a report written before the stream law
        return f"output not bitwise eager's on {path['differs']:.1%} of elements"
    said = (f"stream not bitwise eager's on {stream['differs']:.1%} of {stream['elements']} "
            f"elements ({', '.join(stream['sites'])}); output on {path['differs']:.1%}")
    return f"{said}; STREAM: {stream['failure']}" if stream["failure"] else said


PATH_HEADERS = ("layer", "dtype", "path", "verdict", "judged/total", "median", "p99", "max",
                "stream ≠ eager", "output ≠ eager", "first outside", "s")
"""The columns of the table "paths": one row per layer, dtype and path (eager included)."""

_FIRST = {"fail": 0, "partly judged": 1, "pass": 2, "unjudged": 3}
"""The order of the table "paths": the failing paths first, those not judged last."""


def _eager_first(judgement: Mapping[str, Any]) -> str:
    """The eager judgement's first op out of its budget (the local judgement's), else its
    first element outside."""
    local = judgement["local"]
    if local is not None and local["first"] is not None:
        first = local["first"]
        return f"op {first['node']} ({first['target']})"
    return judgement["misses"][0] if judgement["misses"] else ""


def _path_cells(path: Mapping[str, Any]) -> tuple[str, ...]:
    """A path's cells from its verdict on: a fused path has no intermediate values, so its
    first outside is an element (or its stream's failure), not an op."""
    if path["verdict"] == "unjudged":
        return (path["verdict"], "", "", "", "", "", "", path["reason"], "")
    t, stream = path["tightness"], path.get("stream")
    first = stream["failure"] if stream and stream["failure"] else \
        (path["misses"][0] if path["misses"] else "")
    return (path["verdict"], judged_text(path), ratio_text(t["median"]), ratio_text(t["p99"]),
            ratio_text(t["max"]), f"{stream['differs']:.1%}" if stream else "",
            f"{path['differs']:.1%}", first, f"{path['time_seconds']:.3g}")


def path_table_rows(exact: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The rows of the table "paths" (:data:`PATH_HEADERS`), for every judgement that was
    run on paths (``--paths``): its eager row, then each path's; the failing rows first,
    those not judged last, else in the order judged."""
    rows: list[tuple[int, tuple[str, ...]]] = []
    for block in exact["blocks"]:
        for j in block["judgements"]:
            if "paths" not in j:
                continue
            t = j["tightness"]
            rows.append((_FIRST.get(j["verdict"], 2), (
                block["name"], dtype_text(j), "eager", j["verdict"], judged_text(j),
                ratio_text(t["median"]), ratio_text(t["p99"]), ratio_text(t["max"]), "", "",
                _eager_first(j), f"{j['time_seconds']:.3g}")))
            rows += [(_FIRST.get(p["verdict"], 2), (block["name"], dtype_text(j), p["path"],
                                                     *_path_cells(p))) for p in j["paths"]]
    return [row for _, row in sorted(rows, key=lambda r: r[0])]


# -- the plot ------------------------------------------------------------------------------------

def _series(exact: Mapping[str, Any]) -> list[tuple[str, dict[float, float]]]:
    """Per judged layer and dtype, its label and its ratio at each percentile kept."""
    return [(f"{b['name']} {j['dtype']}",
             {q["percent"]: _ratio(q["ratio"]) for q in j["tightness"]["quantiles"]})
            for b in exact["blocks"] for j in b["judgements"] if j["tightness"]["quantiles"]]


def _ratio(value: object) -> float:
    return float(value) if isinstance(value, float | int) else math.inf


def _draw(ax: Axes, at: dict[float, float], y: int, floor: float) -> None:
    """One layer and dtype: box 25-75, whisker 1-99, dot the median, cross the max."""
    def x(p: float) -> float:
        return min(max(at[p], floor), 1e6)

    ax.plot([x(1.0), x(99.0)], [y, y], color="#57606a", linewidth=1)
    ax.plot([x(25.0), x(75.0)], [y, y], color="#0969da", linewidth=6, solid_capstyle="butt")
    ax.plot([x(50.0)], [y], "o", color="#1f2328", markersize=4)
    ax.plot([x(100.0)], [y], "x", color="#cf222e" if at[100.0] > 1 else "#1f2328")


def plots(exact: Mapping[str, Any]) -> dict[str, bytes]:
    """The distribution of ``|error| / bound`` per layer and dtype (:data:`PLOT`), as PNG
    bytes; none when nothing was judged."""
    series = _series(exact)
    if not series:
        return {}
    from matplotlib.figure import Figure

    from resverify.reports.plots import png

    floor = FLOOR
    fig = Figure(figsize=(7, 1.2 + 0.35 * len(series)))
    ax = fig.add_subplot(1, 1, 1)
    for y, (_, at) in enumerate(series):
        _draw(ax, at, y, floor)
    ax.axvline(1.0, color="#cf222e", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(floor / 2, max(2.0, *(min(v, 1e6) * 2 for _, at in series
                                      for v in at.values())))
    ax.set_yticks(range(len(series)), [label for label, _ in series], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("|error| / bound (pointwise: these inputs)")
    ax.set_title("exact judgement: how tight the budgets are", fontsize=9)
    fig.tight_layout()
    return {PLOT: png(fig)}
