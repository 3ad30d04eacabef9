"""Modules the exact judgement is proved on: a residual MLP the current IR ops cover, and
planted numeric bugs inside it that the structural block laws cannot see.

The bugs live in custom ``torch.autograd.Function`` s, as hand-written kernels do: the
trace reads their forward (``torch.export`` inlines it), the eager backward runs their own
``backward``. A backward off by a small factor keeps the forward bitwise; a forward constant
off by a little, with a backward written for the right constant, keeps the module's own
answers consistent with each other on every structural law.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from resverify.blocks import Recipe, Site

Activation = Callable[[torch.Tensor], torch.Tensor]
MatMul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

GELU_K = math.sqrt(2 / math.pi)
"""The constant of the tanh form of GELU (``gelu_new``)."""


class ResidualMLP(nn.Module):
    """``y = x + ½·(act(n(x) @ w1) @ w2)`` on 2-D ``x``: ``matmul`` (``torch.matmul``), the
    activation, a scalar multiply and ``+``; ``n`` is an optional norm."""

    def __init__(self, width: int, act: Activation = torch.tanh,
                 norm: nn.Module | None = None, seed: int = 0,
                 matmul: MatMul = torch.matmul) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        scale = width ** -0.5
        self.w1 = nn.Parameter(torch.randn(width, width, generator=generator) * scale)
        self.w2 = nn.Parameter(torch.randn(width, width, generator=generator) * scale)
        self.act = act
        self.norm = norm
        self.matmul = matmul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x if self.norm is None else self.norm(x)
        return x + 0.5 * self.matmul(self.act(self.matmul(h, self.w1)), self.w2)


class ResidualLinear(nn.Module):
    """``y = x + x @ w`` on 2-D ``x``, its product by ``matmul`` (``torch.matmul``)."""

    def __init__(self, width: int, seed: int = 0, matmul: MatMul = torch.matmul) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(width, width, generator=generator) * width ** -0.5)
        self.matmul = matmul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.matmul(x, self.w)


def tanh_with_backward(factor: float) -> Activation:
    """tanh whose hand-written backward is ``ḡ·(1 - y²)·factor`` (1: right)."""

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (y,) = ctx.saved_tensors
            slope = 1 - y * y
            return g * slope if factor == 1 else g * slope * factor

    apply: Activation = Tanh.apply
    return apply


def narrow_sum_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D operands, each product in float32 and every partial sum rounded to
    the operands' dtype: a kernel that accumulates in bfloat16."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for k in range(a.shape[1]):
        acc = (acc.float() + a[:, k:k + 1].float() * b[k:k + 1, :].float()).to(a.dtype)
    return acc


def matmul_with_backward(for_x: MatMul, for_w: MatMul = torch.matmul) -> MatMul:
    """``torch.matmul`` whose hand-written backward computes ``ḡ wᵀ`` with ``for_x`` and
    ``xᵀ ḡ`` with ``for_w`` (``torch.matmul``: right; :func:`narrow_sum_matmul`: a
    precision bug)."""

    class MatMulFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x, w)
            return torch.matmul(x, w)

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x, w = ctx.saved_tensors
            return for_x(g, w.T), for_w(x.T, g)

    apply: MatMul = MatMulFn.apply
    return apply


def gelu_tanh_with_constant(k: float) -> Activation:
    """GELU's tanh form with ``k`` in the forward (:data:`GELU_K`: right) and a backward
    written for :data:`GELU_K`: ``½x + ½x·tanh(k(x + 0.044715x³))``, written without adding
    a constant (``½x(1 + t)`` expanded)."""

    class Gelu(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            t = torch.tanh(k * (x + 0.044715 * x * x * x))
            return 0.5 * x + 0.5 * x * t

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            t = torch.tanh(GELU_K * (x + 0.044715 * x * x * x))
            inner = GELU_K * (x + 3 * 0.044715 * x * x * x)
            return g * (0.5 + 0.5 * t + 0.5 * inner * (1 - t * t))

    apply: Activation = Gelu.apply
    return apply


def branch(module: nn.Module, s: torch.Tensor, context: object) -> torch.Tensor:
    """The residual MLP's branch alone (before its ½), for a recipe's site."""
    assert isinstance(module, ResidualMLP)
    return torch.matmul(module.act(torch.matmul(s, module.w1)), module.w2)


def mlp_recipe(name: str, act: Activation = torch.tanh, width: int = 16,
               dtypes: tuple[str, ...] = ("float64", "float32")) -> Recipe:
    """A recipe of :class:`ResidualMLP` (2-D input, one site with α = ½, eval mode)."""
    return Recipe(name=name, factory=lambda dtype: ResidualMLP(width, act).to(dtype),
                  sites=(Site("mlp", branch, zero=("w2",), norm="none", alpha=0.5),),
                  shape=("batch", width), dtypes=dtypes, modes=("eval",))


def _shifted_tanh(h: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h + 0.1)


RECIPES = {
    "ResidualMLP": mlp_recipe("ResidualMLP"),
    "ResidualMLP(backward off)": mlp_recipe("ResidualMLP(backward off)",
                                            tanh_with_backward(1 + 2.0**-10)),
}
"""For ``resverify blocks check --exact tests.blocks.exact_modules:RECIPES``."""

SHIFTED = {"ResidualMLP(tanh(h + 0.1))": mlp_recipe("ResidualMLP(tanh(h + 0.1))", _shifted_tanh,
                                                   dtypes=("float32", "bfloat16"))}
"""A block traced in float32 (0.1 read in float32, as torch does) and refused in bfloat16
(whose op math is float32: no bfloat16 IR op adds the float32 0.1)."""


class LinearMLP(nn.Module):
    """``y = x + fc2(act(fc1(n(x))))`` with ``nn.Linear`` layers (bias on, each weight
    transposed by ``t`` and multiplied by ``addmm``; 3-D input through ``view``), ``n`` an
    optional norm: the MLP of a ViT or BERT layer."""

    def __init__(self, width: int, act: nn.Module, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.norm = norm if norm is not None else nn.Identity()
        self.fc1 = nn.Linear(width, 2 * width)
        self.act = act
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class GatedMLP(nn.Module):
    """Llama's MLP as a residual block: ``y = x + (silu(h W1) ⊙ (h W2)) W3``, ``h = n(x)``
    (``nn.RMSNorm`` by default, as Llama's pre-norm), bias-free ``nn.Linear`` layers."""

    def __init__(self, width: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.norm = norm if norm is not None else nn.RMSNorm(width, eps=1e-6)
        self.gate = nn.Linear(width, 2 * width, bias=False)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class HFRMSNorm(nn.Module):
    """Hugging Face's ``LlamaRMSNorm``, written as it is: the row upcast to float32, its mean
    square and ``rsqrt`` in float32, the normalised row cast back to the input's dtype and
    then scaled by the weight (``upcast=False``: all of it in the input's dtype)."""

    def __init__(self, width: int, eps: float = 1e-6, upcast: bool = True) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(5)
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(width, generator=generator))
        self.eps = eps
        self.upcast = upcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32) if self.upcast else x
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(x.dtype)


class UpcastOnlyWhenTraced(HFRMSNorm):
    """A planted precision bug: the trace sees the upcast (what the layer documents), the
    eager run computes the norm in the input's dtype, as a kernel that dropped the upcast."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.upcast = torch.compiler.is_exporting()
        return super().forward(x)
