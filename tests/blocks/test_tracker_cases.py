"""The tracker reports' blocks judged on the paths they are about (tracker_cases.py)."""

from __future__ import annotations

import pytest
import torch

from resverify.blocks.exact_paths import judge_paths
from tests.blocks.tracker_cases import CASES, Case

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def case(report: str) -> Case:
    return next(c for c in CASES if c.report == report)


def judged_case(report: str, dtype: str) -> str:
    one = case(report)
    torch.manual_seed(0)
    found = judge_paths(one.module(), [torch.zeros(one.shape)], one.paths, dtype)
    ran = [p for p in found.paths if not p.unjudged]
    assert [p.path for p in ran] == list(one.paths), str(found)
    assert all(p.gradients and p.elements == found.eager.total for p in ran), str(found)
    assert found.passed, str(found)
    return str(found)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_cpu_flash_attention_backward_is_within_the_exact_budget_as_math_is(
        dtype: str) -> None:
    """pytorch#133671: both backends' output and every gradient judged, none outside."""
    judged_case("pytorch#133671", dtype)


@pytest.mark.slow
@pytest.mark.parametrize(("report", "dtype"), [("pytorch#193061", "float32"),
                                               ("pytorch#168126", "bfloat16")])
def test_the_compiled_tracker_block_is_within_the_exact_budget(report: str,
                                                              dtype: str) -> None:
    """pytorch#193061 (the shared scale's gradient, the sum of every use) and #168126 (a
    compiled bfloat16 LayerNorm layer): every element of the compiled path judged."""
    judged_case(report, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_compiled_embedding_norm_linear_backward_is_within_the_exact_budget(
        dtype: str) -> None:
    """pytorch#136121: inductor's backward of Embedding, LayerNorm and Linear (the
    embedding's gradient summing repeated tokens' rows) judged against the exact answer."""
    judged_case("pytorch#136121", dtype)
