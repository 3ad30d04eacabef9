"""The exact judgement on blocks built from real ``torch.nn`` layers: ``nn.Linear`` with bias
(its weight transposed by ``t``, multiplied by ``addmm``, 3-D input through ``view``), GELU in
both forms, SiLU, Llama's gated MLP and an affine ``nn.LayerNorm``. Each traces fully into the
IR and its own eager output and every gradient (input and each parameter) are within the exact
oracle's budget, element by element, in float64 and float32 (pointwise: these inputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import lower
from tests.blocks.exact_modules import GatedMLP, LinearMLP

WIDTH = 16
X = (torch.zeros(2, 3, WIDTH),)


def blocks() -> dict[str, nn.Module]:
    return {
        "linear gelu(erf)": LinearMLP(WIDTH, nn.GELU()),
        "linear gelu(tanh)": LinearMLP(WIDTH, nn.GELU("tanh")),
        "linear silu": LinearMLP(WIDTH, nn.SiLU()),
        "layer norm, linear gelu": LinearMLP(WIDTH, nn.GELU(), nn.LayerNorm(WIDTH)),
        "gated (llama)": GatedMLP(WIDTH),
        "gated, no norm": GatedMLP(WIDTH, nn.Identity()),
    }


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(blocks()))
def test_real_layer_blocks_are_within_budget_on_every_element(name: str, dtype: str) -> None:
    torch.manual_seed(0)
    block = blocks()[name]
    judgement = judge_module(block, X, dtype, seed=3)
    assert judgement.passed, f"{name}: {judgement}"
    assert 0 < judgement.tightness.max <= 1, f"{name}: {judgement.tightness}"
    output_and_input_grad = 2 * X[0].numel()
    parameters = sum(p.numel() for p in block.parameters())
    assert judgement.elements == output_and_input_grad + parameters, \
        f"{name}: judged {judgement.elements} elements, expected every gradient's"


def test_the_linear_block_traces_to_linear_on_the_transposed_weight_plus_the_bias() -> None:
    program = lower(LinearMLP(WIDTH, nn.GELU()).double(), (X[0].double(),)).program
    assert program.describe() == (
        "residual_add(x, reshape(add(linear(reshape(gelu_erf(reshape(add(linear(reshape(x, "
        "shape=(6, 16)), permute(fc1.weight, perm=(1, 0))), fc1.bias), shape=(2, 3, 32))), "
        "shape=(6, 32)), permute(fc2.weight, perm=(1, 0))), fc2.bias), shape=(2, 3, 16)))")


def test_the_gated_block_reports_its_matched_norm_and_silu() -> None:
    lowered = lower(GatedMLP(WIDTH).double(), (X[0].double(),))
    assert sorted(m.split(" at ")[0] for m in lowered.matched) == ["rms_norm", "silu"]
    assert {n.op for n in lowered.program.nodes} == \
        {"rms_norm", "mul", "reshape", "permute", "linear", "silu", "residual_add"}
