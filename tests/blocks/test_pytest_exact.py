"""``pytest_exact``: a user's test fails on the numbers, never goes green without judgement.

A correct block passes in every dtype it claims; its twin whose tanh backward is off by
``1 + 2⁻¹⁰`` fails with the judgement's line, the vector saved and the replay command; a
block the IR cannot express raises ``NotInIR``; a partly judged block fails as
``NotJudged`` unless ``allow_partly``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from resverify.blocks import NotInIR, Site, pytest_exact
from resverify.blocks.recipe import Recipe
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import NotJudged, UsageError
from tests.blocks.exact_modules import RECIPES


def test_a_correct_block_passes_in_every_dtype_it_claims(tmp_path: Path) -> None:
    judgements = pytest_exact(RECIPES["ResidualMLP"], vectors=tmp_path)
    assert [(j.dtype, j.verdict) for j in judgements] == \
        [("float64", "pass"), ("float32", "pass")], [str(j) for j in judgements]
    assert not list(tmp_path.iterdir()), "a passing judgement saves no vector"


def test_a_backward_off_by_a_small_factor_fails_the_test_with_its_vector(
        tmp_path: Path) -> None:
    with pytest.raises(PropertyFailure) as caught:
        pytest_exact(RECIPES["ResidualMLP(backward off)"], ["float32"], vectors=tmp_path)
    message = str(caught.value)
    saved = list(tmp_path.glob("*.json"))
    assert len(saved) == 1 and f"vector {saved[0]}; replay it: resverify replay " in message, \
        (message, saved)
    assert "float32: FAIL" in message, message


class _Sorted(nn.Module):
    """``x + sort(x)``: ``aten.sort`` has no row."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sort(x * self.w, dim=-1).values


def _sorted_branch(m: nn.Module, s: torch.Tensor, ctx: object) -> torch.Tensor:
    assert isinstance(m, _Sorted)
    return torch.sort(s * m.w, dim=-1).values


def test_a_block_the_ir_cannot_express_raises_not_in_ir() -> None:
    recipe = Recipe("Sorted", _Sorted, (Site("sort", _sorted_branch, ("w",), norm="none"),),
                    shape=("batch", 4), dtypes=("float64",), modes=("eval",))
    with pytest.raises(NotInIR, match=r"aten\.sort"):
        pytest_exact(recipe)


class _Exp(nn.Module):
    """``x + exp(200 x)``: in bfloat16 ``exp`` may overflow on every element drawn."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((4,), 200.0, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.exp(x * self.w)


def _exp_branch(m: nn.Module, s: torch.Tensor, ctx: object) -> torch.Tensor:
    assert isinstance(m, _Exp)
    return torch.exp(s * m.w)


def test_a_partly_judged_block_fails_unless_allowed() -> None:
    """``x + exp(200 x)`` in bfloat16 bounds none of its 20 elements (``exp``'s magnitude
    may reach the largest value). (hf.BertLayer in bfloat16, which bounded 160 of its 2,480,
    is judged whole since layer_norm's size caps.)"""
    recipe = Recipe("Exp", _Exp, (Site("exp", _exp_branch, ("w",), norm="none"),),
                    shape=("batch", 4), dtypes=("bfloat16",), modes=("eval",))
    with pytest.raises(NotJudged, match="bounded only some elements"):
        pytest_exact(recipe, ["bfloat16"])
    judged = pytest_exact(recipe, ["bfloat16"], allow_partly=True)
    assert judged[0].verdict == "partly judged", str(judged[0])


def test_a_dtype_the_recipe_does_not_claim_is_a_usage_error() -> None:
    only64 = replace(RECIPES["ResidualMLP"], dtypes=("float64",))
    with pytest.raises(UsageError, match=r"dtypes \['float32'\] are not among"):
        pytest_exact(only64, ["float32"])
