"""The exact judgement on convolutional blocks: ``nn.Conv2d`` of every geometry (bias added
per channel, stride, padding, dilation, groups, depthwise) and a ResNet-style block (conv,
eval-mode ``nn.BatchNorm2d``, ReLU, the residual add) trace into the IR and pass on every
element of the output, the input's gradient and every parameter's, in float64 and float32
(pointwise: these inputs); torch computes no gradient of the running statistics, so none is
judged. A conv backward with unflipped filters and a batch norm backward that drops ε are
caught, their correct twins pass.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import lower
from tests.blocks.conv_modules import (
    ConvBnBlock,
    Downsample,
    GroupNormBranch,
    ResidualConv,
    conv_with_flipped_backward,
    eps_batch_norm,
)

CHANNELS = 4
X = (torch.zeros(2, CHANNELS, 6, 6),)


def blocks() -> dict[str, nn.Module]:
    return {
        "conv 3x3": ResidualConv(CHANNELS, 3, padding=1),
        "conv 3x3 dilated, no bias": ResidualConv(CHANNELS, 3, padding=2, dilation=2,
                                                  bias=False),
        "conv grouped": ResidualConv(CHANNELS, 3, padding=1, groups=2),
        "conv depthwise 5x5": ResidualConv(CHANNELS, 5, padding=2, groups=CHANNELS),
        "downsample (stride 2, groups 2)": Downsample(CHANNELS),
        "conv, batch norm, relu block": ConvBnBlock(CHANNELS),
        "group norm, silu, conv": GroupNormBranch(CHANNELS),
    }


def trained(block: nn.Module) -> int:
    """Elements of the output, the input's gradient and every parameter's gradient."""
    out = block.double()(X[0].double())
    return out.numel() + X[0].numel() + sum(p.numel() for p in block.parameters())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(blocks()))
def test_convolutional_blocks_are_within_budget_on_every_element(name: str, dtype: str
                                                                  ) -> None:
    torch.manual_seed(0)
    block = blocks()[name].eval()
    judgement = judge_module(block, X, dtype, seed=3)
    assert judgement.passed, f"{name}: {judgement}"
    assert 0 < judgement.tightness.max <= 1, f"{name}: {judgement.tightness}"
    assert judgement.elements == trained(blocks()[name]), \
        f"{name}: judged {judgement.elements} elements, expected every gradient's"


def test_the_block_traces_to_conv2d_and_batch_norm_with_its_statistics_untrained() -> None:
    lowered = lower(ConvBnBlock(CHANNELS).double().eval(), (X[0].double(),))
    ops = [n.op for n in lowered.program.nodes]
    assert ops.count("conv2d") == 2 and ops.count("batch_norm") == 2, ops
    assert sorted(lowered.untrained) == ["bn1.running_mean", "bn1.running_var",
                                         "bn2.running_mean", "bn2.running_var"]


def test_group_norm_traces_to_layer_norm_over_each_groups_elements() -> None:
    lowered = lower(GroupNormBranch(CHANNELS).double(), (X[0].double(),))
    norm = next(n for n in lowered.program.nodes if n.op == "layer_norm")
    rows = next(n for n in lowered.program.nodes if n.name == norm.args[0])
    assert rows.op == "reshape" and rows.params == {"shape": (2, 2, 72)}, rows


def test_a_bias_is_added_per_channel_after_the_convolution() -> None:
    program = lower(ResidualConv(CHANNELS, 3, padding=1).double(), (X[0].double(),)).program
    assert program.describe() == (
        "residual_add(x, add(conv2d(x, conv.weight, dilation=(1, 1), groups=1, "
        "padding=(1, 1), stride=(1, 1)), reshape(conv.bias, shape=(4, 1, 1))))")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_conv_backward_with_unflipped_filters_is_caught(dtype: str) -> None:
    torch.manual_seed(0)
    block = ConvBnBlock(CHANNELS).eval()
    right = judge_module(block, X, dtype, seed=3)
    block.conv = conv_with_flipped_backward
    wrong = judge_module(block, X, dtype, seed=3)
    assert right.passed, right
    assert not wrong.passed, wrong
    assert {m.where for m in wrong.misses} <= {"grad[x]"}, wrong


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_batch_norm_backward_without_eps_is_caught(dtype: str) -> None:
    torch.manual_seed(0)
    right = judge_module(ConvBnBlock(CHANNELS, bn=eps_batch_norm(1e-5)).eval(), X, dtype,
                         seed=3)
    torch.manual_seed(0)
    wrong = judge_module(ConvBnBlock(CHANNELS, bn=eps_batch_norm(0.0)).eval(), X, dtype,
                         seed=3)
    assert right.passed, right
    assert not wrong.passed, wrong
    assert all(m.where.startswith("grad[") for m in wrong.misses), wrong  # forward: torch's
