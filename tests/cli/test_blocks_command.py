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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import resverify.blocks.catalog as catalog_module
from resverify.blocks.catalog import catalog
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import LawRecord
from resverify.blocks.laws import LAWS
from resverify.blocks.recipe import Recipe, Site
from resverify.cli import blocks as command
from resverify.cli.main import main
from resverify.reports import blocks as report
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
    code = main(["blocks", "check", *argv, "--report-dir", str(tmp_path)])
    return code, json.loads((tmp_path / "blocks.json").read_text(encoding="utf-8"))


def test_listing_names_every_block_its_library_version_and_declarations(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blocks"]) == 0
    out = capsys.readouterr().out
    assert main(["blocks", "list"]) == 0
    assert capsys.readouterr().out == out
    for name, recipe in catalog().items():
        assert f"{name}: input [" in out, name
        for site in recipe.sites:
            assert f"{site.label}: {site.norm}-norm" in out, (name, site.label)
    assert "\n  torch 2." in out
    for words in ("dtypes float64 float32 bfloat16 float16", "modes eval train",
                  "zero linear2.weight, linear2.bias", "the stream in the dtype checked",
                  "laws decomposition zero_branch gradient_skip no_aliasing stream_dtype"):
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
    assert "laws decomposition zero_branch affine_in_gamma drop_path" in out


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
    planned = list(command.plan(catalog()[PRE], ["float32"]))
    assert code == 0, out
    assert len(out) == len(planned) + 1, out
    for line, (law, dtype, mode) in zip(out, planned, strict=False):
        words = line.split()
        assert words[:5] == [PRE, law, dtype, mode, "pass"], line
        assert words[6] == "examples" and int(words[5]) >= 1 and words[-1] == "s", line
    assert out[-1].startswith(f"1 block, {len(planned)} law records: {len(planned)} pass")
    report.validate(doc)
    block = doc["blocks"][0]
    assert (block["name"], block["library"], block["verdict"]) == (PRE, "torch", "pass")
    assert block["version"].startswith("2.")
    assert [(r["law"], r["dtype"], r["mode"]) for r in block["laws"]] == planned
    assert {"swamped[self-attention]", "headroom_log2"} <= set(block["laws"][-1]["figures"])
    assert [r["from_law"] for r in block["probes"]["zero_branch"]] == [0.0, 0.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "block0-swamped.png", "block0-zero.png", "blocks.html", "blocks.json", "blocks.md"]


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
    assert sorted({r["gamma"] for r in gammas}) == sorted(command.GAMMAS)
    assert not list(tmp_path.glob("*.png"))


def test_a_failing_block_exits_1_with_its_failure_vector_and_replay_in_the_report(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS["gamma_ignores_init"]
    use_catalog(monkeypatch, [bug.recipe])
    code, doc = check(tmp_path, bug.recipe.name, *FAST)
    assert code == 1
    report.validate(doc)
    failed = [r for r in doc["blocks"][0]["laws"] if r["verdict"] == "fail"]
    assert [r["law"] for r in failed] == [bug.meant]
    failure = failed[0]["failure"]
    assert "ls1.gamma as constructed" in failure["message"] and failure["kind"] == "law"
    vector = Path(failure["vector"])
    assert vector.is_file() and vector.parent == tmp_path / "vectors"
    assert json.loads(vector.read_text(encoding="utf-8"))["vector"]["message"] == \
        failure["message"]
    assert failure["replay"] == f"resverify replay {vector} --backend numpy"
    assert (doc["verdict"], doc["blocks"][0]["verdict"]) == ("fail", "fail")
    out = capsys.readouterr().out
    assert f"{bug.recipe.name}  affine_in_gamma float32  eval  fail" in out
    assert "1 fail" in out.splitlines()[-1]


def test_each_failing_record_keeps_its_own_vector(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bug = BUGS["in_place_input"]  # fails no_aliasing in eval and in train, on one request
    use_catalog(monkeypatch, [bug.recipe])
    code, doc = check(tmp_path, bug.recipe.name, *FAST, "--no-plots")
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
        began.append(recipe.name)
        if len(began) > 1:
            raise KeyboardInterrupt  # Ctrl-C while the second block is checked
        return done

    monkeypatch.setattr(command, "check_one", check_one)
    code, doc = check(tmp_path, "--all", *FAST)
    assert code == 1
    report.validate(doc)
    assert (doc["interrupted"], doc["verdict"]) == ("SIGINT", "unjudged")
    assert [b["name"] for b in doc["blocks"]] == [PRE]
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "interrupted (SIGINT) after 1 block, 1 law records: 1 pass")
    assert "Interrupted (SIGINT)" in (tmp_path / "blocks.md").read_text(encoding="utf-8")


def _judged(doc: Mapping[str, Any]) -> list[Any]:
    """Everything of a report but the seconds."""
    return [(b["verdict"], [{k: v for k, v in r.items() if k != "time_seconds"} for r in b["laws"]],
             b["probes"]) for b in doc["blocks"]]


def test_no_verdict_depends_on_the_machines_speed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = [PRE, "--profile", "dev", "--dtype", "float64", "--no-plots"]
    code, fast = check(tmp_path / "fast", *argv)
    clock = iter(range(0, 10**9, 1000))  # every reading 1000 s after the last
    slow_clock: Callable[[], float] = lambda: float(next(clock))  # noqa: E731
    monkeypatch.setattr(command.time, "perf_counter", slow_clock)
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
