"""``resverify model NAME``: a whole model judged exactly per dtype, a row per part printed
and reported (the report validating against the schema), a failure exiting 1 with the layer
it is charged to and its vector, a user's mistake exiting 2 with one line before anything
is judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)
pytest.importorskip("transformers", exc_type=ImportError)

import torch

from resverify.cli.main import main
from resverify.reports.json_report import validate
from tests.blocks.planted_kernels import InLayer
from tests.blocks.planted_layers import silu_forward_scaled


def test_a_model_is_judged_per_part_and_its_report_validates(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["model", "hf.LlamaForCausalLM", "--dtype", "float32", "--layers", "1",
                 "--report-dir", str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "hf.LlamaForCausalLM float32: judging 1 layers, hidden 16, seq 4, batch 2" in out
    said = out.splitlines()
    laws = said.index("  layer laws: every layer passes every law")
    rows = [line.split(":")[0].strip() for line in said[:laws] if line.startswith("    ")]
    assert rows == ["embeddings", "model.layers.0", "final norm", "head"], out
    assert said[laws + 1] == "    layer 0 model.layers.0: every law passes", out
    doc = json.loads((tmp_path / "report.json").read_text())
    validate(doc)
    judgement = doc["exact"]["blocks"][0]["judgements"][0]
    parts = judgement["layers"]
    assert sum(p["total"] for p in parts) == judgement["total"], (parts, judgement["total"])
    assert judgement["culprit"] is None and doc["status"] == "pass", judgement
    assert judgement["layer_laws"]["verdict"] == "pass", judgement["layer_laws"]
    table = (tmp_path / "report.md").read_text()
    assert "| hf.LlamaForCausalLM | float32 · model.layers.0 | ✅ pass |" in table, table
    assert "| hf.LlamaForCausalLM | float32 · model.layers.0 laws | ✅ pass |" in table, table
    assert "float32 · model.layers.0" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize(("args", "said"), [
    (["hf.NoSuchModel"], "no model 'hf.NoSuchModel'; known: hf.LlamaForCausalLM"),
    (["hf.GPT2LMHeadModel", "--hidden", "15"], "--hidden 15: must be a multiple of"),
    (["hf.LlamaForCausalLM", "--layers", "0"], "--layers 0: must be at least 1"),
    (["hf.ViTModel", "--seq", "5"], "--seq 5: a ViT's tokens are a square of patches"),
    (["hf.LlamaForCausalLM", "--dtype", "float16"], "--dtype float16: hf.LlamaForCausalLM "
                                                    "claims float32, bfloat16"),
])
def test_a_user_s_mistake_is_one_line_and_exit_2(
        args: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["model", *args, "--report-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("resverify: error: ") and said in captured.err, captured.err
    assert len(captured.err.splitlines()) == 1 and captured.out == "", captured
    assert not (tmp_path / "report.json").exists(), "nothing judged, but a report was written"


@pytest.mark.slow
def test_a_failure_exits_1_naming_its_layer_and_saving_its_vector(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with InLayer(silu_forward_scaled(True), layer=1, layers=2, dtypes=frozenset({torch.float32})):
        code = main(["model", "hf.LlamaForCausalLM", "--dtype", "float32",
                     "--report-dir", str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "  first layer out of budget: model.layers.1: fail" in out, out
    saved = sorted((tmp_path / "vectors" / "exact").glob("*.json"))
    assert len(saved) == 1 and f"  vector {saved[0]}" in out, (saved, out)
    doc = json.loads((tmp_path / "report.json").read_text())
    validate(doc)
    judgement = doc["exact"]["blocks"][0]["judgements"][0]
    assert judgement["culprit"] == "model.layers.1" and doc["status"] == "fail", judgement


def test_an_interrupted_run_keeps_what_finished_and_exits_1(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the second dtype: the first dtype's judgement is in the report, which
    says it was interrupted."""
    from resverify.blocks import exact_model

    judged = exact_model.judge_model

    def stopped(entry: object, dtype: str, *args: object) -> object:
        if dtype == "bfloat16":
            raise KeyboardInterrupt
        return judged(entry, dtype, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(exact_model, "judge_model", stopped)
    code = main(["model", "hf.LlamaForCausalLM", "--layers", "1", "--report-dir",
                 str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 1, out
    doc = json.loads((tmp_path / "report.json").read_text())
    validate(doc)
    assert doc["exact"]["interrupted"] is not None and doc["status"] == "incomplete", doc
    assert [j["dtype"] for j in doc["exact"]["blocks"][0]["judgements"]] == ["float32"], doc


@pytest.mark.parametrize("form", ["flax4567", "olmo680"])
def test_a_wiring_bug_in_the_second_layer_fails_its_laws_there_though_the_exact_judgement_passes(
        form: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from resverify.blocks.catalog import models
    from tests.blocks.planted_wiring import FAMILIES

    llama = models.model_entry("hf.LlamaForCausalLM")

    def planted(sizes: models.Sizes) -> torch.nn.Module:
        built = llama.build(sizes)
        FAMILIES["llama"].planted(built, form, True)
        return built

    monkeypatch.setattr(models, "_MODELS", (replace(llama, build=planted),))
    code = main(["model", "hf.LlamaForCausalLM", "--dtype", "float32", "--report-dir",
                 str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "hf.LlamaForCausalLM  float32: pass" in out, out  # the trace is the bug's program
    assert "  layer laws: first failing layer: 1 (model.layers.1), zero_branch" in out, out
    assert "    layer 0 model.layers.0: every law passes" in out, out
    norm = "post_attention_layernorm" if form == "flax4567" else "input_layernorm"
    doc = json.loads((tmp_path / "report.json").read_text())
    validate(doc)
    laws = doc["exact"]["blocks"][0]["judgements"][0]["layer_laws"]
    assert laws["verdict"] == "fail" and laws["first"] == 1, laws
    where = laws["layers"][1]["location"]
    assert where is not None and where["module"] == f"model.layers.1.{norm}", laws
    assert doc["status"] == "fail", doc["status"]
    assert "the first failing layer; fails zero_branch" in (tmp_path / "report.md").read_text()


def _vit_forward_flax4567(self: object, hidden_states: torch.Tensor, attention_mask: object = None,
                          **kwargs: object) -> torch.Tensor:
    """``ViTLayer.forward`` (transformers 5) with google/flax#4567's wiring: the norm meant
    for the MLP's input applied to the first residual sum and fed onward as the stream."""
    layer: Any = self
    attn, _ = layer.attention(layer.layernorm_before(hidden_states), attention_mask)
    normed = layer.layernorm_after(attn + hidden_states)
    out: torch.Tensor = normed + layer.mlp(normed)
    return out


def test_the_vit_models_layers_get_their_laws_and_a_second_layer_wiring_bug_is_located(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ViT's layer class has the catalog recipe ``hf.ViTLayer``, so its layers' laws run
    (before, its row said no recipe) and a wiring bug in layer 1 fails them there."""
    import types
    from dataclasses import replace

    from resverify.blocks.catalog import models

    vit = models.model_entry("hf.ViTModel")
    code = main(["model", "hf.ViTModel", "--dtype", "float32", "--report-dir",
                 str(tmp_path / "clean"), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0 and "  layer laws: every layer passes every law" in out, out

    def planted(sizes: models.Sizes) -> torch.nn.Module:
        built = vit.build(sizes)
        layer = built.get_submodule("layers.1")
        layer.forward = types.MethodType(_vit_forward_flax4567, layer)
        return built

    monkeypatch.setattr(models, "_MODELS", (replace(vit, build=planted),))
    code = main(["model", "hf.ViTModel", "--dtype", "float32", "--report-dir",
                 str(tmp_path / "planted"), "--no-plots"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "hf.ViTModel  float32: pass" in out, out  # the trace is the bug's program
    assert "  layer laws: first failing layer: 1 (layers.1), zero_branch" in out, out
    doc = json.loads((tmp_path / "planted" / "report.json").read_text())
    where = doc["exact"]["blocks"][0]["judgements"][0]["layer_laws"]["layers"][1]["location"]
    assert where is not None and where["module"] == "layers.1.layernorm_after", where
