"""Residual blocks built after public tracker reports of one path disagreeing with another.

Each is the smallest module of the shape the report describes, with no weights downloaded;
:func:`resverify.blocks.exact_paths.judge_paths` runs it on every path and judges each against
the same exact answer, so a disagreement is attributed to the path outside its budget
instead of being decided by taking eager as right. ``tools/tracker_paths.py`` runs them all.

- ``pytorch#193061``: ``torch.compile`` gradients of chained residual LayerNorm blocks whose
  LayerNorms share one scale and shift, reported off by up to ~1e6 relative (a regression
  between torch 2.9.1 and 2.10.0). The shared scale's gradient is the sum of every use.
- ``pytorch#133671``: the CPU flash kernel of scaled-dot-product attention, whose backward
  was reported to differ from the math backend's.
- ``pytorch#168126``: a compiled bfloat16 layer (LayerNorm then Linear, residual), 99.4 % of
  its elements reported mismatched against eager, bisected to the ``native_layer_norm``
  decomposition.
- ``pytorch#136121``: inductor's backward of Embedding, LayerNorm and Linear differed from
  eager's while the forward was bitwise (removing any one module made them agree); here the
  embedding's rows (at fixed tokens, some repeated, so its gradient sums rows) join the
  stream before the norm and the linear.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class SharedNormChain(nn.Module):
    """``x ← x + W_i · LN(x; γ, β)`` for ``depth`` blocks, every LN the same ``γ, β``."""

    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.gamma = nn.Parameter(1 + 0.1 * torch.randn(width))
        self.beta = nn.Parameter(0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:
            x = x + linear(F.layer_norm(x, x.shape[-1:], self.gamma, self.beta))
        return x


class SdpaBlock(nn.Module):
    """``x + O · sdpa(Q x, K x, V x)`` over ``heads`` heads (no mask)."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = (t.reshape(b, s, self.heads, w // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v)
        return x + self.out(a.transpose(1, 2).reshape(b, s, w))


class NormLinear(nn.Module):
    """``x + W · LN(x)``: the layer of the compiled-bfloat16 report."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.linear(self.norm(x))


class EmbNormLinear(nn.Module):
    """``h = x + E[t]``, ``h + W · LN(h)``: an embedding at fixed tokens ``t`` (each of
    ``vocab`` rows used, the first ones more than once), a LayerNorm and a Linear without
    bias, as in the report's ``EmbNormLinear``, at tiny sizes."""

    def __init__(self, width: int = 16, vocab: int = 5) -> None:
        super().__init__()
        self.vocab = vocab
        self.tok_embeddings = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.output = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = (torch.arange(x.shape[0] * x.shape[1]) % self.vocab).reshape(x.shape[:2])
        h = x + self.tok_embeddings(tokens)
        return h + self.output(self.norm(h))


@dataclass(frozen=True)
class Case:
    """A tracker report, its module and input shape, and the paths and dtypes it is about."""

    report: str
    module: type[nn.Module]
    shape: tuple[int, ...]
    paths: tuple[str, ...]
    dtypes: tuple[str, ...]


CASES = (
    Case("pytorch#193061", SharedNormChain, (2, 4, 16), ("compile",), ("float64", "float32")),
    Case("pytorch#133671", SdpaBlock, (2, 4, 16), ("sdpa-math", "sdpa-flash"),
         ("float64", "float32")),
    Case("pytorch#168126", NormLinear, (2, 4, 16), ("compile",), ("float32", "bfloat16")),
    Case("pytorch#136121", EmbNormLinear, (2, 4, 16), ("compile",), ("float32", "bfloat16")),
)
