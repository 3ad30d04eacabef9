"""Recipes the exact section of the report is written for (no tests here): a small torch block
that passes, an MLP behind an affine LayerNorm whose bfloat16 ``addmm`` a planted kernel
breaks (:data:`tests.blocks.planted_kernels.NARROW_MM`, under
:class:`~tests.blocks.planted_kernels.Kernels`), and a block the IR cannot express.

``resverify blocks check --exact tests.reports.exact_recipes:RECIPES`` judges them.
"""

from __future__ import annotations

import torch
from torch import nn

from resverify.blocks import Recipe, Site
from tests.blocks.exact_modules import LinearMLP, mlp_recipe

WIDTH = 64


def _norm_mlp(dtype: torch.dtype) -> LinearMLP:
    """A ViT/BERT-style MLP behind an affine LayerNorm, the norm's weight and bias drawn."""
    norm = nn.LayerNorm(WIDTH)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return LinearMLP(WIDTH, nn.GELU(), norm).to(dtype)


def _mlp_branch(module: nn.Module, s: torch.Tensor, context: object) -> torch.Tensor:
    assert isinstance(module, LinearMLP)
    return module.fc2(module.act(module.fc1(module.norm(s))))


class CumsumBlock(nn.Module):
    """``y = x + cumsum(x) @ w``: a running sum, which the IR has no op for."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(width, width) * width ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1) @ self.w


def _cumsum_branch(module: nn.Module, s: torch.Tensor, context: object) -> torch.Tensor:
    assert isinstance(module, CumsumBlock)
    return module.branch(s)


PASSING = mlp_recipe("ResidualMLP", width=8)
NORM_MLP = Recipe(name="NormMLP", factory=_norm_mlp,
                  sites=(Site("mlp", _mlp_branch, zero=("fc2.weight", "fc2.bias"),
                              norms=("norm",)),),
                  shape=("batch", "seq", WIDTH), dtypes=("float32", "bfloat16"),
                  modes=("eval",))
CUMSUM = Recipe(name="CumsumBlock", factory=lambda dtype: CumsumBlock(8).to(dtype),
                sites=(Site("branch", _cumsum_branch, zero=("w",), norm="none"),),
                shape=("batch", 8), dtypes=("float64", "float32"), modes=("eval",))
RECIPES = [PASSING, NORM_MLP, CUMSUM]
"""For ``resverify blocks check --exact tests.reports.exact_recipes:RECIPES``."""
