"""embedding: rows of a table gathered at constant indices, exactly; the VJP adds each
position's cotangent row into the row it read, and a row read k times is charged the
rounding of a sum of k parts. A transpose that overwrites instead of adding is caught by
the generic table tests (SymPy against the hand VJP; the budget against a reference whose
gradient is that wrong one)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE, Embedding, Sample
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import ArrayNamespace, Pullback, Site
from resverify.spec.rounding import Bound, Ctx, gamma
from tests.installed import skip_without_torch
from tests.spec.ops.op_checks import budget_check_catches, derivative_check_catches

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

REPEATED = Sample(((3, 2),), indices=(0, 2, 2, 2), index_shape=(2, 2))  # row 2 read 3 times
K = Params({"indices": (0, 2, 2, 2), "index_shape": (2, 2)})


def _overwritten(g: Any, table: tuple[int, ...], k: Params) -> Any:
    """The cotangent's rows put into the rows they read, the last one winning."""
    flat = np.asarray(g).reshape(len(k.ints("indices")), table[1])
    out = np.zeros_like(flat, shape=table)
    out[list(k.ints("indices"))] = flat
    return out


class OverwritesRepeatedRows(Embedding):
    """embedding whose transpose keeps one part of a row read several times."""

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        return (_overwritten(g, args[0].shape, k),)


class WrongReferenceGradient(Embedding):
    """embedding whose exact rules are right but whose reference gradient is
    :class:`OverwritesRepeatedRows`'."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        value, _ = super().numpy(args, alpha)
        return value, lambda g: (_overwritten(g, args[0].shape, alpha),)


def test_embedding_gathers_rows_and_its_vjp_adds_each_part_into_the_row_it_read() -> None:
    w = np.arange(6, dtype=object).reshape(3, 2)
    y = OP_TABLE["embedding"].exact([w], K)
    assert y.shape == (2, 2, 2) and y.tolist() == [[[0, 1], [4, 5]], [[4, 5], [4, 5]]]
    g = np.arange(8, dtype=object).reshape(2, 2, 2)
    (back,) = OP_TABLE["embedding"].exact_vjp(g, [w], y, K)
    expected = [[0, 1], [0, 0], [2 + 4 + 6, 3 + 5 + 7]]
    assert back.tolist() == expected, f"vjp(g)={back.tolist()}, but should be {expected}"


@pytest.mark.parametrize(("table", "indices", "index_shape"), [
    ((3, 2), (3,), (1,)), ((3, 2), (0, 1), (3,)), ((6,), (0,), (1,))])
def test_embedding_refuses_an_index_past_the_table_or_a_shape_that_does_not_hold_them(
        table: tuple[int, ...], indices: tuple[int, ...], index_shape: tuple[int, ...]
        ) -> None:
    with pytest.raises(ShapeMismatch, match="embedding: shape mismatch"):
        OP_TABLE["embedding"].shape([table], Params({"indices": indices,
                                                     "index_shape": index_shape}))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_row_read_k_times_is_charged_a_sum_of_k_parts_in_the_dtype_itself(
        dtype: str) -> None:
    """Row 2 (read 3 times) gets ``Σ e + gamma(2) Σ hat``; row 0 (read once) its cotangent
    row's own error; row 1 (never read) nothing (beyond the bound's own rounding up). The
    declared float32 accumulation is not used: torch adds the parts in the table's dtype
    (:func:`test_torch_adds_a_bfloat16_row_read_often_one_part_at_a_time`)."""
    c = Ctx.of(dtype, accumulate="float32" if dtype == "bfloat16" else None)
    w = np.zeros((3, 2), dtype=object)
    site = Site(K, (w,), (Fraction(0),), OP_TABLE["embedding"].exact([w], K), Fraction(0))
    g = Bound(np.full((2, 2, 2), 1.0), np.full((2, 2, 2), 0.25))
    a = Bound(np.zeros((3, 2)), np.zeros((3, 2)))
    (bound,) = OP_TABLE["embedding"].budget_vjp(c, site, [a], a, g)
    assert max(bound.mag[1].max(), bound.err[1].max()) < 2.0**-1000, bound.err
    assert bound.err[0].tolist() == pytest.approx([0.25, 0.25], rel=2.0**-40)
    summed = 3 * 0.25 + gamma(2, dtype) * 3 * 1.25
    assert bound.err[2].tolist() == pytest.approx([summed, summed], rel=2.0**-40)
    assert bound.err[2, 0] >= summed and bound.mag[2].tolist() == pytest.approx([3.0, 3.0])


def test_torch_bfloat16_embedding_gradient_of_a_row_read_often_is_within_the_budget() -> None:
    """``nn.functional.embedding``'s gradient in bfloat16, a row read 64 times: within
    the bound of a sum of 64 parts in bfloat16 of the exact sum."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.zeros(2, 4, dtype=torch.bfloat16, requires_grad=True)
    indices = torch.tensor([1] * 64)
    g = torch.randn(64, 4, generator=generator).to(torch.bfloat16)
    torch.nn.functional.embedding(indices, weight).backward(g)
    assert weight.grad is not None
    exact = g.double().sum(0)
    err = (weight.grad[1].double() - exact).abs()
    bound = gamma(63, "bfloat16") * g.double().abs().sum(0)
    assert bool((err <= bound).all()), f"error {err.tolist()}, bound {bound.tolist()}"
    assert weight.grad[0].abs().sum() == 0


def test_torch_adds_a_bfloat16_row_read_often_one_part_at_a_time() -> None:
    """torch's CPU embedding backward sums a row's 256 parts in bfloat16, one by one: its
    gradient is bitwise that sequential sum, and not the float32 sum rounded once."""
    weight = torch.zeros(2, 4, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(256, 4, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    torch.nn.functional.embedding(torch.tensor([1] * 256), weight).backward(g)
    assert weight.grad is not None
    sequential = torch.zeros(4, dtype=torch.bfloat16)
    for row in g:
        sequential = sequential + row
    assert torch.equal(weight.grad[1], sequential), (weight.grad[1], sequential)
    assert not torch.equal(weight.grad[1], g.float().sum(0).to(torch.bfloat16))


def test_a_transpose_that_overwrites_is_caught_by_the_sympy_derivative() -> None:
    derivative_check_catches("embedding", REPEATED, OverwritesRepeatedRows())


def test_a_reference_gradient_that_overwrites_is_caught_by_the_budget() -> None:
    budget_check_catches("embedding", REPEATED, WrongReferenceGradient())
