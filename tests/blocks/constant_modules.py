"""Attention modules whose tables and masks are constants: the trace lifts them to inputs.

A causal self-attention masked by ``where`` with a triangular boolean mask, one masked by an
additive mask, one through ``scaled_dot_product_attention(is_causal=True)`` (a ``-inf`` mask
added to the scores), and a rotary embedding computed in ``forward`` from ``arange``,
``pow``, ``cos`` and ``sin``; each a residual ``x + F(x)``. ``WrongSideWhere`` is a planted bug: a
``where`` whose backward routes the cotangent to the side not selected (its forward right).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class WrongSideWhere(torch.autograd.Function):
    """``torch.where`` whose backward sends the cotangent to the side *not* selected."""

    @staticmethod
    def forward(ctx: Any, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                ) -> torch.Tensor:
        ctx.save_for_backward(mask)
        return torch.where(mask, a, b)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[None, torch.Tensor, torch.Tensor]:
        (mask,) = ctx.saved_tensors
        zero = torch.zeros_like(g)
        return None, torch.where(mask, zero, g), torch.where(mask, g, zero)


def _where(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, a, b)


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    return scores.softmax(-1)


class CausalAttention(nn.Module):
    """``x + softmax(mask(q kᵀ/√d)) v``: the scores above the diagonal replaced by
    ``finfo.min`` with ``where`` (``additive=False``, through ``select``: ``torch.where`` or
    the planted :class:`WrongSideWhere`), or ``mask_value`` added there (``additive=True``,
    through ``add``: ``torch.add`` or a planted one); the softmax through ``softmax``, the
    scores times ``scale``."""

    def __init__(self, width: int = 8, additive: bool = False, mask_value: float | None = None,
                 select: Any = _where, add: Any = torch.add, softmax: Any = _softmax,
                 scale: float = 1.0) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.additive, self.mask_value, self.select = additive, mask_value, select
        self.add, self.softmax, self.scale = add, softmax, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, width = x.shape[-2], x.shape[-1]
        scores = self.q(x) @ self.k(x).transpose(-1, -2) * (self.scale / width ** 0.5)
        fill = torch.finfo(x.dtype).min if self.mask_value is None else self.mask_value
        hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
        if self.additive:
            scores = self.add(scores, torch.zeros(n, n, dtype=x.dtype).masked_fill(hidden, fill))
        else:
            scores = self.select(~hidden, scores, torch.full((n, n), fill, dtype=x.dtype))
        return x + self.softmax(scores) @ self.v(x)


def leaky_mask_add(leak: float) -> Any:
    """``s + mask`` whose backward sends ``leak`` more to every masked score (where the
    softmax's gradient is exactly 0): a planted bug in the mask's gradient."""

    class LeakyMaskAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(mask)
            return scores + mask

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            (mask,) = ctx.saved_tensors
            return g + (mask != 0).to(g.dtype) * leak, None
    return LeakyMaskAdd.apply


def scaled_back_softmax(factor: float) -> Any:
    """``softmax(x, -1)`` whose backward is ``factor`` times the right one."""

    class ScaledBackSoftmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            y = x.softmax(-1)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (y,) = ctx.saved_tensors
            return y * (g - (g * y).sum(-1, keepdim=True)) * factor
    return ScaledBackSoftmax.apply


class Rotary(nn.Module):
    """``x + o(rope(q) · softmax-free rope(k))``-like: ``x + w_o(rope(w_q x))``, the rotary
    tables ``cos`` and ``sin`` of ``positions ⊗ base^(-2i/d)`` computed in ``forward`` in the
    input's dtype, applied as Llama applies them (``q cos + rotate_half(q) sin``)."""

    def __init__(self, width: int = 8, base: float = 10000.0) -> None:
        super().__init__()
        self.wq, self.wo = nn.Linear(width, width), nn.Linear(width, width)
        self.base = base

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, width = x.shape[-2], x.shape[-1]
        inv = 1.0 / self.base ** (torch.arange(0, width, 2, dtype=x.dtype) / width)
        angles = torch.outer(torch.arange(n, dtype=x.dtype), inv)
        angles = torch.cat([angles, angles], -1)
        q = self.wq(x)
        half = torch.cat([-q[..., width // 2:], q[..., : width // 2]], -1)
        return x + self.wo(q * angles.cos() + half * angles.sin())


class SdpaAttention(nn.Module):
    """``x + scaled_dot_product_attention(q(x), k(x), v(x), is_causal=True)`` over 2 heads:
    torch's attention decomposition fills the causal mask with ``-inf`` and adds it to the
    scores, which its masked-row guard (``eq(scores + mask, -inf)``) reads too; ``keep``, a
    boolean mask of the scores kept, in place of the causal one."""

    def __init__(self, width: int = 8, heads: int = 2, keep: torch.Tensor | None = None
                 ) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.heads, self.keep = heads, keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, width = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, width // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                             split(self.v(x)), attn_mask=self.keep,
                                             is_causal=self.keep is None)
        return x + out.transpose(1, 2).reshape(b, n, width)
