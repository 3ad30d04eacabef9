"""report.html: one self-contained page for people: tables, the conformance matrix (VJP and
JVP side by side), plots with one series per checked backend.

Self-contained means no network and no script: the CSS is inline, the plots are PNG
``data:`` URIs, and a Content-Security-Policy forbids every script and every fetch, as
a second line of defence. The first line is escaping: every string that reaches the
page (backend names, error texts, test ids, claim texts) goes through :func:`esc`.
Clock-dependent values sit in elements of class ``timing``; the rest of the page is the
same for the same seed and versions.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from resverify.reports import blocks as blocks_text
from resverify.reports import exact as exact_text
from resverify.reports.coverage import heard
from resverify.reports.markdown import blocks_only, citation, short_note
from resverify.reports.matrix import cell_text, column_name

__all__ = ["render_joined_html"]

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
       "form-action 'none'")
OPEN_FAILURES = 5  # failure cards shown unfolded; the rest fold (<details>, no script)
PLOT_CAPTIONS = {
    "gradient_retention": "An illustration of gradient retention by depth: max|x̄|/max|ȳ| "
    "through the last k layers of linear stacks, plain and residual. Lines: the S11 stack "
    "W = diag(-1/4, -1/4), exactly 0.25^k (plain) and 0.75^k (residual), and a random 8-wide "
    "stack (weights of gain 0.9 drawn from the run's seed), computed by resverify's exact "
    "interpreter. Markers: each checked backend's own gradients for the same stacks, one "
    "request per stack.",
    "depth_law": "An illustration of the depth law d x_L / d x_0 = (1+a)^L for the branch "
    "F = a·x. Left: |(1+a)^L| over a and L, in float64 by NumPy; the vertical lines mark "
    "|1+a| = 1 (a = 0 and a = -2), the dashed line a = -1 where the gradient is exactly 0. "
    "Right: the exact powers for a = -2.5, -0.5, 0.1 and 1 (stars: the S25 values). Markers: "
    "each checked backend's own d x_L / d x_0 for L = 0 to 30, from one 4-wide request.",
    "depth_law_jvp": "An illustration of the depth law in forward mode: |J·t| through the last "
    "L blocks of the stack x + a·x for a tangent t = 3/4. Lines: the exact (1+a)^L·t of the "
    "spec's law. Markers: the output tangents J·t of each checked backend that claims forward "
    "mode (jvp), all depths from one request.",
    "variance_growth": "An illustration of variance growth by depth on 768-component streams "
    "of N(0,1) updates drawn from the run's seed: left, one unscaled 100-layer stream (law: "
    "variance l·σ²); right, the final variance of streams of depth L whose updates are scaled "
    "by 1/√L (law: σ²); the bands are 99.9% ranges of the sample variance. Lines: the float64 "
    "NumPy reference simulation (not exact). Markers: each checked backend's own stream on the "
    "same updates (every 5th layer on the left; L = 1, 4, 16 and 64 on the right).",
    "norm_depth": "An illustration of the input gradient by depth: ‖x̄‖₂/‖ȳ‖₂ through the last "
    "k blocks of 4-wide pre-norm stacks h + F(LN(h)) and post-norm stacks LN(h + F(h)) with "
    "random linear branches (gains 0.5 and 1; weights, x and ȳ drawn from the run's seed). "
    "Lines: exact, by resverify's exact interpreter. Neither ratio stays at 1: pre-norm passes "
    "ȳ unchanged along the identity path and adds what each branch sends back, so it does not "
    "tend to 0; post-norm passes it through one normalization Jacobian per block (its mean and "
    "its component along the block's output removed, the rest divided by the block's σ), so "
    "it can shrink toward 0 or grow. At the default seed 0 pre-norm rises to about 3 by depth "
    "6 and post-norm ranges from 0.45 to 2.2; over seeds 0-19 at depth 6, pre-norm lies "
    "between 0.42 and 7.9 (median 1.6), post-norm between 0.0027 and 8 (median 0.33). "
    "Markers: each checked backend's own gradients for the same stacks.",
}
PLOTS_INTRO = (
    "These plots are illustrations of the laws, not the verdicts. Each line is computed by "
    "resverify itself (exactly, or by the float64 NumPy reference where the caption says so) "
    "on a few fixed programs whose inputs come from the run's seed; each marker is a checked "
    "backend's own answer to the same programs, asked in float64 (float32 for a backend "
    "without float64), never in float16 or bfloat16, and only with the ops the caption "
    "names. A backend can sit on every line and still fail properties, which draw other "
    "inputs, dtypes, ops and edge values: the verdicts are the failures and the conformance "
    "matrix above. The legend gives each backend's largest relative deviation from the "
    "lines, and where it answered NaN or ±inf; a backend off the lines answered these "
    "programs wrongly.")
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;
max-width:1200px;padding:0 1rem;color:#1b1f24;background:#fff}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem;width:100%}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
td{overflow-wrap:anywhere}
th{background:#f6f8fa;overflow-wrap:normal;word-break:keep-all;white-space:nowrap}
th.name{white-space:normal}td.msg{font-family:ui-monospace,monospace;white-space:pre-wrap;
font-size:.8rem}
.failure{border:1px solid #cf222e;border-left:6px solid #cf222e;padding:.3rem .8rem;
margin:.6rem 0;overflow-wrap:anywhere}.failure summary{font-weight:700;margin:.3rem 0;
cursor:pointer}
.failure pre{white-space:pre-wrap;background:#f6f8fa;padding:.4rem;font-size:.8rem}
.copyrow{margin:.2rem 0 .45rem}.copyrow .label{display:block;font-size:.75rem;color:#57606a;
text-transform:uppercase;letter-spacing:.04em}code.copy{display:block;font-family:ui-monospace,
monospace;font-size:1rem;font-weight:600;background:#f6f8fa;border:1px solid #d0d7de;
padding:.35rem .55rem;user-select:all;overflow-wrap:anywhere}
table.element{width:auto}table.element td{font-family:ui-monospace,monospace}
.facts{font-size:.8rem;color:#57606a;margin:.3rem 0}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
.skipped,.xfailed,.missing,.not-claimed,.none{color:#6e7781}.expected{color:#9a6700;font-weight:600}
.fixed{color:#cf222e;font-weight:600}.badge{display:inline-block;padding:.15rem .6rem;
border-radius:1rem;color:#fff;font-weight:700}.badge.pass{background:#1a7f37}
.unjudged,.partly-judged,.incomplete,.not-traced{color:#9a6700;font-weight:600}
.badge.fail{background:#cf222e}.badge.incomplete,.badge.unjudged,
.badge.partly-judged{background:#9a6700;color:#fff}
.warn{background:#fff8c5;border:1px solid #d4a72c;padding:.5rem;margin:.5rem 0}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.85rem;color:#57606a}code{font-size:.85em}
.meta td:first-child{width:12rem;font-weight:600}.nw{white-space:nowrap;overflow-wrap:normal}
tr.group th{background:#eaeef2;text-align:left}table.matrix th{text-align:center}
td.short{color:#cf222e;font-weight:600}
tr.path-row.fail td{background:#ffebe9}
"""


def esc(value: object) -> str:
    """HTML-escape any value (None becomes an empty string)."""
    return "" if value is None else html.escape(str(value), quote=True)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str = "",
           names: Sequence[str] = ()) -> str:
    """A table; a header in ``names`` is a name (a backend's), not a label: it may wrap
    between words (class ``name``), where a label stays on one line."""
    head = "".join(f'<th class="name">{esc(h)}</th>' if h in names else f"<th>{esc(h)}</th>"
                   for h in headers)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}>{thead}<tbody>{body}</tbody></table>"


def _td(value: object, css: str = "") -> str:
    cls = f' class="{css}"' if css else ""
    return f"<td{cls}>{esc(value)}</td>"


def _css(status: str) -> str:
    """A status as one CSS class: ``partly judged`` -> ``partly-judged``."""
    return esc(status.replace(" ", "-"))


def _status(value: str, kind: str | None = None) -> str:
    shown = f"{value} ({kind})" if kind else value
    return f'<td class="{_css(value)} nw">{esc(shown)}</td>'


def _header(doc: Mapping[str, Any]) -> str:
    run, env = doc["run"], doc["environment"]
    deps = ", ".join(f"{esc(k)} {esc(v)}" for k, v in sorted(env["dependencies"].items()) if v)
    meta = [("status", doc["status"]), ("complete", str(doc["complete"]).lower()),
            ("resverify", doc["tool"]["version"]), ("profile", run["profile"]),
            ("seed", run["seed"]),
            ("backends", ", ".join(run["backends"]) or "none (a blocks run)"),
            ("python", f"{env['implementation']} {env['python']}"),
            ("platform", f"{env['platform']} ({env['machine']})")]
    rows = [[_td(k), _td(v)] for k, v in meta] + [[_td("dependencies"), f"<td>{deps}</td>"]]
    warnings = "".join(f'<div class="warn">{esc(w)}</div>' for w in doc["warnings"])
    return (f'<h1>resverify report <span class="badge {_css(doc["status"])}">'
            f'{esc(doc["status"])}</span></h1>{warnings}'
            + _table(["", ""], rows, "meta"))


def _summary(doc: Mapping[str, Any]) -> str:
    rows = []
    for part in ("properties", "claims"):
        c = doc["summary"][part]
        rows.append([_td(part), _td(c["total"]), _td(c["pass"], "pass"),
                     _td(c["fail"], "fail"), _td(c["expected"], "expected"),
                     _td(c["skipped"], "skipped")])
    return "<h2>Summary</h2>" + _table(
        ["", "total", "pass", "fail", "expected", "skipped"], rows)


def _known_failures(doc: Mapping[str, Any]) -> str:
    """Every known-failures entry, fixed ones first (a fixed entry fails the run)."""
    known = doc["known_failures"]
    if known["file"] is None:
        return ""
    order = {"fixed": 0, "expected": 1, "unjudged": 2}
    entries = sorted(known["entries"], key=lambda e: (order.get(e["status"], 0), e["entry"]))
    rows = [[_td(e["entry"], "nw"), _td(e["backend"]), _td(e["property"] or f"claim {e['claim']}"),
             _td(e["dtype"]), _status(e["status"]), _td(e["vector"], "msg"), _td(e["reason"]),
             _td(e["detail"], "msg")] for e in entries]
    return (f"<h2>Known failures</h2><p>from <code>{esc(known['file'])}</code>; a fixed entry "
            "passes now and fails the run until it is removed</p>" + _table(
                ["entry", "backend", "property or claim", "dtype", "status", "vector", "reason",
                 "detail"], rows))


def _backends(doc: Mapping[str, Any]) -> str:
    """Each backend: what it claims, its verdict, its evidence, and every test that could
    not run on it with the reason (folded)."""
    rows = [[_td(b["name"]), _status(b["status"]), _td(b["tests_run"], "nw"),
             _td(b["examples"], "nw"), _td(b["expected"], "nw"), _td(b["device"]),
             _td(", ".join(b["dtypes"])), _td(", ".join(b.get("modes", ["vjp"]))),
             _td(", ".join(b["ops"])), _td(_about(b["about"]), "msg")]
            for b in doc["backends"]]
    folded = "".join(
        f'<details><summary>{len(b["not_run"])} tests could not run on {esc(b["name"])}'
        "</summary>" + _table(["test", "reason"], [[_td(n["id"]), _td(n["reason"], "msg")]
                                                   for n in b["not_run"]]) + "</details>"
        for b in doc["backends"] if b["not_run"])
    return "<h2>Backends</h2>" + _table(
        ["backend", "status", "tests run", "examples", "expected failures", "device", "dtypes",
         "modes", "ops", "library and settings"], rows) + folded


def _about(about: Mapping[str, str]) -> str:
    """``library version`` then each numerics setting as ``name=value``, one per line."""
    settings = [f"{k}={v}" for k, v in sorted(about.items())
                if k not in ("backend", "library", "version", "device")]
    return "\n".join([f"{about['library']} {about['version']}", *settings])


MODE_TITLES = {"vjp": "VJP (reverse mode)", "jvp": "JVP (forward mode)"}
_CELL_TEXT = {"none": "—", "not claimed": "not claimed"}


def _cell(status: str, examples: int, css: str = "nw", text: str | None = None) -> str:
    """A matrix cell: the status (its class colours it) and the examples run, if any, or
    ``text`` when given (:func:`resverify.reports.matrix.cell_text`)."""
    shown = text if text is not None else (
        _CELL_TEXT.get(status, status) + (f" ({examples})" if examples else ""))
    cls = "missing" if status == "none" else status.replace(" ", "-")
    return f'<td class="{esc(cls)} {css}">{esc(shown)}</td>'


def _mode_table(matrix: Mapping[str, Any]) -> str:
    """Each backend's verdict in each mode, VJP beside JVP."""
    modes = list(dict.fromkeys(m["mode"] for m in matrix["modes"]))
    sides: dict[str, dict[str, Mapping[str, Any]]] = {}
    for m in matrix["modes"]:
        sides.setdefault(column_name(m), {})[m["mode"]] = m
    rows = [[_td(name)] + [_mode_cell(by_mode.get(mode)) for mode in modes]
            for name, by_mode in sides.items()]
    return _table(["backend", *(MODE_TITLES.get(m, m) for m in modes)], rows, "modes")


def _mode_cell(side: Mapping[str, Any] | None) -> str:
    if side is None:
        return _td("—")
    if side["status"] == "not claimed":
        return _cell("not claimed", 0)
    said = f"{side['status']}: {side['tests_run']} tests, {side['examples']} examples"
    if side["failed"]:
        said += f", {side['failed']} failed"
    if side["expected"]:
        said += f", {side['expected']} expected"
    return f'<td class="{_css(side["status"])}">{esc(said)}</td>'


def _spans(columns: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], str],
           css: str, shown: Callable[[Mapping[str, Any]], str] | None = None) -> str:
    """A header row of the matrix: one cell per run of adjacent columns with the same
    ``key`` (a machine, or a backend on its machine), spanning them, showing ``shown``
    (default the key)."""
    cells, k = [], 0
    while k < len(columns):
        n = k + 1
        while n < len(columns) and key(columns[n]) == key(columns[k]):
            n += 1
        text = (shown or key)(columns[k])
        cells.append(f'<th class="{css}" colspan="{n - k}">{esc(text)}</th>')
        k = n
    return "".join(cells)


def _matrix(doc: Mapping[str, Any]) -> str:
    """The conformance matrix of report.json: a row per property, grouped by mode, a cell
    per backend and dtype (two header rows: backends, then their dtypes; a joined report's
    has the machines above its backends)."""
    matrix = doc["matrix"]
    if not matrix["rows"]:
        return ""
    columns = matrix["columns"]
    above = [_spans(columns, lambda c: str(c["machine"]), "machine")] \
        if any("machine" in c for c in columns) else []
    above.append(_spans(columns, column_name, "name", lambda c: str(c["backend"])))
    head = (f'<thead><tr><th rowspan="{len(above) + 1}">property</th>' + "</tr><tr>".join(above)
            + "</tr><tr>" + "".join(f"<th>{esc(c['dtype'])}</th>" for c in columns)
            + "</tr></thead>")
    body, mode = [], None
    for row in matrix["rows"]:
        if row["mode"] != mode:
            mode = row["mode"]
            body.append(f'<tr class="group"><th colspan="{len(columns) + 1}">'
                        f"{esc(MODE_TITLES.get(mode, mode))}</th></tr>")
        body.append("<tr>" + _td(row["property"]) + "".join(
            _cell(c["status"], c["examples"], text=cell_text(c)) for c in row["cells"]) + "</tr>")
    return ("<h2>Conformance matrix</h2><p>VJP and JVP side by side: each backend's verdict "
            "per mode, then one row per property and a cell per backend and dtype (status, "
            "examples run); <i>not claimed</i> means the backend does not claim that dtype "
            "or mode.</p>" + _mode_table(matrix)
            + f'<table class="matrix">{head}<tbody>{"".join(body)}</tbody></table>')


class _Card(NamedTuple):
    """A failure card: its title, the values a person copies (label, text), the first
    failing element, further facts (label, value) and the message."""

    title: str
    copies: list[tuple[str, object]]
    element: Mapping[str, str] | None
    facts: list[tuple[str, object]]
    text: object


def _failure_card(card: _Card, open_: bool) -> str:
    """The copyable values first and large, then the failing element, the facts, the
    message."""
    copies = "".join(f'<div class="copyrow"><span class="label">{esc(k)}</span>'
                     f'<code class="copy">{esc(v)}</code></div>' for k, v in card.copies if v)
    facts = " · ".join(f"{esc(k)} <code>{esc(v)}</code>" for k, v in card.facts if v)
    body = f"<pre>{esc(card.text)}</pre>" if card.text else ""
    state = " open" if open_ else ""
    return (f'<details class="failure"{state}><summary>{esc(card.title)}</summary>{copies}'
            f'{_element(card.element)}<div class="facts">{facts}</div>{body}</details>')


def _element(element: Mapping[str, str] | None) -> str:
    """The first failing element as a one-row table (nothing when the failure names none)."""
    if element is None:
        return ""
    row = [_td(element["element"]), _td(element["backend"], "nw"), _td(element["expected"]),
           _td(element["diff"], "nw"), _td(element["budget"], "nw")]
    return _table(["first failing element", "backend", "expected", "|diff|", "budget"], [row],
                  "element")


def _failures(doc: Mapping[str, Any]) -> str:
    items = [_property_failure(p, f, i, len(p["failures"]))
             for p in doc["properties"] if p["status"] == "fail"
             for i, f in enumerate(p["failures"] or [None], 1)]
    items += [_claim_failure(c) for c in doc["claims"] if c["status"] == "fail"]
    cards = [_failure_card(item, open_=i < OPEN_FAILURES) for i, item in enumerate(items)]
    return f"<h2>Failures ({len(cards)})</h2>" + "".join(cards) if cards else ""


def _property_failure(p: Mapping[str, Any], failure: Mapping[str, Any] | None, number: int,
                      count: int) -> _Card:
    """A failure card for one distinct failure of a property test (the test's own message,
    vector and replay when it recorded no separate failures)."""
    f = failure or {"kind": p["failure_kind"], "vector": p["vector"], "replay": p["replay"],
                    "message": p["message"], "element": None}
    title = p["id"] + (f" (failure {number} of {count})" if count > 1 else "")
    return _Card(title, [("replay", f["replay"]), ("test vector", f["vector"])],
                 f["element"],
                 [("backend", p["backend"]), ("dtype", p["dtype"]), ("kind", f["kind"])],
                 f["message"])


def _properties(doc: Mapping[str, Any]) -> str:
    rows = [[_td(p["id"]), _td(p["backend"], "nw"), _td(p["dtype"], "nw"),
             _status(p["status"], p["failure_kind"]),
             _td(p["examples"], "nw"), _td(f"{p['time_seconds']:.3f}", "timing nw"),
             _td(short_note(p) or p["message"], "msg")] for p in doc["properties"]]
    return "<h2>Properties</h2>" + _table(
        ["test", "backend", "dtype", "status", "examples", "time (s)", "note"], rows)


def _claim_failure(c: Mapping[str, Any]) -> _Card:
    """A failure card for a claim: each failed side with its expected and observed value."""
    failed = [s for s in c["backends"] if s["status"] == "fail"]
    parts = [c["statement"]]
    if c["exact_status"] != "pass":
        parts.append(f"exact: expected {c['expected']}\n       observed {c['observed']}")
    parts += [f"on {s['backend']} ({s['failure_kind']}): expected {s['expected']}\n"
              f"       observed {'no value' if s['observed'] is None else s['observed']}"
              + (f"\n       {s['reason']}" if s["reason"] else "") for s in failed]
    meta: list[tuple[str, object]] = [("backend", ", ".join(s["backend"] for s in failed)),
                                      ("source", c["source"])]
    return _Card(f"claim {c['id']}", [], None, meta, "\n".join(parts))


def _claim_side(side: Mapping[str, Any] | None) -> str:
    """A backend's side of a claim: its status, and its value or reason unless it passed."""
    if side is None:
        return _td("—", "nw")
    status = side["status"]
    kind = f" ({side['failure_kind']})" if status == "fail" else ""
    detail = side["reason"] or (side["observed"] if status == "fail" else None)
    text = f"<br>{esc(detail)}" if detail else ""
    return f'<td class="msg"><span class="{esc(status)}">{esc(status + kind)}</span>{text}</td>'


def _claims(doc: Mapping[str, Any]) -> str:
    """One row per claim: exact side, each backend's side, overall status."""
    names = list(dict.fromkeys(s["backend"] for c in doc["claims"] for s in c["backends"]))
    rows = []
    for c in doc["claims"]:
        sides = {s["backend"]: s for s in c["backends"]}
        rows.append([_td(c["id"]), _td(citation(c)),
                     _td(c["statement"]), _td(c["expected"], "msg"), _td(c["observed"], "msg"),
                     _status(c["exact_status"]),
                     *(_claim_side(sides.get(n)) for n in names),
                     _status(c["status"]), _td(c["note"])])
    if not rows:
        return "<h2>Claims</h2><p>No claims were checked.</p>"
    return "<h2>Claims</h2>" + _table(
        ["id", "source", "statement", "expected", "observed (exact)", "exact",
         *names, "status", "note"], rows, names=names)


def _plots(plots: Mapping[str, bytes], doc: Mapping[str, Any]) -> str:
    """Each plot with its caption, the backends it shows, why any series has gaps and
    which backends do not claim the plot's mode (so have no series)."""
    figures = []
    for name, png in plots.items():
        data = base64.b64encode(png).decode("ascii")
        caption = PLOT_CAPTIONS.get(name, name)
        part = (doc.get("plots") or {}).get(name)
        said = _plot_note(name, part, doc["backends"]) if part else ""
        figures.append(f'<figure id="plot-{esc(name)}"><img alt="{esc(caption)}" '
                       f'src="data:image/png;base64,{data}"><figcaption>{esc(caption + said)}'
                       "</figcaption></figure>")
    if not figures:
        return ""
    return f"<h2>Plots</h2><p>{esc(PLOTS_INTRO)}</p>" + "".join(figures)


def _plot_note(name: str, part: Mapping[str, Any], backends: Sequence[Mapping[str, Any]]
               ) -> str:
    """The backends a plot shows, the gaps in their series, and the checked backends that
    do not claim the plot's mode (not asked: no series)."""
    from resverify.reports.plots import PLOT_MODES, plot_ops  # matplotlib: once plots are drawn

    mode = PLOT_MODES.get(name, "vjp")
    unclaimed = [b["name"] for b in backends
                 if mode not in b.get("modes", ["vjp"]) and b["name"] not in part["series"]]
    asked = [f"{b} (asked in {part['dtypes'].get(b, 'float64')})" for b in part["series"]]
    ops = ", ".join(plot_ops().get(name, ()))
    said = f" Series: {', '.join(asked) or 'none'}; ops {ops}." + "".join(
        f" Gaps in {backend}: {reason}." for backend, reason in part["gaps"].items())
    if unclaimed:
        said += f" No series ({mode} not claimed): {', '.join(unclaimed)}."
    return said


def _timings(doc: Mapping[str, Any]) -> str:
    items = ", ".join(f"{esc(k)} {esc(v)}" for k, v in sorted(doc["timings"].items()))
    return f'<p class="timing">timings: {items}</p>'


def page(title: str, body: str) -> str:
    """A self-contained page: the report's style inline, the Content-Security-Policy that
    forbids every script and fetch, ``body`` as given."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
            f"<body>{body}</body></html>\n")


def _law_note(r: Mapping[str, Any]) -> str:
    """A law record's note: its message, the documented finding it fails as (or that the
    finding no longer holds) and its replay command."""
    note = esc(r["message"])
    known = r["known"]
    if r["verdict"] == "expected" and known:
        note += (f"<br>documented finding: {esc(known['reason'])} "
                 f"(<code>{esc(known['doc'])}</code>)")
    if r["verdict"] == "fixed" and known:
        note += (f"<br>passes now, but the recipe documents it as failing "
                 f"(<code>{esc(known['doc'])}</code>): remove the finding from the recipe")
    for what, cmd in blocks_text.replay_lines(r["failure"]):
        note += f"<br>{esc(what)}: <code>{esc(cmd)}</code>"
    return f'<td class="msg">{note}</td>'


def _block(block: Mapping[str, Any], index: int, images: Mapping[str, bytes]) -> str:
    """One block: library, what its recipe declares, a row per law record, its plots."""
    laws = [[_td(r["law"], "nw"), _td(r["dtype"], "nw"), _td(r["mode"], "nw"),
             _status(r["verdict"]),
             _td(blocks_text.examples_count(r["verdict"], r["examples"],
                                            r.get("examples_asked", 0)), "nw"),
             _td(r["time_seconds"], "timing nw"),
             _td(blocks_text.figure_text(r["figures"])), _law_note(r)] for r in block["laws"]]
    figures = "".join(
        f'<figure><img alt="{esc(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(images[name]).decode("ascii")}"><figcaption>'
        f'{esc(blocks_text.PLOT_CAPTIONS[name.rsplit("-", 1)[1].removesuffix(".png")])}'
        "</figcaption></figure>"
        for name in blocks_text.plot_names(block, index) if name in images)
    return (f'<section class="block" id="block-{index}"><h3>{esc(block["name"])}: '
            f'<span class="{_css(block["verdict"])}">{esc(block["verdict"])}</span></h3>'
            f"<p>{esc(blocks_text.library_text(block))}, "
            f'<span class="timing">{esc(block["time_seconds"])} s</span></p>'
            + _table(["declares", ""], [[_td(a), _td(b)]
                                        for a, b in blocks_text.declared_lines(block)])
            + _table(["law", "dtype", "mode", "verdict", "examples", "s", "figures", "note"],
                     laws) + figures + "</section>")


def _blocks(doc: Mapping[str, Any], images: Mapping[str, bytes]) -> str:
    """The blocks section (``resverify blocks check``): the summary, a row per block, the
    libraries skipped, then each block with its plots (``images``, PNG bytes by name)."""
    section = doc.get("blocks")
    if section is None:
        return ""
    rows = [[f'<td><a href="#block-{i}">{esc(b["name"])}</a></td>',
             _td(f"{b['library']} {b['version'] or ''}"), _status(b["verdict"]),
             _td(len(b["laws"]), "nw"), _td(b["time_seconds"], "timing nw")]
            for i, b in enumerate(section["blocks"])]
    skipped = "".join(f"<li>skipped {esc(s['source'])}: {esc(s['reason'])}</li>"
                      for s in section["skipped"])
    return (f'<section id="blocks"><h2>Residual blocks: <span class="{_css(section["verdict"])}">'
            f'{esc(section["verdict"])}</span></h2><p>{esc(blocks_text.counts_text(section))}</p>'
            + _table(["block", "library", "verdict", "laws", "s"], rows)
            + (f"<ul>{skipped}</ul>" if skipped else "")
            + "".join(_block(b, i, images) for i, b in enumerate(section["blocks"]))
            + "</section>")


def _exact_details(exact: Mapping[str, Any]) -> str:
    """Each judgement's details (:func:`resverify.reports.exact.detail_lines`) in a fold."""
    rows = [[_td(b["name"], "nw"), _td(exact_text.dtype_text(j), "nw"), _td(what, "nw"),
             f"<td><code>{esc(said)}</code></td>" if what in ("vector", "replay")
             else _td(said)]
            for b in exact["blocks"] for j in b["judgements"]
            for what, said in exact_text.detail_lines(j)]
    return ("<details><summary>each judgement: patterns, constants, the local judgement, "
            "graph vs eager, seconds, vector and replay</summary>"
            + _table(["layer", "dtype", "", ""], rows) + "</details>") if rows else ""


def _exact(doc: Mapping[str, Any], images: Mapping[str, bytes]) -> str:
    """The exact section (``resverify blocks check --exact``): its summary and claim, the
    table "exact judgement" (a failure's vector beside its row), the plot of the
    distribution of |error| / bound (``images``, PNG bytes by name) and the details."""
    exact = doc.get("exact")
    if exact is None:
        return ""
    rows = [[_td(r[0], "nw"), _td(r[1], "nw"), _status(r[2]), *(_td(v, "nw") for v in r[3:7]),
             _td(r[7], "timing nw"), _td(r[8], "msg")] for r in exact_text.table_rows(exact)]
    figure = (f'<figure><img alt="{exact_text.PLOT}" src="data:image/png;base64,'
              f'{base64.b64encode(images[exact_text.PLOT]).decode("ascii")}"><figcaption>'
              f"{esc(exact_text.CAPTION)}</figcaption></figure>"
              if exact_text.PLOT in images else "")
    return (f'<section id="exact"><h2>Exact judgement: <span class="{_css(exact["verdict"])}">'
            f'{esc(exact["verdict"])}</span></h2><p>{esc(exact_text.counts_text(exact))}</p>'
            + _exact_paths(exact)
            + "<h3>exact judgement</h3><p>median, p99 and max are of |error| / bound over every "
            "element judged (1 is the edge of the budget).</p>"
            + _table(exact_text.HEADERS, rows, "exact") + figure + _exact_details(exact)
            + "</section>")


def _exact_paths(exact: Mapping[str, Any]) -> str:
    """The table "paths" (:func:`resverify.reports.exact.path_table_rows`): a row per layer,
    dtype and path, its verdict a column, the failing rows first and marked (``tr.fail``)."""
    rows = exact_text.path_table_rows(exact)
    if not rows:
        return ""
    body = "".join(
        f'<tr class="path-row {_css(r[3])}" data-path="{esc(r[2])}" data-verdict="{esc(r[3])}">'
        + _td(r[0], "nw") + _td(r[1], "nw") + _td(r[2], "nw") + _status(r[3])
        + "".join(_td(v, "nw") for v in r[4:10]) + _td(r[10], "msg") + _td(r[11], "timing nw")
        + "</tr>" for r in rows)
    head = "".join(f"<th>{esc(h)}</th>" for h in exact_text.PATH_HEADERS)
    return ('<h3 id="exact-paths">paths</h3><p>Each path against the same exact answer, the '
            "failing first; stream ≠ eager: the fraction of stream elements (the output and "
            "the input of each later pre-norm) not bitwise the eager path's.</p>"
            f'<table class="exact-paths"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table>")


def _reach_text(reached: Mapping[str, int]) -> str:
    return ", ".join(f"{tag} {count}" for tag, count in reached.items())


def _coverage(doc: Mapping[str, Any]) -> str:
    """The coverage table: per law, backend and dtype, the examples, what they reached and
    what of the law's floor they did not (``unreached``, marked), in a fold."""
    rows = [[_td(row["property"]), _td(row["mode"]), _td(cell["backend"]), _td(cell["dtype"]),
             _td(cell["examples"]), _td(_reach_text(cell["reached"])),
             _td(", ".join(cell["unreached"]) or "—", "short" if cell["unreached"] else "")]
            for row in doc.get("coverage", ()) for cell in row["cells"]]
    if not rows:
        return ""
    warned = "".join(f"<li>{esc(line)}</li>" for line in heard(doc["properties"]))
    notes = (f"<p>Warnings the backends raised (recorded, never a verdict):</p><ul>{warned}</ul>"
             if warned else "")
    short = sum(1 for r in doc["coverage"] for c in r["cells"] if c["unreached"])
    said = (f"{short} cell(s) left part of their law's floor unreached" if short
            else "every law reached its floor")
    return ('<h2 id="coverage">Coverage</h2><p>What each law\'s examples reached (tags of '
            "resverify.properties.reach, with the examples that reached each) and what of "
            f"the law's floor they did not: {esc(said)}.</p><details><summary>coverage "
            "table</summary>" + _table(["law", "mode", "backend", "dtype", "examples",
                                         "reached", "unreached"], rows, "coverage")
            + "</details>" + notes)


def render_html(doc: Mapping[str, Any], plots: Mapping[str, bytes],
                block_plots: Mapping[str, bytes] | None = None) -> str:
    """The whole page for a report document and its plots (PNG bytes by name), and the
    blocks section's plots (``block_plots``, by file name) when it has one; a blocks-only
    report (:func:`resverify.reports.markdown.blocks_only`) is its header and the section
    (the exact section's plot is among ``block_plots``, :data:`resverify.reports.exact.PLOT`)."""
    blocks = _blocks(doc, block_plots or {}) + _exact(doc, block_plots or {})
    if blocks_only(doc):
        return page("resverify report", _header(doc) + blocks + _timings(doc))
    body = (_header(doc) + _summary(doc) + _failures(doc) + _matrix(doc) + _known_failures(doc)
            + blocks + _backends(doc)
            + _plots(plots, doc) + _properties(doc) + _coverage(doc) + _claims(doc)
            + _timings(doc))
    return page("resverify report", body)


def _machine_row(machine: Mapping[str, Any]) -> list[str]:
    """One machine of a joined report: its label, verdict, what ran it (resverify, Python,
    platform, dependencies), its backends with device and library, and its file."""
    report = machine["report"]
    run, env = report["run"], report["environment"]
    blocks = f", blocks {report['blocks']['verdict']}" if "blocks" in report else ""
    deps = ", ".join(f"{k} {v}" for k, v in sorted(env["dependencies"].items()) if v)
    backends = "\n".join(f"{b['name']} ({b['device']}): {_about(b['about'])}"
                          for b in report["backends"]) or "none (a blocks run)"
    return [f'<th class="machine">{esc(machine["label"])}</th>', _status(machine["status"]),
            _td(f"resverify {report['tool']['version']}, profile {run['profile']}, seed "
                f"{run['seed']}{blocks}" + ("" if report["complete"] else ", incomplete")),
            _td(f"{env['implementation']} {env['python']}"),
            _td(f"{env['platform']} ({env['machine']})"), _td(backends, "msg"), _td(deps),
            _td(machine["file"], "msg")]


def _machines(doc: Mapping[str, Any]) -> str:
    return "<h2>Machines</h2><p>Each run joined, as its own report.json records it; its " \
        "columns in the matrix carry its label.</p>" + _table(
            ["machine", "status", "run", "python", "platform", "backends: device, library and "
             "settings", "dependencies", "report.json"], [_machine_row(m) for m in doc["machines"]])


def render_joined_html(doc: Mapping[str, Any]) -> str:
    """The page of a joined report (:mod:`resverify.reports.join`): the machines, the
    counts, the failures, the conformance matrix with each column's machine above its
    backend, then the backends, properties and claims, each backend named with its
    machine (:func:`resverify.reports.join.flat_view`)."""
    from resverify.reports.join import flat_view

    flat = flat_view(doc)
    warnings = "".join(f'<div class="warn">{esc(w)}</div>' for w in doc["warnings"])
    status = esc(doc["status"])
    body = (f'<h1>resverify joined report <span class="badge {_css(doc["status"])}">'
            f"{status}</span></h1>{warnings}" + _machines(doc) + _summary(flat)
            + _failures(flat) + _matrix(doc) + _backends(flat) + _properties(flat)
            + _claims(flat))
    return page("resverify joined report", body)
