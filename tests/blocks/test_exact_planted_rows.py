"""A planted backward bug in each kind of ATen row is caught by the exact judgement, and its
correct twin passes. The forward is torch's own op, so every element outside the budget is a
gradient's; the slope bugs are off by a factor ``1 + 2⁻³⁰`` (float64) or ``1 + 2⁻¹⁰``
(float32), the layout bugs move elements (a wrong permutation, offset or order).
"""

from __future__ import annotations

import pytest
import torch

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import lower
from tests.blocks.planted_rows import KINDS, Planted

X = (torch.zeros(4, 8),)
OFF = {"float64": 2.0**-30, "float32": 2.0**-10}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_planted_op_is_traced_through_its_row(kind: str) -> None:
    program = lower(Planted(kind, right=False).double(), (X[0].double(),)).program
    wanted = KINDS[kind].ir_op or kind
    assert wanted in {n.op for n in program.nodes}, f"{kind}: {program.describe()}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_right_backward_of_each_row_kind_passes(kind: str, dtype: str) -> None:
    judgement = judge_module(Planted(kind, right=True), X, dtype, seed=4)
    assert judgement.passed, f"{kind}: {judgement}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_planted_backward_bug_of_each_row_kind_is_caught(kind: str, dtype: str) -> None:
    judgement = judge_module(Planted(kind, right=False, off=OFF[dtype]), X, dtype, seed=4)
    assert not judgement.passed, f"{kind}: the planted bug passed: {judgement}"
    assert all(m.where.startswith("grad[") for m in judgement.misses), \
        f"{kind}: a forward element missed, the forward is torch's: {judgement.misses[:3]}"


def test_each_planted_bug_leaves_the_forward_bitwise_right() -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    for kind in KINDS:
        right = Planted(kind, right=True)(x)
        planted = Planted(kind, right=False, off=OFF["float32"])(x)
        assert torch.equal(right, planted), kind
