"""The paths of an exact run in the report: ``resverify blocks check --exact --paths ...``
writes each path's judgement under its layer and dtype (report.json's ``paths``, a row of
the table "exact judgement" per path), and a path outside its budget fails the run.

The figures are compared with the :class:`~resverify.blocks.exact_paths.Paths` the same
recipe gives when judged here directly (deterministic for the seed), never with numbers
written into the test.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

import torch

from resverify.blocks import exact_paths
from resverify.blocks.exact_paths import judge_recipe_paths
from resverify.cli.block_selection import select
from resverify.cli.main import main
from resverify.reports.json_report import validate
from tests.blocks.test_exact_paths import _planted
from tests.reports.chromium import browse, console_lines, dom_tags, find_chromium

ENCODER = "torch.TransformerEncoderLayer(post)"
PATHS = ["fastpath", "hf-sdpa"]

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _run(folder: Path, *args: str) -> dict[str, Any]:
    code = main(["blocks", "check", "--exact", ENCODER, *args, "--report-dir", str(folder)])
    return {"code": code, "doc": json.loads((folder / "report.json").read_text("utf-8")),
            "md": (folder / "report.md").read_text("utf-8")}


def _rows(md: str, dtype: str) -> list[list[str]]:
    """The rows of the table "exact judgement" (before the table "paths") in ``dtype``."""
    table = md.split("### paths", 1)[0]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()
            if line.startswith(f"| {ENCODER} | {dtype}")]


def test_each_path_is_a_row_with_the_figures_of_its_judgement(tmp_path: Path) -> None:
    run = _run(tmp_path, "--dtype", "float64", "--paths", ",".join(PATHS))
    validate(run["doc"])
    (judgement,) = run["doc"]["exact"]["blocks"][0]["judgements"]
    expected = judge_recipe_paths(select([ENCODER], False)[0].recipe, PATHS, "float64", 0)
    assert [p["path"] for p in judgement["paths"]] == PATHS, judgement["paths"]
    fast, hf = judgement["paths"]
    want = expected.paths[0]
    assert (fast["verdict"], fast["elements"], fast["gradients"], fast["differs"]) == \
        ("pass", want.elements, False, want.differs), (fast, str(want))
    assert (hf["verdict"], hf["reason"]) == ("unjudged", expected.paths[1].unjudged), hf
    rows = _rows(run["md"], "float64")
    assert [r[1] for r in rows] == ["float64", "float64 · path fastpath",
                                    "float64 · path hf-sdpa"], rows
    assert rows[1][2:4] == ["✅ pass", f"{want.elements} of {want.total}"], rows[1]
    assert rows[1][6] == f"{want.tightness.max:.3g}", (rows[1], str(want))
    assert rows[1][8].startswith("the output only; 1 fused kernel call;"), rows[1]
    assert rows[2][8] == expected.paths[1].unjudged, rows[2]
    assert run["code"] == 0 and run["doc"]["exact"]["verdict"] == "pass", run["doc"]["status"]


def test_a_path_outside_its_budget_fails_the_run_and_its_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = torch.ops.aten._transformer_encoder_layer_fwd.default
    monkeypatch.setitem(exact_paths.RUNS, "fastpath",
                        _planted(exact_paths.RUNS["fastpath"], op, 1 + 2**-20))
    run = _run(tmp_path, "--dtype", "float64", "--paths", "fastpath")
    validate(run["doc"])
    (judgement,) = run["doc"]["exact"]["blocks"][0]["judgements"]
    assert judgement["verdict"] == "pass", "eager is right: its own verdict stands"
    assert judgement["paths"][0]["verdict"] == "fail", judgement["paths"]
    assert run["code"] == 1 and run["doc"]["exact"]["verdict"] == "fail", run["doc"]["status"]
    row = _rows(run["md"], "float64 · path fastpath")[0]
    assert row[2] == "❌ fail" and "elements outside the budget" in row[8], row


def test_an_unknown_path_under_exact_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["blocks", "check", "--exact", ENCODER, "--paths", "fused",
                 "--report-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "unknown path(s) fused" in err[0], (code, err)


@pytest.fixture
def flash_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU flash kernel's output off by 1 + 2^-20 on the sdpa-flash path alone."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    monkeypatch.setitem(exact_paths.RUNS, "sdpa-flash",
                        _planted(exact_paths.RUNS["sdpa-flash"], op, 1 + 2**-20))


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
@pytest.mark.usefixtures("flash_off")
def test_a_failing_path_is_listed_first_and_its_vector_replays_that_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path / "first", "--dtype", "float64", "--paths", "eager,sdpa-math,sdpa-flash")
    validate(run["doc"])
    (judgement,) = run["doc"]["exact"]["blocks"][0]["judgements"]
    math_, flash = judgement["paths"]
    assert (math_["verdict"], flash["verdict"]) == ("pass", "fail"), judgement["paths"]
    assert "vector" not in math_ and flash["replay"] == (
        f"resverify blocks check --exact '{ENCODER}' --dtype float64 --seed 0 "
        "--paths sdpa-flash"), flash
    said = capsys.readouterr().out
    assert f"vector {flash['vector']}; replay the path: {flash['replay']}" in said, said
    assert "2 paths judged (1 fail, 0 not run)" in said.splitlines()[-1], said
    record = json.loads(Path(flash["vector"]).read_text("utf-8"))["vector"]
    assert (record["path"], record["path_replay"]) == ("sdpa-flash", flash["replay"]), record
    assert record["message"] == flash["line"] and "path sdpa-flash" in record["property"], record
    # the table "paths": the failing path first, then eager and the path that passed
    paths = [[c.strip() for c in line.strip("|").split(" | ")] for line in
             run["md"].split("### paths", 1)[1].splitlines() if line.startswith(f"| {ENCODER}")]
    assert [(r[2], r[3]) for r in paths] == [("sdpa-flash", "❌ fail"), ("eager", "✅ pass"),
                                             ("sdpa-math", "✅ pass")], paths
    assert paths[0][10].startswith("output"), paths[0]
    # the replay command judges the block on that path again: the same failure
    replay = [*shlex.split(flash["replay"])[1:], "--report-dir", str(tmp_path / "again")]
    assert main(replay) == 1
    again = json.loads((tmp_path / "again" / "report.json").read_text("utf-8"))
    (redone,) = again["exact"]["blocks"][0]["judgements"][0]["paths"]
    assert (redone["path"], redone["verdict"], redone["misses"]) == \
        ("sdpa-flash", "fail", flash["misses"]), redone


PATHS_PROBE = """<script>
window.addEventListener("load", function () {
  var rows = Array.prototype.map.call(
    document.querySelectorAll("section#exact table.exact-paths tbody tr"), function (tr) {
      return {cells: Array.prototype.map.call(tr.cells, function (c) { return c.textContent; }),
              verdictColor: getComputedStyle(tr.cells[3]).color,
              background: getComputedStyle(tr.cells[0]).backgroundColor,
              top: tr.getBoundingClientRect().top};
    });
  var out = document.createElement("pre");
  out.id = "rv-probe";
  out.textContent = JSON.stringify(rows);
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
@pytest.mark.usefixtures("flash_off")
def test_the_path_rows_render_in_chromium_with_their_verdicts_the_failing_one_first(
        tmp_path: Path) -> None:
    chromium = find_chromium()
    run = _run(tmp_path / "out", "--dtype", "float64", "--paths", "sdpa-math,sdpa-flash,hf-sdpa")
    page = tmp_path / "out" / "report.html"
    done = browse(chromium, page, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0 and console_lines(done.stderr) == [], done.stderr[-2000:]
    assert [t for t, _ in dom_tags(done.stdout) if t == "script"] == [], "a script in the DOM"
    text, removed = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "",
                            page.read_text(encoding="utf-8"))
    assert removed == 1, "the report should carry exactly one CSP meta tag"
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("<head>", "<head>" + PATHS_PROBE, 1), encoding="utf-8")
    done = browse(chromium, probe, tmp_path / "profile-probe", "--dump-dom",
                  "--virtual-time-budget=10000")
    found = re.search(r'<pre id="rv-probe">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, f"probe did not run: {done.stderr[-2000:]}"
    rows = json.loads(html.unescape(found.group(1)))
    (judgement,) = run["doc"]["exact"]["blocks"][0]["judgements"]
    want = {p["path"]: p for p in judgement["paths"]}
    assert [r["cells"][2:4] for r in rows] == [
        ["sdpa-flash", "fail"], ["eager", judgement["verdict"]], ["sdpa-math", "pass"],
        ["hf-sdpa", "unjudged"]], rows
    assert rows[0]["cells"][4] == f"{want['sdpa-flash']['elements']} of " \
        f"{want['sdpa-flash']['total']}", rows[0]
    assert rows[3]["cells"][10] == want["hf-sdpa"]["reason"], rows[3]
    assert [r["top"] for r in rows] == sorted(r["top"] for r in rows), "rows out of order"
    red, green = rows[0]["verdictColor"], rows[2]["verdictColor"]
    assert red == "rgb(207, 34, 46)" and green == "rgb(26, 127, 55)", (red, green)
    marked = {r["cells"][2]: r["background"] for r in rows}
    assert marked["sdpa-flash"] == "rgb(255, 235, 233)", marked
    assert marked["sdpa-math"] != marked["sdpa-flash"], marked
