"""The exact section of the blocks report: ``resverify blocks check --exact`` writes, per
layer and dtype, how tight the budgets are, into report.json (its schema), report.md (the
table "exact judgement") and report.html (the table and the plot of ``|error| / bound``),
through the one writer of every report.

Each figure on a page is compared with the :class:`~resverify.blocks.exact.Judgement` the
same recipe gives when judged here directly (deterministic for the seed), never with a
number written into the test. The planted block fails through a kernel that accumulates
bfloat16 products in bfloat16 (:data:`tests.blocks.planted_kernels.NARROW_MM`), which only
the local judgement sees; the block that is not traced reads ``torch.cumsum``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

import jsonschema

from resverify.blocks.exact import Judgement, judge_recipe
from resverify.blocks.tightness import QUANTILES
from resverify.cli.main import main
from resverify.reports import exact as section_text
from resverify.reports.json_report import SCHEMA_VERSION, strip_timings, validate
from tests.blocks.planted_kernels import NARROW_MM, Kernels
from tests.reports.chromium import browse, console_lines, dom_tags, find_chromium
from tests.reports.exact_recipes import CUMSUM, NORM_MLP, PASSING

RECIPES = "tests.reports.exact_recipes:RECIPES"
Run = dict[str, Any]


def _run(folder: Path, *args: str, kernels: Any = None) -> Run:
    """``resverify blocks check --exact`` into ``folder``: its exit code and its files."""
    argv = ["blocks", "check", "--exact", *args, "--report-dir", str(folder)]
    if kernels is None:
        code = main(argv)
    else:
        with Kernels(kernels):
            code = main(argv)
    return {"code": code, "folder": folder,
            "doc": json.loads((folder / "report.json").read_text(encoding="utf-8")),
            "md": (folder / "report.md").read_text(encoding="utf-8"),
            "html": folder / "report.html"}


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The three recipes judged in their dtypes: one passes, one passes in float32 and
    bfloat16, one is not traced."""
    return _run(tmp_path_factory.mktemp("exact"), RECIPES)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The norm MLP in bfloat16 with its ``addmm`` accumulating in bfloat16."""
    return _run(tmp_path_factory.mktemp("planted"), "tests.reports.exact_recipes:NORM_MLP",
                "--dtype", "bfloat16", kernels=NARROW_MM)


def _entry(doc: dict[str, Any], block: str, dtype: str) -> dict[str, Any]:
    found = [j for b in doc["exact"]["blocks"] if b["name"] == block
             for j in b["judgements"] if j["dtype"] == dtype]
    assert len(found) == 1, f"judgements of {block} {dtype} in report.json: {found}"
    return found[0]


def _row(md: str, block: str, dtype: str) -> list[str]:
    """The cells of the Markdown table's row for ``block`` in ``dtype``."""
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in md.splitlines()
            if line.startswith(f"| {block} | {dtype}")]
    assert len(rows) == 1, f"rows of {block} {dtype} in report.md: {rows}\n{md}"
    return rows[0]


def _figures(judgement: Judgement) -> list[str]:
    """What the row shows of ``judgement``: judged/total, median, p99, max."""
    t = judgement.tightness
    return [f"{judgement.elements} of {judgement.total}", f"{t.median:.3g}", f"{t.p99:.3g}",
            f"{t.max:.3g}"]


# -- report.json ---------------------------------------------------------------------------

def test_a_real_exact_run_writes_a_report_the_schema_accepts(judged: Run) -> None:
    doc = judged["doc"]
    validate(doc)
    assert (doc["schema_version"], doc["run"]["backends"]) == (SCHEMA_VERSION, []), doc["run"]
    assert "blocks" not in doc and doc["exact"]["claim"].startswith("pointwise: these inputs")
    names = [(b["name"], [j["dtype"] for j in b["judgements"]]) for b in doc["exact"]["blocks"]]
    assert names == [(PASSING.name, ["float64", "float32"]),
                     (NORM_MLP.name, ["float32", "bfloat16"]), (CUMSUM.name, [])], names
    assert (doc["exact"]["verdict"], doc["status"], judged["code"]) == \
        ("partly judged", "partly judged", 0), "a block not traced: judged in part, exit 0"


def test_each_entry_is_the_judgement_the_recipe_gives(judged: Run) -> None:
    """The entry's figures are the Judgement's (seconds aside), with its vector and the
    command that replays it, and the vector file holds the request judged."""
    judgement = judge_recipe(NORM_MLP, "bfloat16", 0)
    entry = _entry(judged["doc"], NORM_MLP.name, "bfloat16")
    assert strip_timings({k: v for k, v in entry.items() if k not in ("vector", "replay")}) \
        == strip_timings(judgement.as_doc()), entry
    assert entry["local"]["faithful"] == "bitwise" and entry["accumulate"] == "float32", entry
    assert Path(entry["vector"]).is_file() and \
        entry["replay"] == f"resverify replay {entry['vector']} --backend torch", entry
    assert [q["percent"] for q in entry["tightness"]["quantiles"]] == list(QUANTILES), entry


@pytest.mark.parametrize(("path", "value", "why"), [
    (("exact", "claim"), "these inputs", "a verdict that does not say it is pointwise"),
    (("exact", "blocks", 0, "judgements", 0, "outside"), 3, "a pass with elements outside"),
    (("exact", "blocks", 0, "judgements", 0, "verdict"), "unjudged", "a judgement's verdict "
     "that is no judgement's"),
    (("exact", "blocks", 0, "judgements", 0, "tightness", "max"), -1.0, "a negative ratio"),
    (("exact", "blocks", 2, "not_traced", "ops"), "aten.cumsum.default", "ops not a list"),
])
def test_the_schema_refuses_a_broken_exact_section(judged: Run, path: tuple[Any, ...],
                                                    value: object, why: str) -> None:
    doc = json.loads(json.dumps(judged["doc"]))
    where = doc
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    try:
        validate(doc)
    except jsonschema.ValidationError:
        return
    pytest.fail(f"the schema accepted {why}: {path} = {value!r}")


def test_an_exact_section_is_the_same_whatever_the_clock(judged: Run, tmp_path: Path) -> None:
    """Without its seconds (and with the report folder in its vector paths the same), a
    second run's section is the first's."""
    again = json.dumps(strip_timings(_run(tmp_path, RECIPES)["doc"]["exact"]))
    assert json.loads(again.replace(str(tmp_path), str(judged["folder"]))) == \
        strip_timings(judged["doc"]["exact"]), "the section changed with nothing but the clock"


# -- report.md -----------------------------------------------------------------------------

@pytest.mark.parametrize(("recipe", "dtype", "shown"), [
    (PASSING, "float64", "float64"), (PASSING, "float32", "float32"),
    (NORM_MLP, "bfloat16", "bfloat16 (sums in float32)"),
])
def test_the_markdown_row_carries_the_judgements_figures(judged: Run, recipe: Any, dtype: str,
                                                          shown: str) -> None:
    judgement = judge_recipe(recipe, dtype, 0)
    row = _row(judged["md"], recipe.name, shown)
    assert row[2].endswith(judgement.verdict) and row[3:7] == _figures(judgement), \
        f"row {row}, but the judgement is {judgement}"
    assert "### exact judgement" in judged["md"] and "pointwise: these inputs" in judged["md"]
    entry = _entry(judged["doc"], recipe.name, dtype)
    assert f"  - vector: `{entry['vector']}`" in judged["md"] and \
        f"  - replay: `{entry['replay']}`" in judged["md"], "each request's vector and replay"


def test_a_planted_block_s_row_says_fail_with_the_first_op_and_the_vector(planted: Run
                                                                          ) -> None:
    entry = _entry(planted["doc"], NORM_MLP.name, "bfloat16")
    first = entry["local"]["first"]
    assert planted["code"] == 1 and planted["doc"]["status"] == "fail", planted["md"]
    assert (entry["verdict"], first["node"], first["target"], first["module"]) == \
        ("fail", "addmm", "aten.addmm.default", "block.fc1"), entry
    row = _row(planted["md"], NORM_MLP.name, "bfloat16 (sums in float32)")
    assert row[2] == "❌ fail", row
    assert "first op out of budget: addmm (aten.addmm.default in block.fc1), " \
        f"{first['outside']} of {first['elements']} elements" in row[8], row
    assert row[8].endswith(f"vector {entry['vector']}") and Path(entry["vector"]).is_file(), row


def test_a_block_that_is_not_traced_lists_the_ops_that_stopped_it(judged: Run) -> None:
    block = next(b for b in judged["doc"]["exact"]["blocks"] if b["name"] == CUMSUM.name)
    assert (block["verdict"], block["judgements"]) == ("unjudged", []), block
    assert (block["not_traced"]["ops"], block["not_traced"]["dtype"]) == \
        (["aten.cumsum.default"], "float64"), block
    row = _row(judged["md"], CUMSUM.name, "float64")
    assert row[2] == "⚠️ not traced" and row[3:8] == [""] * 5, row
    assert row[8] == "not traced: the IR lacks aten.cumsum.default (1 node)", row
    assert judged["doc"]["exact"]["counts"]["not traced"] == 1


# -- report.html ---------------------------------------------------------------------------

PROBE = """<script>
window.addEventListener("load", function () {
  var table = document.querySelector("section#exact table.exact");
  var rows = table ? Array.prototype.map.call(table.querySelectorAll("tbody tr"),
    function (tr) { return Array.prototype.map.call(tr.cells, function (c) {
      return c.textContent; }); }) : null;
  var heads = table ? Array.prototype.map.call(table.querySelectorAll("th"),
    function (th) { return th.textContent; }) : null;
  var img = document.querySelector("section#exact img");
  var out = document.createElement("pre");
  out.id = "rv-probe";
  out.textContent = JSON.stringify({heads: heads, rows: rows, width: img ? img.naturalWidth : 0,
    height: img ? img.naturalHeight : 0, visible: table ? table.offsetHeight : 0});
  document.body.appendChild(out);
});
</script>"""


def _probed(run: Run, root: Path) -> dict[str, Any]:
    """What :data:`PROBE` reads of the exact section as Chromium lays it out."""
    text, removed = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "",
                            run["html"].read_text(encoding="utf-8"))
    assert removed == 1, "the report should carry exactly one CSP meta tag"
    probe = root / "probe.html"
    probe.write_text(text.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    done = browse(find_chromium(), probe, root / "profile-probe", "--dump-dom",
                  "--virtual-time-budget=10000")
    found = re.search(r'<pre id="rv-probe">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, f"probe did not run: {done.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


def test_the_html_table_and_plot_render_in_chromium(judged: Run, tmp_path: Path) -> None:
    done = browse(find_chromium(), judged["html"], tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0 and console_lines(done.stderr) == [], done.stderr[-2000:]
    assert [t for t, _ in dom_tags(done.stdout) if t == "script"] == [], "a script in the DOM"
    seen = _probed(judged, tmp_path)
    assert seen["heads"] == list(section_text.HEADERS) and seen["visible"] > 0, seen
    assert [r[:3] for r in seen["rows"]] == [
        [PASSING.name, "float64", "pass"], [PASSING.name, "float32", "pass"],
        [NORM_MLP.name, "float32", "pass"], [NORM_MLP.name, "bfloat16 (sums in float32)", "pass"],
        [CUMSUM.name, "float64", "not traced"]], seen["rows"]
    judgement = judge_recipe(NORM_MLP, "float32", 0)
    assert seen["rows"][2][3:7] == _figures(judgement), (seen["rows"][2], str(judgement))
    assert seen["width"] > 300 and seen["height"] > 100, "the plot did not decode"


def test_a_planted_block_s_html_row_names_the_first_op_and_the_vector(planted: Run,
                                                                       tmp_path: Path) -> None:
    seen = _probed(planted, tmp_path)
    entry = _entry(planted["doc"], NORM_MLP.name, "bfloat16")
    (row,) = seen["rows"]
    assert row[2] == "fail" and "first op out of budget: addmm (aten.addmm.default in " \
        "block.fc1)" in row[8] and row[8].endswith(f"vector {entry['vector']}"), row


# -- the plot --------------------------------------------------------------------------------

def test_the_plot_is_a_png_of_every_judged_layer_and_the_same_bytes_each_time(judged: Run
                                                                               ) -> None:
    drawn = section_text.plots(judged["doc"]["exact"])
    assert list(drawn) == [section_text.PLOT] and drawn[section_text.PLOT][:8] == \
        b"\x89PNG\r\n\x1a\n", list(drawn)
    assert drawn == section_text.plots(judged["doc"]["exact"]), "not the same bytes"
    written = judged["folder"] / "plots" / section_text.PLOT
    assert written.read_bytes() == drawn[section_text.PLOT], "the writer wrote another plot"
    nothing = {**judged["doc"]["exact"], "blocks": [judged["doc"]["exact"]["blocks"][2]]}
    assert section_text.plots(nothing) == {}, "a plot drawn of no judgement"
