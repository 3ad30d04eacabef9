"""The RMSNorm composite in the forms real layers write it, each matched to one ``rms_norm``:
T5's ``x * rsqrt(mean(x.to(float32) ** 2) + eps)`` (a bfloat16 ``x`` times a float32
``rsqrt``: torch promotes the product, so it is the norm of the widened row) and litgpt's
``x * rsqrt(mean(x * x) + eps)`` on ``x.float()``. Each is judged within budget on every
element (pointwise: these inputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import _export, lower
from resverify.blocks.patterns import find

WIDTH = 16
EPS = 1e-6


class T5Norm(nn.Module):
    """Hugging Face's ``T5LayerNorm.forward``: the variance in float32, the row itself (in
    its own dtype) times its ``rsqrt``, cast back to the weight's low dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + torch.randn(WIDTH, generator=torch.Generator()
                                                   .manual_seed(1)) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(variance + EPS)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            h = h.to(self.weight.dtype)
        return x + self.weight * h


class LitNorm(nn.Module):
    """litgpt's ``RMSNorm.forward``: ``x.float()``, the mean of ``x * x``, and the weight
    widened before the product."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + torch.randn(WIDTH, generator=torch.Generator()
                                                   .manual_seed(2)) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        normed = h * torch.rsqrt(torch.mean(h * h, dim=-1, keepdim=True) + EPS)
        return x + (normed * self.weight.float()).to(dtype=x.dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("form", [T5Norm, LitNorm])
def test_the_norm_forms_of_t5_and_litgpt_match_one_rms_norm(form: type[nn.Module],
                                                             dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    lowered = lower(form().to(torch_dtype), (torch.zeros(2, 3, WIDTH, dtype=torch_dtype),))
    assert [m.split(" at ")[0] for m in lowered.matched] == ["rms_norm"], lowered.matched
    widened = lowered.program.describe().count("cast(x, source=bfloat16, target=float32)")
    assert widened == (1 if dtype == "bfloat16" else 0), lowered.program.describe()
    assert "rsqrt" not in {n.op for n in lowered.program.nodes}


def test_a_square_of_another_row_is_not_the_norm() -> None:
    """``x * rsqrt(mean(y * y) + eps)`` with ``y`` not ``x`` is not an RMSNorm of ``x``."""

    class Other(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2
            return x * torch.rsqrt(torch.mean(y * y, dim=-1, keepdim=True) + EPS)

    graph = _export(Other(), (torch.zeros(2, WIDTH),)).graph
    assert find(graph.nodes, {}) == {}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("form", [T5Norm, LitNorm])
def test_the_matched_norm_forms_are_within_budget_on_every_element(form: type[nn.Module],
                                                                    dtype: str) -> None:
    judgement = judge_module(form(), (torch.zeros(2, 3, WIDTH),), dtype, seed=5)
    assert judgement.passed, str(judgement)
    assert judgement.elements == judgement.total == 2 * 2 * 3 * WIDTH + WIDTH, str(judgement)


class Rescaled(nn.Module):
    """``x + x * rsqrt(x * x + 1)``: an ``rsqrt`` no norm composite absorbs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x * torch.rsqrt(x * x + 1.0)


def test_an_rsqrt_outside_the_norm_composite_is_the_irs_rsqrt() -> None:
    lowered = lower(Rescaled(), (torch.zeros(2, WIDTH),))
    assert lowered.program.describe() == (
        "residual_add(x, mul(x, rsqrt(add(mul(x, x), add.number))))"), \
        lowered.program.describe()


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_an_rsqrt_outside_the_norm_composite_is_within_budget_on_every_element(
        dtype: str) -> None:
    judgement = judge_module(Rescaled(), (torch.zeros(2, 3, WIDTH),), dtype, seed=6)
    assert judgement.passed, str(judgement)
    assert judgement.elements == judgement.total == 2 * 2 * 3 * WIDTH, str(judgement)
