"""The forward laws' parts: the merge budget, the non-bitwise mode, LN∘LN, linearity in γ."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import Draw
from resverify.blocks.laws_forward import decomposition, merge_budget
from resverify.blocks.laws_gamma import GAMMAS, affine_in_gamma
from resverify.blocks.torch_adapter import build, make_case
from resverify.blocks.trace import TORCH_DTYPES, UNIT_ROUNDOFF, Unjudged
from resverify.properties.assertions import PropertyFailure
from tests.blocks.broken_blocks import CORRECT, LayerScale, ScaledEncoderLayer, scaled_recipe

DRAW = Draw(batch=2, seq=3, seed=11, weight_exp=0, input_exp=0)


@settings(max_examples=25)
@given(st.sampled_from(["float32", "bfloat16", "float16"]), st.sampled_from([1.0, 0.5, 3.0]),
       st.integers(0, 2**31 - 1))
def test_merge_budget_covers_a_fused_and_an_unfused_sum(dtype: str, alpha: float,
                                                        seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    s = (torch.randn(64, generator=gen, dtype=torch.float64) * 4).to(t)
    f = (torch.randn(64, generator=gen, dtype=torch.float64) * 2).to(t)
    unfused = s + alpha * f  # two roundings in the dtype
    fused = (s.double() + alpha * f.double()).to(t)  # one rounding of the float64 sum
    budget = merge_budget(dtype, s, alpha * f.double())
    gap = (unfused.double() - fused.double()).abs()
    worst = int(torch.argmax(gap - budget))
    assert bool((gap <= budget).all()), (
        f"[{worst}]: |unfused - fused| = {float(gap[worst])!r} > budget "
        f"{float(budget[worst])!r} [s + {alpha}*f, {dtype}]")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_merge_budget_at_one_is_between_one_and_two_ulps(dtype: str) -> None:
    one = torch.ones(1, dtype=TORCH_DTYPES[dtype])
    ulp = 2 * UNIT_ROUNDOFF[dtype]
    budget = float(merge_budget(dtype, one, torch.zeros(1))[0])
    assert ulp < budget < 2 * ulp, f"budget {budget!r} at 1, expected in ({ulp}, {2 * ulp})"


class _Overshoots(torch.nn.TransformerEncoderLayer):
    """Adds 17/16 of the feed-forward update: wrong by far more than a rounding."""

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self._sa_block(self.norm1(src), None, None)
        return x + self._ff_block(self.norm2(x)) * (17 / 16)


@pytest.mark.parametrize("exact", [True, False])
def test_decomposition_budget_holds_the_right_sum_and_refuses_a_wrong_one(exact: bool) -> None:
    good = encoder(True)
    loose = replace(good, sites=tuple(replace(s, exact=exact) for s in good.sites))
    assert decomposition(make_case(loose, "bfloat16", "eval", DRAW)) == {}
    wrong = replace(loose, factory=lambda dtype: _Overshoots(
        16, 2, 32, 0.0, batch_first=True, norm_first=True, dtype=dtype))
    with pytest.raises(PropertyFailure, match=r"decomposition: sum z\[.*site 1 \(feed-forward\)"
                       ) as caught:
        decomposition(make_case(wrong, "bfloat16", "eval", DRAW))
    assert ("budget 0)" in str(caught.value)) == exact, caught.value


def test_post_norm_zero_branch_is_both_norms_not_the_first() -> None:
    module = build(encoder(False), "float64", 0)
    x = torch.randn(4, 3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first = module.get_submodule("norm1")(x)
        both = module.get_submodule("norm2")(first)
    gap = float((both - first).abs().max())
    assert 0 < gap < 1e-4, f"|N2(N1(x)) - N1(x)| = {gap!r}, expected in (0, 1e-4) at eps 1e-5"


class _Squared(LayerScale):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma * self.gamma


class GammaSquared(ScaledEncoderLayer):
    """LayerScale applied twice: zero at γ = 0, constructed right, not linear in γ."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        self.ls1 = _Squared(16, self.ls1.gamma.detach()[0].item(), dtype)


def test_affine_in_gamma_refuses_a_quadratic_gamma() -> None:
    case = make_case(scaled_recipe("GammaSquared", GammaSquared), "float64", "eval", DRAW)
    with pytest.raises(PropertyFailure, match=r"y\(γ\) - x at the block's γ.*linear in "
                       r"ls1\.gamma .*site 0 \(self-attention\)"):
        affine_in_gamma(case)


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_affine_in_gamma_holds_on_layer_scale(dtype: str) -> None:
    """It holds, and its figures are the swamped fraction of each LayerScale site's sum at
    each γ of the LayerScale plot, a fraction."""
    recipe = CORRECT["scaled"]
    figures = affine_in_gamma(make_case(recipe, dtype, "eval", DRAW))
    expected = {f"swamped_at_gamma[{g!r}][{s.label}]" for g in GAMMAS for s in recipe.sites
                if s.scale}
    assert set(figures) == expected, (sorted(figures), sorted(expected))
    assert all(0.0 <= v <= 1.0 for v in figures.values()), figures


def test_affine_in_gamma_is_unjudged_without_gamma() -> None:
    with pytest.raises(Unjudged, match="no site declares a LayerScale"):
        affine_in_gamma(make_case(encoder(True), "float32", "eval", DRAW))
