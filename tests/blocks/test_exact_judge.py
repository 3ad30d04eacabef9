"""The exact judgement of what ran: a real module's own output and every gradient, element by
element, against the exact value of its traced program within the dtype's budget.

Each planted bug is paired with its correct twin, which must pass: the judgement can fail,
and does not fail the right module.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks import check_block
from resverify.blocks.exact import judge_module
from tests.blocks.exact_modules import (
    GELU_K,
    Activation,
    ResidualMLP,
    gelu_tanh_with_constant,
    mlp_recipe,
    tanh_with_backward,
)

WIDTH = 16
X = (torch.zeros(4, WIDTH),)
OFF = {"float64": 2.0**-30, "float32": 2.0**-10}
"""The relative size of each planted bug per dtype: far below any hand-set tolerance in
float64 (1e-9), a thousandth in float32."""


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("norm", [None, "layer_norm", "rms_norm"])
def test_residual_mlp_is_within_budget_on_every_element(dtype: str, norm: str | None) -> None:
    norms = {None: None, "layer_norm": nn.LayerNorm(WIDTH), "rms_norm": nn.RMSNorm(WIDTH)}
    judgement = judge_module(ResidualMLP(WIDTH, norm=norms[norm]), X, dtype, seed=1)
    assert judgement.passed, str(judgement)
    assert 0 < judgement.tightness.max <= 1, judgement.tightness


def test_every_element_of_output_and_each_gradient_is_judged() -> None:
    judgement = judge_module(ResidualMLP(WIDTH, norm=nn.LayerNorm(WIDTH)), X, "float64")
    output_and_input_grad = 2 * 4 * WIDTH
    parameters = 2 * WIDTH * WIDTH + 2 * WIDTH  # w1, w2, the norm's weight and bias
    assert judgement.elements == output_and_input_grad + parameters
    assert "pointwise: these inputs" in str(judgement)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_backward_off_by_a_small_factor_is_caught(dtype: str) -> None:
    twin = judge_module(ResidualMLP(WIDTH, tanh_with_backward(1.0)), X, dtype)
    bug = judge_module(ResidualMLP(WIDTH, tanh_with_backward(1 + OFF[dtype])), X, dtype)
    assert twin.passed, str(twin)
    assert not bug.passed, str(bug)
    assert all(m.where.startswith("grad[") for m in bug.misses), bug.misses[:3]


def test_the_backward_bug_leaves_the_forward_bitwise_right() -> None:
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(0))
    right = ResidualMLP(WIDTH)(x)
    planted = ResidualMLP(WIDTH, tanh_with_backward(1 + OFF["float32"]))(x)
    assert torch.equal(right, planted)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_forward_constant_its_backward_does_not_share_is_caught(dtype: str) -> None:
    twin = judge_module(ResidualMLP(WIDTH, gelu_tanh_with_constant(GELU_K)), X, dtype)
    k = GELU_K * (1 + OFF[dtype])
    bug = judge_module(ResidualMLP(WIDTH, gelu_tanh_with_constant(k)), X, dtype)
    assert twin.passed, str(twin)
    assert not bug.passed, str(bug)


PLANTED: dict[str, Activation] = {
    "backward": tanh_with_backward(1 + OFF["float32"]),
    "forward constant": gelu_tanh_with_constant(GELU_K * (1 + OFF["float32"])),
}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_the_structural_block_laws_miss_what_the_exact_judgement_catches(bug: str) -> None:
    act = PLANTED[bug]
    recipe = mlp_recipe(f"ResidualMLP({bug} bug)", act)
    records = check_block(recipe, ["float32"], max_examples=10)
    assert records and all(r.verdict == "pass" for r in records), [r.line() for r in records]
    assert not judge_module(ResidualMLP(WIDTH, act), X, "float32").passed
