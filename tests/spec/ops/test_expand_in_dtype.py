"""expand_in_dtype: expand's values and derivatives, its gradient's budget that of a sum
made row by row in the tensor's own dtype: torch's CPU layer norm backward sums the weight's
and bias's gradients that way in bfloat16 (one buffer per thread), which the declared
float32 accumulation of expand's budget does not cover."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import Site
from resverify.spec.rounding import Bound, Ctx

torch = pytest.importorskip("torch")

ROWS, WIDTH = 16, 16


def _bias_gradient(threads: int, seed: int) -> tuple[Any, Any]:
    """(torch's bfloat16 layer norm bias gradient, the cotangent) on ``threads`` threads."""
    generator = torch.Generator().manual_seed(seed)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.randn(ROWS, WIDTH, generator=generator).to(torch.bfloat16)
        g = (1 + torch.rand(ROWS, WIDTH, generator=generator)).to(torch.bfloat16)
        norm = torch.nn.LayerNorm(WIDTH).to(torch.bfloat16)
        norm(x.requires_grad_()).backward(g)
    finally:
        torch.set_num_threads(before)
    return norm.bias.grad, g


def _per_thread_sums(g: Any, threads: int) -> Any:
    """Each thread's rows added one by one in bfloat16 (each sum made in float32 and
    rounded), then the threads' sums added in float32 and rounded once."""
    chunk = -(-ROWS // threads)
    total = torch.zeros(WIDTH)
    for t in range(threads):
        part = torch.zeros(WIDTH, dtype=torch.bfloat16)
        for row in g[t * chunk:(t + 1) * chunk]:
            part = (part.float() + row.float()).to(torch.bfloat16)
        total = total + part.float()
    return total.to(torch.bfloat16)


@pytest.mark.parametrize("threads", [1, 2])
def test_torch_sums_a_bfloat16_layer_norm_bias_gradient_row_by_row_per_thread(
        threads: int) -> None:
    """The bias gradient is bitwise the per-thread bfloat16 sums added in float32, and not
    the float32 sum of all rows rounded once (the declared accumulation's model)."""
    grad, g = _bias_gradient(threads, seed=0)
    emulated = _per_thread_sums(g, threads)
    assert torch.equal(grad, emulated), (
        f"torch.nn.LayerNorm bfloat16 bias grad on {threads} threads = {grad.tolist()}, but "
        f"the per-thread bfloat16 sums give {emulated.tolist()}")
    once = g.float().sum(0).to(torch.bfloat16)
    assert not torch.equal(grad, once), f"grad {grad.tolist()} is the float32 sum rounded once"


def _gradient_budgets(g: Any) -> tuple[np.ndarray, np.ndarray]:
    """The un-broadcast budgets of expand and expand_in_dtype for ``g`` (exact bfloat16
    values, no error of their own) under bfloat16 with float32 declared."""
    c = Ctx.of("bfloat16", "float32")
    values = g.double().numpy()
    k = Params({"shape": (ROWS, WIDTH)})
    at = Site(k, [np.zeros(WIDTH, dtype=object)], [Fraction(0)],
              np.zeros((ROWS, WIDTH), dtype=object), Fraction(0))
    bias = Bound(np.zeros(WIDTH), np.zeros(WIDTH))
    cotangent = Bound(np.abs(values), np.zeros_like(values))
    out = Bound(np.zeros((ROWS, WIDTH)), np.zeros((ROWS, WIDTH)))
    (wide,) = OP_TABLE["expand"].budget_vjp(c, at, [bias], out, cotangent)
    (own,) = OP_TABLE["expand_in_dtype"].budget_vjp(c, at, [bias], out, cotangent)
    return wide.err, own.err


def test_the_bias_gradient_error_is_within_the_in_dtype_budget_and_can_exceed_expands() -> None:
    """Over 20 drawn cotangents (all in [1, 2), so the partial sums grow) on 2 threads,
    every element of torch's bias gradient is within expand_in_dtype's budget, and some
    element is outside expand's (float32 accumulation and one rounding): the reason the
    layer norm's affine parts use it."""
    outside_wide = 0
    for seed in range(20):
        grad, g = _bias_gradient(2, seed)
        error = (grad.double() - g.double().sum(0)).abs().numpy()
        wide, own = _gradient_budgets(g)
        assert np.all(error <= own), (
            f"seed {seed}: |error| {error.tolist()} > expand_in_dtype budget {own.tolist()}")
        outside_wide += int(np.sum(error > wide))
    assert outside_wide > 0, "torch's bias gradient never left expand's float32 budget"


def test_without_a_wider_accumulation_the_budget_is_expands() -> None:
    """In float32 (nothing declared) the copies are summed in the dtype either way."""
    c = Ctx.of("float32")
    k = Params({"shape": (8, 3)})
    at = Site(k, [np.zeros(3, dtype=object)], [Fraction(0)], np.zeros((8, 3), dtype=object),
              Fraction(0))
    a, y = Bound(np.ones(3), np.zeros(3)), Bound(np.ones((8, 3)), np.zeros((8, 3)))
    g = Bound(np.full((8, 3), 2.0), np.full((8, 3), 1e-7))
    (wide,) = OP_TABLE["expand"].budget_vjp(c, at, [a], y, g)
    (own,) = OP_TABLE["expand_in_dtype"].budget_vjp(c, at, [a], y, g)
    assert np.array_equal(own.err, wide.err) and np.array_equal(own.mag, wide.mag), (own, wide)


def test_values_and_derivatives_are_expands() -> None:
    """The same forward and VJP on exact values: only the budget differs."""
    x = np.array([Fraction(1), Fraction(-3, 2)], dtype=object)
    k = Params({"shape": (3, 2)})
    y = OP_TABLE["expand_in_dtype"].exact([x], k)
    assert y.tolist() == OP_TABLE["expand"].exact([x], k).tolist(), y
    g = np.full((3, 2), Fraction(1, 3), dtype=object)
    (back,) = OP_TABLE["expand_in_dtype"].exact_vjp(g, [x], y, k)
    assert back.tolist() == [1, 1], f"vjp={back.tolist()}, but should be [1, 1]"
