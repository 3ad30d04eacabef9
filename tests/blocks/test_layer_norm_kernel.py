"""torch's own CPU ``native_layer_norm`` in bfloat16 against the budget of ``layer_norm``
under the declared float32 accumulation (the statistics and the normalisation in float32,
one rounding; the backward from the mean and ``1/sqrt`` saved in bfloat16).

The kernel's forward is a float32 computation rounded once (bit for bit, here), and every
element of its output and input gradient is inside the declared budget, with room: the
largest ``|error| / bound`` is what docs/error-budget.md reports.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

EPS = 1e-5


def kernel(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's layer norm of the rows of ``x`` (no affine part) and its input gradient."""
    leaf = x.clone().requires_grad_(True)
    y = torch.nn.functional.layer_norm(leaf, (x.shape[-1],), eps=EPS)
    y.backward(g)
    assert leaf.grad is not None
    return y.detach(), leaf.grad


def drawn(seed: int, width: int, offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(8, width, generator=generator) + offset
    return x.to(torch.bfloat16), torch.randn(8, width, generator=generator).to(torch.bfloat16)


def worst_ratio(seed: int, width: int, offset: float) -> float:
    """The largest ``|error| / bound`` of torch's output and input gradient."""
    x, g = drawn(seed, width, offset)
    y, dx = kernel(x, g)
    program = Program((Input("x", tuple(x.shape)),),
                      (Node("y", "layer_norm", ("x",), eps=Fraction(EPS)),), "y")
    request = Request(program, {"x": x.float().numpy()}, "bfloat16", g.float().numpy(),
                      accumulate="float32")
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    worst = 0.0
    for have, want, bound in ((y, exact.output, budget.output),
                              (dx, exact.grads["x"], budget.grads["x"])):
        error = np.abs(have.float().numpy().astype(np.float64) - want.astype(np.float64))
        worst = max(worst, float((error / bound).max()))
    return worst


def test_the_forward_is_float32_rounded_once() -> None:
    x, g = drawn(0, 64, 1.5)
    f = x.float()
    mean = f.mean(-1, keepdim=True)
    r = 1 / torch.sqrt(((f - mean) ** 2).mean(-1, keepdim=True) + EPS)
    want = (f * r + (-r * mean)).to(torch.bfloat16)
    have = kernel(x, g)[0]
    same = (have.view(torch.int16) == want.view(torch.int16)).float().mean().item()
    assert same == 1.0, (f"{same:.4f} of the elements bit for bit, but should be all "
                         f"[native_layer_norm bfloat16 (8, 64), seed 0]")


@pytest.mark.parametrize("width", [16, 64])
@pytest.mark.parametrize("offset", [0.0, 1.5, 8.0])
def test_torch_layer_norm_is_inside_the_float32_statistics_budget(
        width: int, offset: float) -> None:
    for seed in range(4):
        worst = worst_ratio(seed, width, offset)
        assert worst < 1, (f"|error|/bound {worst!r}, but should be below 1 "
                           f"[native_layer_norm bfloat16 (8, {width}), offset {offset}, "
                           f"seed {seed}, accumulate=float32]")
