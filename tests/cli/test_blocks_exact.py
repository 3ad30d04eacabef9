"""``resverify blocks check --exact``: a block that traces is judged per dtype, one that does
not is one line naming the ATen ops it lacks, and only an element outside its budget fails
the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

from resverify.cli.main import main

RECIPES = "tests.blocks.exact_modules:RECIPES"


def test_a_block_that_traces_is_judged_in_each_dtype_and_passes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["blocks", "check", "--exact", RECIPES, "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("ResidualMLP  ")]
    assert [line.split()[1] for line in lines] == ["float64:", "float32:"], out
    assert all(" pass, " in line and "pointwise" in line for line in lines), out
    assert "ResidualMLP(backward off)  float64: FAIL" in out, out
    assert code == 1


def test_each_judged_request_is_a_vector_an_engine_replays(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every request judged is saved (the traced program, the module's parameters, the
    drawn input and cotangent); a failing block's line names its vector and the replay
    command, and the vector replayed on the NumPy reference passes: the failure is the
    module's, not the traced program's."""
    main(["blocks", "check", "--exact", RECIPES, "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    saved = sorted((tmp_path / "vectors" / "exact").glob("*.json"))
    judged = [line for line in out.splitlines() if "pointwise: these inputs" in line]
    assert len(saved) == len(judged) > 0, (saved, out)
    line = next(x for x in out.splitlines() if x.startswith("  vector "))
    path = line.split()[1].rstrip(";")
    assert line.endswith(f"; replay it: resverify replay {path} --backend numpy"), line
    record = json.loads(Path(path).read_text())["vector"]
    assert record["backend"] == "ResidualMLP(backward off)" and \
        record["property"] == "exact[float64]" and " FAIL " in record["message"], record
    assert main(["replay", path, "--backend", "numpy", "--runs", "1"]) == 0, \
        capsys.readouterr().out


def test_an_interrupted_run_keeps_the_dtypes_judged_before_the_interrupt_and_exits_1(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a block's second dtype: its first dtype's judgement is in the report,
    which says it was interrupted (before, the whole block was lost)."""
    from resverify.blocks import exact

    judged = exact.judge_recipe

    def stopped(recipe: object, dtype: str, *args: object) -> object:
        if dtype == "float32":
            raise KeyboardInterrupt
        return judged(recipe, dtype, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "judge_recipe", stopped)
    code = main(["blocks", "check", "--exact", RECIPES, "--report-dir", str(tmp_path),
                 "--no-plots"])
    out = capsys.readouterr().out
    assert code == 1, out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["exact"]["interrupted"] is not None and doc["status"] == "incomplete", doc
    blocks = doc["exact"]["blocks"]
    assert [(b["name"], [j["dtype"] for j in b["judgements"]]) for b in blocks] == \
        [("ResidualMLP", ["float64"])], blocks


def test_a_dtype_the_ir_cannot_express_is_listed_and_its_other_dtypes_are_still_judged(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    name = "ResidualMLP(tanh(h + 0.1))"
    code = main(["blocks", "check", "--exact", "tests.blocks.exact_modules:SHIFTED",
                 "--report-dir", str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert f"{name} bfloat16: not traced, the IR lacks aten.add.Tensor (1 nodes)" in out, out
    assert f"{name}  float32: pass, " in out, out
    doc = json.loads((tmp_path / "report.json").read_text())
    block = doc["exact"]["blocks"][0]
    assert [j["dtype"] for j in block["judgements"]] == ["float32"], block["judgements"]
    assert block["not_traced"]["dtype"] == "bfloat16", block["not_traced"]
    assert code == 0


def test_bert_layer_is_judged_whole_in_float64_and_bfloat16(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Hugging Face's BertLayer traces whole (matmul, softmax, affine LayerNorm, GELU): in
    float64 and in bfloat16 every element of its output and gradients is judged and passes
    (bfloat16 only since layer_norm's bound is capped by the computed output's and
    gradient's own sizes, docs/error-budget.md: before, its post-norms' gradient bound was
    infinite and 160 of 2,480 elements were judged); each of its 52 ops is judged alone on
    the layer's own values, and none is out of its own budget."""
    pytest.importorskip("transformers")
    code = main(["blocks", "check", "--exact", "hf.BertLayer", "--dtype", "float64",
                 "--dtype", "bfloat16", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("hf.BertLayer  float64:"))
    assert " pass, " in line and " of " not in line.split("elements")[0], out
    line = next(x for x in out.splitlines() if x.startswith("hf.BertLayer  bfloat16"))
    assert " pass, 2480 elements of the output and every gradient" in line, out
    assert "exact: 2 judged (0 fail, 0 partly judged)" in out and code == 0, out
    local = out.splitlines()[out.splitlines().index(line) + 1]
    assert local.startswith("  local: 52 ops judged on the module's own values") and \
        "none out of budget; graph run vs eager: bitwise" in local, out
