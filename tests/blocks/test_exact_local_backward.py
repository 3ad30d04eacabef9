"""The backward kernels judged alone (:mod:`resverify.blocks.local_backward`): each
derivative kernel of a module's eager backward against its forward op's exact VJP on the
kernel's own recorded arguments, within that one op's budget.

Each kernel of :data:`~resverify.blocks.local_backward.KERNELS` runs in a small residual
block in float64, float32 and bfloat16: torch's own kernel passes with every element of its
result judged, and the same kernel with its result times ``1 + 2⁻¹⁰`` (in bfloat16 ``2⁻⁵``
to ``2⁻²``, :data:`OFF_BF16`; planted by a
dispatch mode entered before the recorder, as the planted-bug tests plant theirs) is out of
its budget, named with the submodule that ran its forward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from resverify.blocks.local_backward import KERNELS, Judged, Recorder, judge_backward
from tests.blocks.planted_kernels import Kernels
from tests.blocks.planted_layers import scaled

aten = torch.ops.aten
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
ACCUMULATE = {"bfloat16": "float32"}
OFF = {"float64": 2.0**-10, "float32": 2.0**-10}
"""The planted factor's offset: ``2⁻¹⁰`` in float64 and float32."""
OFF_BF16 = {"silu": 2.0**-5, "gelu": 2.0**-5, "gelu(tanh)": 2.0**-5, "relu": 2.0**-5,
            "tanh": 2.0**-3, "softmax": 2.0**-3, "softmax(masked -inf)": 2.0**-3,
            "layer_norm": 2.0**-3, "sigmoid": 2.0**-2}
"""In bfloat16 (rounding ``2⁻⁸``), the smallest power of two caught at seed 0: eight
roundings for the kernels that read only the forward's input (held to one rounding of the
float32 result); the kernels that read the forward's rounded result are held to the
dtype's per-op budget, which charges each step of the VJP a bfloat16 rounding (sigmoid's
``ḡ y (1 - y)`` about 5 times the error a bug of ``2⁻⁵`` makes), so their bugs are
``2⁻³`` and ``2⁻²`` here (docs/blocks.md, "Backward kernels judged alone")."""


class Residual(nn.Module):
    """``x + f(x W)``, ``f`` the module under test (its forward the kernel's)."""

    def __init__(self, f: nn.Module, width: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.f = f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(self.proj(x))


class Softmax(nn.Module):
    """A softmax over the last axis, with an additive mask of ``-inf`` where asked."""

    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.masked = masked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.masked:
            keep = torch.ones(x.shape[-2], x.shape[-1], dtype=torch.bool).tril()
            x = x.masked_fill(~keep, float("-inf"))
        return torch.softmax(x, dim=-1)


BLOCKS: dict[str, tuple[Callable[[], nn.Module], Any]] = {
    "silu": (nn.SiLU, aten.silu_backward.default),
    "gelu": (nn.GELU, aten.gelu_backward.default),
    "gelu(tanh)": (lambda: nn.GELU(approximate="tanh"), aten.gelu_backward.default),
    "sigmoid": (nn.Sigmoid, aten.sigmoid_backward.default),
    "tanh": (nn.Tanh, aten.tanh_backward.default),
    "relu": (nn.ReLU, aten.threshold_backward.default),
    "softmax": (lambda: Softmax(masked=False), aten._softmax_backward_data.default),
    "softmax(masked -inf)": (lambda: Softmax(masked=True),
                             aten._softmax_backward_data.default),
    "layer_norm": (lambda: nn.LayerNorm(16), aten.native_layer_norm_backward.default),
}


def _judged(name: str, dtype: str, planted: bool | None) -> list[Judged]:
    """The derivative kernels of ``name``'s block judged alone at seed 0 (``planted``:
    under the scaled kernel, or its twin; None: no dispatch mode but the recorder's)."""
    make, kernel = BLOCKS[name]
    kind = DTYPES[dtype]
    torch.manual_seed(0)
    block = Residual(make()).to(kind)
    x = torch.randn(2, 4, 16, dtype=torch.float64).to(kind).requires_grad_()
    g = torch.randn(2, 4, 16, dtype=torch.float64).to(kind)
    recorder = Recorder(block)
    if planted is None:
        with recorder:
            block(x).backward(g)
    else:
        off = OFF_BF16[name] if dtype == "bfloat16" else OFF[dtype]
        with Kernels(scaled(kernel, off)(planted), frozenset({kind})), recorder:
            block(x).backward(g)
    return judge_backward(recorder, dtype, ACCUMULATE.get(dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(BLOCKS))
def test_torch_derivative_kernels_are_within_their_one_op_budget(name: str, dtype: str) -> None:
    """Torch's own kernel: judged on every element (relu's exactly: its budget is 0),
    none outside."""
    found = _judged(name, dtype, planted=None)
    target = str(BLOCKS[name][1])
    mine = [j for j in found if j.target == target]
    assert len(mine) == 1, f"{[j.target for j in found]}, but should hold one {target}"
    judged = mine[0]
    sizes = {"layer_norm": 2 * 4 * 16 + 2 * 16}
    assert judged.elements == sizes.get(name, 2 * 4 * 16), (
        f"{judged.elements} elements judged, but should be every one [{name}, {dtype}]")
    assert judged.outside == 0, f"{judged} [{name}, {dtype}]"
    assert judged.module == "f", f"charged to {judged.module!r}, but should be 'f' [{name}]"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(BLOCKS))
def test_a_derivative_kernel_scaled_off_is_outside_its_budget_and_its_twin_is_not(
        name: str, dtype: str) -> None:
    """The kernel's result times ``1 + 2⁻¹⁰`` (in bfloat16 ``1 +`` :data:`OFF_BF16`) is
    caught; its twin (the same dispatch mode, torch's kernel) is not."""
    target = str(BLOCKS[name][1])
    for planted in (True, False):
        found = [j for j in _judged(name, dtype, planted) if j.target == target]
        assert len(found) == 1, [j.target for j in found]
        caught = found[0].outside > 0
        assert caught == planted, (
            f"{target} planted={planted}: {found[0].outside} elements outside (worst "
            f"{found[0].worst:.3g}), but should be {'some' if planted else 'none'} "
            f"[{name}, {dtype}]")


def test_every_kernel_of_the_table_is_tested() -> None:
    """Each derivative kernel the judgement knows has a block above."""
    tested = {kernel for _, kernel in BLOCKS.values()}
    assert tested == set(KERNELS), f"untested: {set(KERNELS) - tested}"
