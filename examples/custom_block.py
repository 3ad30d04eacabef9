"""A residual block of your own, its recipe, and the residual laws checked on it.

The block is written from scratch: a pre-norm MLP with a LayerScale γ,
``y = x + γ · MLP(LN(x))``. The recipe says where its parts live (the names of its own
submodules and parameters); :func:`resverify.blocks.check_block` does the rest. Run it::

    python examples/custom_block.py            # every claimed dtype, 5 examples per law
    python examples/custom_block.py 25         # more examples per law

docs/blocks.md walks through this file.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from resverify.blocks import LawRecord, Recipe, Site, check_block

DIM, HIDDEN, GAMMA = 16, 32, 1e-2


class LayerScale(nn.Module):
    """``x * γ``, one γ per channel, initialised to ``init``."""

    def __init__(self, dim: int, init: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class PreNormMLPBlock(nn.Module):
    """``y = x + γ · MLP(LN(x))`` on ``(batch, seq, dim)``."""

    def __init__(self, dim: int = DIM, hidden: int = HIDDEN, gamma: float = GAMMA,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, dtype=dtype)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden, dtype=dtype), nn.GELU(),
                                 nn.Linear(hidden, dim, dtype=dtype))
        self.ls = LayerScale(dim, gamma, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ls(self.mlp(self.norm(x)))


RECIPE = Recipe(
    name="example.PreNormMLPBlock",
    factory=lambda dtype: PreNormMLPBlock(dtype=dtype),
    sites=(Site("mlp", branch=("norm", "mlp", "ls"), zero=("ls.gamma",), norm="pre",
                norms=("norm",), scale="ls.gamma", scale_init=GAMMA),),
    shape=("batch", "seq", DIM),
    dtypes=("float64", "float32", "bfloat16", "float16"),
)


def main(argv: list[str] | None = None) -> int:
    """Check :data:`RECIPE` on every law, print one line per record; 1 if a law fails."""
    args = sys.argv[1:] if argv is None else argv
    examples = int(args[0]) if args else 5
    records: list[LawRecord] = check_block(RECIPE, max_examples=examples)
    for record in records:
        print(record.line())
    return 1 if any(r.verdict == "fail" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
