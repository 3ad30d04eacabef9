"""``resverify blocks``: the listing, a check's lines, exit codes and report, usage errors.

Why the ``dev`` profile and one dtype: every law judges the same drawn examples whatever
their count, so five examples a law exercise each law once per dtype and mode; a planted bug
breaks its law on the first example. The planted blocks of :mod:`tests.blocks.broken_blocks`
(the LayerScale and drop-path encoder, the bugs) stand in for the catalog where a test needs
every law to apply or one to fail: the catalog is replaced for the test, not extended.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

import resverify.blocks.catalog as catalog_module
from resverify.blocks.catalog import catalog
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import LawRecord
from resverify.blocks.laws import LAWS
from resverify.blocks.laws_gamma import GAMMAS
from resverify.blocks.recipe import Finding, Recipe, Site
from resverify.blocks.runs import steps
from resverify.cli import blocks as command
from resverify.cli.main import main
from resverify.reports import blocks as report
from resverify.reports.json_report import validate
from tests.blocks.broken_blocks import BUGS, CORRECT

PRE = "torch.TransformerEncoderLayer(pre)"
FAST = ["--profile", "dev", "--dtype", "float32"]


def use_catalog(monkeypatch: pytest.MonkeyPatch, recipes: list[Recipe],
                skipped: Mapping[str, str] | None = None) -> None:
    """The command sees ``recipes`` (and ``skipped``) as the whole catalog."""
    found = {r.name: r for r in recipes}
    monkeypatch.setattr(catalog_module, "catalog", lambda: found)
    monkeypatch.setattr(catalog_module, "skipped", lambda: dict(skipped or {}))


def check(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    """The exit code and the blocks section of the report the command wrote, once that
    report is shown to follow the main report's schema."""
    code = main(["blocks", "check", *argv, "--report-dir", str(tmp_path)])
    whole = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    validate(whole)
    assert whole["status"] == ("pass" if code == 0 else whole["status"]), whole["status"]
    section: dict[str, Any] = whole["blocks"]
    return code, section


def test_listing_names_every_block_its_library_version_and_declarations(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blocks"]) == 0
    out = capsys.readouterr().out
    assert main(["blocks", "list"]) == 0
    assert capsys.readouterr().out == out
    for name, recipe in catalog().items():
        assert f"{name}: input [" in out, name
        for site in recipe.sites:
            placed = "no norm" if site.norm == "none" else f"{site.norm}-norm"
            assert f"{site.label}: {placed}" in out, (name, site.label)
    assert "\n  torch 2." in out
    for words in ("dtypes float64 float32 bfloat16 float16", "modes eval train",
                  "zero linear2.weight, linear2.bias", "the stream in the dtype checked",
                  "laws stream_dtype no_aliasing decomposition gradient_skip zero_branch"):
        assert words in out, words


def test_listing_says_why_a_library_is_skipped_and_what_a_scaled_block_declares(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    use_catalog(monkeypatch, [CORRECT["scaled"], CORRECT["mixed"]],
                {"timm": "ModuleNotFoundError: No module named 'timm'"})
    assert main(["blocks"]) == 0
    out = capsys.readouterr().out
    assert "timm: skipped (timm missing: ModuleNotFoundError: No module named 'timm')" in out
    assert "LayerScale ls1.gamma = 0.01" in out and "drop path drop_path1" in out
    assert "stream float32" in out
    assert "laws stream_dtype no_aliasing decomposition gradient_skip zero_branch " \
        "affine_in_gamma drop_path" in out


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_an_unknown_name_is_one_line_naming_the_close_ones(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["blocks", "check", "torch.TransformerEncoderLayer(pr)",
                 "--report-dir", str(tmp_path)]) == 2
    line = one_line_error(capsys)
    assert line.startswith("resverify: error: no block 'torch.TransformerEncoderLayer(pr)'")
    assert f"did you mean {PRE!r}" in line and "`resverify blocks` lists" in line
    assert not list(tmp_path.iterdir())  # nothing ran, nothing written


@pytest.mark.parametrize(("argv", "said"), [
    ([], "give block names or --all"),
    ([PRE, "--all"], "give block names or --all"),
    ([PRE, "--dtype", "float8"], "unknown dtype 'float8'"),
    ([PRE, "--profile", "fast"], "unknown Hypothesis profile 'fast'"),
    ([PRE, "--law", "identity"], "unknown law 'identity'"),
])
def test_a_bad_request_is_one_line_and_exit_2(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["blocks", "check", *argv, "--report-dir", str(tmp_path)]) == 2
    assert said in one_line_error(capsys)


def test_a_recipe_mistake_is_the_recipes_own_line_before_anything_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    good = encoder(True)
    bad = dataclasses.replace(good, name="Misnamed", sites=(
        good.sites[0], dataclasses.replace(good.sites[1], zero=("linear3.weight",))))
    use_catalog(monkeypatch, [good, bad])
    assert main(["blocks", "check", PRE, "Misnamed", "--report-dir", str(tmp_path)]) == 2
    line = one_line_error(capsys)
    assert "recipe 'Misnamed': site 1 names parameter 'linear3.weight', which the module " \
           "lacks" in line
    assert capsys.readouterr().out == ""  # no law ran for the good block either


def test_a_block_that_claims_none_of_the_dtypes_asked_is_said_and_not_a_pass(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    wide = dataclasses.replace(encoder(True), name="Wide", dtypes=("float64",))
    use_catalog(monkeypatch, [wide])
    code, doc = check(tmp_path, "Wide", *FAST)
    assert code == 1 and doc["blocks"] == [] and doc["verdict"] == "unjudged"
    assert "Wide: claims none of the dtypes ['float32']; not checked" in capsys.readouterr().out


def test_checking_a_torch_block_prints_a_line_per_law_and_passes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, doc = check(tmp_path, PRE, *FAST)
    out = capsys.readouterr().out.splitlines()
    planned = list(steps(catalog()[PRE], ["float32"]))
    assert code == 0, out
    assert len(out) == len(planned) + 1, out
    for line, (law, dtype, mode) in zip(out, planned, strict=False):
        words = line.split()
        assert words[:5] == [PRE, law, dtype, mode, "pass"], line
        assert words[6] == "examples" and int(words[5]) >= 1 and words[-1] == "s", line
    assert out[-1].startswith(f"1 block, {len(planned)} law records: {len(planned)} pass")
    block = doc["blocks"][0]
    assert (block["name"], block["library"], block["verdict"]) == (PRE, "torch", "pass")
    assert block["version"].startswith("2.")
    assert [(r["law"], r["dtype"], r["mode"]) for r in block["laws"]] == planned
    (stream,) = [r for r in block["laws"] if r["law"] == "stream_dtype"]
    assert {"swamped[self-attention]", "headroom_log2"} <= set(stream["figures"])
    assert [r["from_law"] for r in block["probes"]["zero_branch"]] == [0.0, 0.0]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "plots", "plots/block0-swamped.png", "plots/block0-zero.png", "report.html",
        "report.json", "report.md"]


def test_every_law_is_judged_on_a_block_with_layerscale_and_drop_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scaled = CORRECT["scaled"]
    use_catalog(monkeypatch, [scaled])
    code, doc = check(tmp_path, scaled.name, *FAST, "--no-plots")
    laws = doc["blocks"][0]["laws"]
    assert code == 0, [r["message"] for r in laws if r["verdict"] != "pass"]
    assert {r["law"] for r in laws} == {n for n, law in LAWS.items() if not law.needs_paths}
    assert all(r["verdict"] == "pass" and r["examples"] >= 1 for r in laws)
    gammas = doc["blocks"][0]["probes"]["layerscale"]
    assert sorted({r["gamma"] for r in gammas}) == sorted(GAMMAS)
    assert not list(tmp_path.rglob("*.png"))


def test_a_failing_block_exits_1_with_its_failure_and_replay_in_the_report(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS["gamma_ignores_init"]
    use_catalog(monkeypatch, [bug.recipe])
    code, doc = check(tmp_path, bug.recipe.name, *FAST)
    assert code == 1
    failed = [r for r in doc["blocks"][0]["laws"] if r["verdict"] == "fail"]
    assert [r["law"] for r in failed] == [bug.meant]
    failure = failed[0]["failure"]
    assert "ls1.gamma as constructed" in failure["message"] and failure["kind"] == "law"
    assert failure["vector"] is None, failure  # γ as constructed is no merge
    assert failure["replay"].startswith(f"resverify blocks replay {bug.recipe.name} --law "
                                        f"{bug.meant} --dtype float32 --mode eval --example "
                                        "batch="), failure["replay"]
    assert (doc["verdict"], doc["blocks"][0]["verdict"]) == ("fail", "fail")
    out = capsys.readouterr().out
    assert f"{bug.recipe.name}  affine_in_gamma float32  eval  fail" in out
    assert "1 fail" in out.splitlines()[-1]


def test_each_failing_record_keeps_its_own_vector(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bug = BUGS["normalized_skip"]  # fails decomposition in eval and in train, at the merge
    use_catalog(monkeypatch, [bug.recipe])
    code, doc = check(tmp_path, bug.recipe.name, *FAST, "--no-plots", "--law", bug.meant)
    failed = [r for r in doc["blocks"][0]["laws"] if r["verdict"] == "fail"]
    assert code == 1 and [(r["law"], r["mode"]) for r in failed] == [
        (bug.meant, "eval"), (bug.meant, "train")]
    for r in failed:
        saved = json.loads(Path(r["failure"]["vector"]).read_text(encoding="utf-8"))
        assert saved["vector"]["message"] == r["message"], r["failure"]["vector"]


def test_an_interrupted_check_writes_the_report_of_the_blocks_that_finished(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    use_catalog(monkeypatch, [encoder(True), encoder(False)])
    done = report.BlockRun(encoder(True), "torch_nn", "torch", "2.13.0",
                           [LawRecord(PRE, "decomposition", "float32", "eval", "pass", 5)], [0.5])
    began: list[str] = []

    def check_one(recipe: Recipe, *args: object, **kwargs: object) -> report.BlockRun:
        assert isinstance(recipe, Recipe), recipe
        began.append(recipe.name)
        if len(began) > 1:
            raise KeyboardInterrupt  # Ctrl-C while the second block is checked
        return done

    monkeypatch.setattr(command, "check_one", check_one)
    code, doc = check(tmp_path, "--all", *FAST)
    assert code == 1
    assert (doc["interrupted"], doc["verdict"]) == ("SIGINT", "partly judged")
    assert [b["name"] for b in doc["blocks"]] == [PRE]
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "interrupted (SIGINT) after 1 block, 1 law records: 1 pass")
    assert "Interrupted (SIGINT)" in (tmp_path / "report.md").read_text(encoding="utf-8")
    whole = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert (whole["complete"], whole["status"]) == (False, "incomplete")


def _judged(doc: Mapping[str, Any]) -> list[Any]:
    """Everything of a report but the seconds."""
    return [(b["verdict"], [{k: v for k, v in r.items() if k != "time_seconds"} for r in b["laws"]],
             b["probes"]) for b in doc["blocks"]]


def test_no_verdict_depends_on_the_machines_speed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from resverify.blocks import check as driver

    argv = [PRE, "--profile", "dev", "--dtype", "float64", "--no-plots"]
    code, fast = check(tmp_path / "fast", *argv)
    clock = iter(range(0, 10**9, 1000))  # every reading 1000 s after the last
    slow_clock: Callable[[], float] = lambda: float(next(clock))  # noqa: E731
    monkeypatch.setattr(driver.time, "perf_counter", slow_clock)
    slow_code, slow = check(tmp_path / "slow", *argv)
    assert (code, slow_code) == (0, 0)
    assert _judged(slow) == _judged(fast)
    assert min(r["time_seconds"] for r in slow["blocks"][0]["laws"]) >= 1000


def test_the_command_is_registered_and_documented() -> None:
    from resverify.cli.main import COMMANDS

    assert "blocks" in COMMANDS
    text = (Path(__file__).parents[2] / "docs" / "commands.md").read_text(encoding="utf-8")
    assert "## `resverify blocks`" in text


def test_a_site_without_a_norm_lists_as_no_norm() -> None:
    site = Site("ff", ("linear2",), ("linear2.weight",), norm="none")
    line = report.site_text(report.declares(dataclasses.replace(
        encoder(True), sites=(site,)))["sites"][0])
    assert line.startswith("no norm; no γ; no drop path; shortcut identity")


NOTED = Finding("the block writes into its input", "docs/findings/blocks-notes.md#a-note")


def test_a_documented_failure_is_expected_and_the_command_exits_0(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS["in_place_input"]  # fails no_aliasing only, in eval and in train
    noted = dataclasses.replace(bug.recipe, findings={bug.meant: NOTED})
    use_catalog(monkeypatch, [noted])
    code, doc = check(tmp_path, noted.name, *FAST, "--no-plots")
    expected = [r for r in doc["blocks"][0]["laws"] if r["verdict"] == "expected"]
    assert code == 0, [r for r in doc["blocks"][0]["laws"] if r["verdict"] != "pass"]
    assert [(r["law"], r["mode"]) for r in expected] == [(bug.meant, "eval"),
                                                        (bug.meant, "train")]
    assert all(r["known"]["doc"] == NOTED.doc and r["failure"]["replay"] for r in expected)
    assert (doc["blocks"][0]["verdict"], doc["verdict"]) == ("expected", "expected")
    out = capsys.readouterr().out.splitlines()
    assert f"{noted.name}  no_aliasing     float32  eval  expected" in "\n".join(out)
    assert f"documented finding, {NOTED.doc}" in "\n".join(out)
    assert "2 expected, 0 fixed; pass;" in out[-1], out[-1]
    unnoted = dataclasses.replace(noted, findings={})  # the same block, nothing documented
    use_catalog(monkeypatch, [unnoted])
    assert check(tmp_path / "plain", unnoted.name, *FAST, "--no-plots")[0] == 1


def test_a_documented_failure_that_passes_now_is_fixed_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    noted = dataclasses.replace(encoder(True), name="Noted", findings={"zero_branch": NOTED})
    use_catalog(monkeypatch, [noted])
    code, doc = check(tmp_path, "Noted", *FAST, "--no-plots")
    fixed = [r for r in doc["blocks"][0]["laws"] if r["verdict"] == "fixed"]
    assert code == 1 and [r["law"] for r in fixed] == ["zero_branch", "zero_branch"]
    assert (doc["blocks"][0]["verdict"], doc["verdict"]) == ("fail", "fail")
    out = capsys.readouterr().out
    assert "Noted  zero_branch     float32  eval  fixed" in out
    assert f"the recipe documents it as failing ({NOTED.doc}); remove the finding" in out
    assert "0 expected, 2 fixed; fail;" in out.splitlines()[-1]


def _anchors(doc: Path) -> set[str]:
    """The heading anchors of a Markdown file, as GitHub spells them."""
    heads = re.findall(r"^#+ (.*)$", doc.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-")
            for h in heads}


def test_every_documented_finding_of_the_catalog_names_an_applicable_law_and_its_heading(
        ) -> None:
    hf = pytest.importorskip("resverify.blocks.catalog.hf",
                             reason="transformers is not installed (make blocks)")
    from resverify.blocks.laws import applicable

    root = Path(__file__).parents[2]
    found = [(r, law, f) for r in hf.RECIPES for law, f in r.findings.items()]
    assert {(r.name, law) for r, law, _ in found} == {
        ("hf.T5Block(wo float32)", "zero_branch"), ("hf.T5Block(wo float32)", "stream_dtype")}
    for recipe, law, finding in found:
        assert law in applicable(recipe), f"{recipe.name}: finding for {law!r}, which does " \
            f"not apply; expected one of {applicable(recipe)}"
        file, anchor = finding.doc.split("#")
        assert anchor in _anchors(root / file), f"{finding.doc}: no such heading in {file}"
    assert "5-t5-as-from_pretrained-loads-it-in-half-precision-carries-a-float32-stream" in \
        _anchors(root / "docs/findings/blocks-notes.md")
    assert "a-note" not in _anchors(root / "docs/findings/blocks-notes.md")  # it can refuse


def test_the_json_md_and_html_go_where_asked_and_the_rest_in_the_report_folder(
        tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "dir", tmp_path / "else"
    code = main(["blocks", "check", PRE, *FAST, "--report-dir", str(folder),
                 "--json", str(elsewhere / "r.json"), "--md", str(elsewhere / "r.md"),
                 "--html", str(elsewhere / "deep" / "r.html")])
    assert code == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "dir/plots/block0-swamped.png", "dir/plots/block0-zero.png", "else/deep/r.html",
        "else/r.json", "else/r.md"]
    whole = json.loads((elsewhere / "r.json").read_text(encoding="utf-8"))
    validate(whole)
    assert whole["status"] == "pass" and whole["blocks"]["blocks"][0]["name"] == PRE


@pytest.mark.parametrize(("where", "said"), [
    ("--json", "cannot write the --json report"),
    ("--md", "cannot write the --md report"),
    ("--html", "cannot write the --html report"),
    ("--report-dir", "cannot write to report folder"),
])
def test_a_report_path_that_cannot_be_written_is_one_line_before_anything_runs(
        where: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("taken\n")
    bad = tmp_path / "a-file" / "report.out" if where != "--report-dir" else tmp_path / "a-file"
    argv = ["--report-dir", str(tmp_path / "out")] if where != "--report-dir" else []
    assert main(["blocks", "check", PRE, *FAST, *argv, where, str(bad)]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"resverify: error: {said} {str(bad)!r}: "), line
    assert capsys.readouterr().out == ""  # no law ran
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.json"))


def test_a_folder_given_as_the_json_path_is_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["blocks", "check", PRE, *FAST, "--report-dir", str(tmp_path),
                 "--json", str(tmp_path)]) == 2
    assert "cannot write the --json report" in one_line_error(capsys)


def test_paths_option_adds_the_paths_law_and_its_planted_bug_fails_only_that(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """``--paths fastpath`` judges the paths law as well (no option: not planned); the planted
    fused-kernel bug passes every eager law and fails the paths law alone."""
    bug = BUGS["fused_norms_repeated"]
    use_catalog(monkeypatch, [bug.recipe])
    plain = {law for law, _, _ in steps(bug.recipe, ["float32"])}
    assert "paths" not in plain, f"planned without --paths: {sorted(plain)}"
    code, doc = check(tmp_path, bug.recipe.name, *FAST, "--paths", "fastpath")
    verdicts = {(r["law"], r["mode"]): r["verdict"] for r in doc["blocks"][0]["laws"]}
    failed = sorted(law for (law, _), v in verdicts.items() if v == "fail")
    assert (code, failed) == (1, ["paths"]), f"exit {code}, failed {failed}: {verdicts}"
    assert f"{bug.recipe.name}  paths           float32  eval  fail" in capsys.readouterr().out


def test_passes_with_an_unjudged_law_are_partly_judged_not_unjudged(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """``--paths fastpath`` on a block with no fused kernel: every eager law passes and the
    paths law judges nothing. The run is ``partly judged`` (exit 1: no verdict without
    evidence), not ``unjudged``, on the command's last line and in every page."""
    plain = CORRECT["projected_relu"]
    use_catalog(monkeypatch, [plain])
    call = f"resverify blocks check {plain.name} {' '.join(FAST)} --paths fastpath"
    code, doc = check(tmp_path, plain.name, *FAST, "--paths", "fastpath", "--no-plots")
    last = capsys.readouterr().out.splitlines()[-1]
    counts = doc["counts"]
    assert (code, counts["unjudged"], counts["fail"]) == (1, 1, 0), f"{call}: {last}"
    assert counts["pass"] > 0 and "; partly judged; report:" in last, f"{call}: {last}"
    assert (doc["verdict"], doc["blocks"][0]["verdict"]) == ("partly judged", "partly judged")
    whole = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert whole["status"] == "partly judged", f"{call}: status {whole['status']}"
    for page, headline in (("report.md", "# resverify: PARTLY JUDGED"),
                           ("report.html", '<span class="badge partly-judged">partly judged')):
        text = (tmp_path / page).read_text(encoding="utf-8")
        assert headline in text, f"{call}: {page}'s headline is not 'partly judged'"
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert '<span class="partly-judged">partly judged</span>' in page, \
        f"{call}: the block's verdict is not one CSS class (partly-judged) in report.html"


def test_an_unknown_path_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["blocks", "check", PRE, "--paths", "fastpath,warp", "--report-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "unknown path 'warp' in --paths; use some of ['compile', 'fastpath']" in \
        one_line_error(capsys)
    assert not (tmp_path / "report.json").exists(), "a refused request ran the check"


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_a_jax_block_is_checked_by_its_own_laws_and_its_planted_bug_fails_them(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """A Haiku block goes through its adapter (the catalog's Haiku blocks
    passing every law is tests/blocks/test_catalog_haiku.py's): the laws it judges, and the
    dropped-skip bug fails exactly its declared laws."""
    pytest.importorskip("haiku")
    from tests.blocks.broken_haiku import BUGS as JAX_BUGS
    from tests.blocks.test_catalog_haiku import JUDGED, _buggy

    cls, base, dtype, laws = JAX_BUGS["dropped skip"]
    buggy = _buggy(base, cls, base)
    use_catalog(monkeypatch, [buggy])
    code, doc = check(tmp_path, buggy.name, "--profile", "dev", "--dtype", dtype)
    (block,) = doc["blocks"]
    assert {r["law"] for r in block["laws"]} == set(JUDGED), block["laws"]
    failed = {r["law"] for r in block["laws"] if r["verdict"] == "fail"}
    assert (code, failed) == (1, set(laws)), f"exit {code}, failed {failed}, expected {laws}"
    assert f"{buggy.name}  stream_dtype    {dtype}  eval  pass" in capsys.readouterr().out


def test_a_users_own_recipe_named_module_colon_attr_is_checked(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The docs' example recipe, by reference: its block is checked like a catalog one."""
    code, doc = check(tmp_path, "examples.custom_block:RECIPE", *FAST)
    (block,) = doc["blocks"]
    assert (code, block["name"], block["verdict"]) == (0, "example.PreNormMLPBlock", "pass"), \
        (code, block["name"], block["verdict"])
    assert "example.PreNormMLPBlock  decomposition   float32  eval  pass" in \
        capsys.readouterr().out


def test_a_mapping_of_recipes_is_checked_too(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``module:attr`` naming a mapping of recipes (name -> Recipe) checks each of them."""
    from examples import custom_block

    monkeypatch.setattr(custom_block, "ALL", {"one": custom_block.RECIPE}, raising=False)
    code, doc = check(tmp_path, "examples.custom_block:ALL", *FAST, "--no-plots")
    assert (code, [b["name"] for b in doc["blocks"]]) == (0, ["example.PreNormMLPBlock"])


@pytest.mark.parametrize(("ref", "said"), [
    ("examples.custom_block:main", "examples.custom_block:main is a function, not a "
     "resverify.blocks.Recipe (or a list or mapping of them)"),
    ("examples.custom_block:NOPE", "module 'examples.custom_block' has no attribute 'NOPE'"),
    # the module imports the class Recipe too: a misspelt recipe is offered the recipe
    ("examples.custom_block:RECIPES", "module 'examples.custom_block' has no attribute "
     "'RECIPES' (did you mean 'RECIPE'?)"),
    ("examples.custom_block:recipe", "(did you mean 'RECIPE'?)"),
    ("no_such_module_here:RECIPE", "cannot import block recipe module 'no_such_module_here'"),
    (":RECIPE", "block recipe ':RECIPE' names no module; write module:attr, e.g. "
     "examples.custom_block:RECIPE"),
])
def test_a_bad_recipe_reference_is_one_line_and_exit_2(
        ref: str, said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["blocks", "check", ref, "--report-dir", str(tmp_path)]) == 2
    assert said in one_line_error(capsys)
    assert not list(tmp_path.iterdir()), "a refused request wrote something"


def test_commands_md_documents_every_option_of_blocks_check() -> None:
    """docs/commands.md's ``resverify blocks`` section names every option ``blocks check``
    takes and the ``module:RECIPE`` form (README and blocks.md show both; it once had
    neither ``--paths`` nor ``module:RECIPE``)."""
    import argparse

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "commands.md").read_text(encoding="utf-8")
    section = text.split("## `resverify blocks`", 1)[1].split("\n## ", 1)[0]
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    (actions,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = [o for a in actions.choices["check"]._actions for o in a.option_strings
               if o.startswith("--") and o != "--help"]
    missing = [o for o in options if f"`{o}" not in section]
    assert not missing, f"docs/commands.md's resverify blocks section lacks {missing}"
    assert "module:RECIPE" in section, "docs/commands.md's resverify blocks lacks module:RECIPE"


def test_the_command_never_asks_which_library_a_block_comes_from() -> None:
    """Every recipe names its adapter (``Recipe.adapter``), so the command holds no test of a
    recipe's type or library (before: five ``is_jax`` checks picked torch or JAX)."""
    import inspect

    from resverify.cli import blocks_replay

    for module in (command, blocks_replay):
        source = inspect.getsource(module)
        asked = [word for word in ("is_jax", "JaxRecipe", "jax_laws", "isinstance(recipe")
                 if word in source]
        assert not asked, f"{module.__name__} names {asked}: it asks which library a block is"
