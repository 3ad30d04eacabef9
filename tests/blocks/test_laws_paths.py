"""The paths law: torch.compile and the inference fast path against eager.

The fast-path tests are cheap (no compile) and run by default; every test that compiles is
marked slow (inductor takes seconds per graph). The planted fast-path bug is in
:mod:`tests.blocks.broken_blocks` (``fused_norms_repeated``); a compile-only bug is here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from resverify.blocks import check_block, pytest_check
from resverify.blocks.catalog.torch_nn import D_MODEL, FF, HEADS, RECIPES, encoder
from resverify.blocks.check import Draw, run_law
from resverify.blocks.laws import applicable
from resverify.blocks.laws_paths import fused_calls
from resverify.blocks.torch_adapter import make_case
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import UsageError
from tests.blocks.broken_blocks import BUGS, CORRECT

EXAMPLES = 5
TORCH_LAYERS = [(r, d) for r in RECIPES for d in ("float32", "float64")]
IDS = [f"{r.name}-{d}" for r, d in TORCH_LAYERS]


@pytest.mark.parametrize(("recipe", "dtype"), TORCH_LAYERS, ids=IDS)
def test_fast_path_is_taken_and_agrees_with_eager_on_torch_layers(recipe: object,
                                                                  dtype: str) -> None:
    record = run_law(recipe, "paths", dtype, "eval", paths=["fastpath"],  # type: ignore[arg-type]
                     max_examples=EXAMPLES)
    assert record.verdict == "pass", f"{record.line()}, expected pass"
    fused = record.figures["fused[fastpath]"]
    assert fused >= 1.0, f"fused[fastpath] = {fused}, expected >= 1 [{record.line()}]"
    assert "max_diff[fastpath]" in record.figures, record.figures


def test_fast_path_counter_leaves_the_output_as_it_was() -> None:
    recipe = encoder(False)
    case = make_case(recipe, "float32", "eval", Draw(2, 3, 7, 0, 0))
    x = case.inputs.x.clone()
    with torch.inference_mode():
        plain = case.module(x)
    counted, calls = fused_calls(recipe, case.module, x, {})
    assert torch.equal(counted, plain), f"counted {counted} != plain {plain} [{recipe.name}]"
    assert calls == {"_transformer_encoder_layer_fwd": 1}, f"calls {dict(calls)}, expected 1"


def test_fast_path_unmet_conditions_are_unjudged_with_the_reason() -> None:
    """One head: torch refuses its fused kernel ("num_head is odd"), so no fast path ran and
    the law says so instead of judging eager twice."""
    odd = replace(encoder(True), name="torch.TransformerEncoderLayer(1 head)",
                  factory=lambda dtype: nn.TransformerEncoderLayer(
                      D_MODEL, 1, FF, 0.0, batch_first=True, norm_first=True, dtype=dtype))
    record = run_law(odd, "paths", "float32", "eval", paths=["fastpath"], max_examples=2)
    assert record.verdict == "unjudged", f"{record.line()}, expected unjudged"
    assert "no fused inference kernel" in record.message, record.message
    assert HEADS % 2 == 0, "the catalog's layers must have an even head count"


def test_a_block_without_a_fast_path_is_unjudged() -> None:
    record = run_law(CORRECT["projected_relu"], "paths", "float32", "eval", paths=["fastpath"],
                     max_examples=2)
    assert record.verdict == "unjudged", f"{record.line()}, expected unjudged"


def test_fast_path_in_train_mode_is_unjudged() -> None:
    record = run_law(encoder(True), "paths", "float32", "train", paths=["fastpath"],
                     max_examples=2)
    assert (record.verdict, "eval only" in record.message) == ("unjudged", True), record.line()


def test_paths_law_runs_only_when_paths_are_asked_for() -> None:
    recipe = encoder(True)
    assert "paths" not in applicable(recipe), applicable(recipe)
    assert applicable(recipe, ["fastpath"])[-1] == "paths", applicable(recipe, ["fastpath"])
    plain = check_block(recipe, ["float64"], ["no_aliasing"], max_examples=1)
    assert [r.law for r in plain] == ["no_aliasing", "no_aliasing"], [r.line() for r in plain]
    asked = check_block(recipe, ["float64"], ["paths"], max_examples=1, paths=["fastpath"])
    assert [(r.law, r.mode) for r in asked] == [("paths", "eval")], [r.line() for r in asked]


def test_pytest_check_passes_paths_on_and_fails_the_planted_fast_path_bug() -> None:
    bug = BUGS["fused_norms_repeated"]
    with pytest.raises(PropertyFailure, match=r"paths: fastpath: zeroing .*bitwise"):
        pytest_check(bug.recipe, [bug.dtype], ["paths"], max_examples=2, paths=bug.paths)
    records = pytest_check(encoder(False), ["float32"], ["paths"], max_examples=2,
                           paths=["fastpath"])
    assert [r.verdict for r in records] == ["pass"], [r.line() for r in records]


@pytest.mark.parametrize(("paths", "match"), [(["fused"], "unknown path 'fused'"),
                                              ([], "give paths=")])
def test_paths_option_is_refused_in_one_line(paths: list[str], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        run_law(encoder(True), "paths", "float32", "eval", paths=paths, max_examples=1)


# ------------------------------------------------------------------------------------------
# torch.compile (slow: inductor compiles each block's graphs once per dtype)

@pytest.mark.slow
@pytest.mark.parametrize(("recipe", "dtype"), TORCH_LAYERS, ids=IDS)
def test_compile_agrees_with_eager_on_torch_layers(recipe: object, dtype: str) -> None:
    record = run_law(recipe, "paths", dtype, "eval", paths=["compile"],  # type: ignore[arg-type]
                     max_examples=EXAMPLES)
    assert record.verdict == "pass", f"{record.line()}, expected pass"
    graphs = record.figures["max_graphs[compile]"]
    assert graphs >= 1.0, f"max_graphs[compile] = {graphs}, expected >= 1 [{record.line()}]"


class SkipDroppedWhenCompiling(nn.TransformerEncoderLayer):
    """Pre-norm layer whose compiled forward drops the feed-forward skip: eager is right."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(D_MODEL, HEADS, FF, 0.0, batch_first=True, norm_first=True,
                         dtype=dtype)

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self._sa_block(self.norm1(src), None, None)
        ff = self._ff_block(self.norm2(x))
        return ff if torch.compiler.is_compiling() else x + ff


@pytest.mark.slow
def test_compile_catches_a_skip_dropped_only_when_compiling() -> None:
    recipe = replace(encoder(True), name="SkipDroppedWhenCompiling",
                     factory=SkipDroppedWhenCompiling)
    record = run_law(recipe, "paths", "float32", "eval", paths=["compile"], max_examples=3,
                     shrink=False)
    assert record.verdict == "fail", f"{record.line()}, expected fail"
    assert "compile: zeroing" in record.message and "the identity" in record.message, \
        record.message
    eager = check_block(recipe, ["float32"], ["zero_branch", "decomposition"], max_examples=3)
    assert all(r.verdict == "pass" for r in eager), [r.line() for r in eager]
