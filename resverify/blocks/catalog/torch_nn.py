"""PyTorch's own transformer layers as recipes: encoder and decoder, pre- and post-norm.

Why these sizes: d_model 16, 2 heads, a 32-wide feed-forward and dropout 0.0 are the smallest
that exercise every part (two heads, a real attention softmax, a hidden layer wider than the
stream), so a law's example costs a few milliseconds. ``batch_first=True`` so that the
stream's first dimension is the batch. The branches are written through the layers' public
submodules, in the order the layers' own ``forward`` calls them; under grad mode (the laws
run there) ``nn.TransformerEncoderLayer`` takes its ordinary path, not the fused inference
kernel (a later *paths* law compares the two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import torch
from torch import nn

from resverify.blocks.recipe import Recipe, Site

__all__ = []

D_MODEL, HEADS, FF = 16, 2, 32
_Ctx = Mapping[str, torch.Tensor]
_Branch = Callable[[nn.Module, torch.Tensor, _Ctx], torch.Tensor]


def _at(m: nn.Module, name: str) -> nn.Module:
    return m.get_submodule(name)


def activation(m: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The layer's activation: a function (``F.relu`` by default) or a module."""
    return cast(Callable[[torch.Tensor], torch.Tensor], m.activation)


def _normed(m: nn.Module, name: str, h: torch.Tensor, pre: bool) -> torch.Tensor:
    return _at(m, name)(h) if pre else h


def _self_attention(norm: str, pre: bool) -> _Branch:
    def branch(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
        a = _normed(m, norm, h, pre)
        return _at(m, "dropout1")(_at(m, "self_attn")(a, a, a, need_weights=False)[0])
    return branch


def _cross_attention(pre: bool) -> _Branch:
    def branch(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
        a, mem = _normed(m, "norm2", h, pre), ctx["memory"]
        attn = _at(m, "multihead_attn")(a, mem, mem, need_weights=False)[0]
        return _at(m, "dropout2")(attn)
    return branch


def _feed_forward(norm: str, dropout: str, pre: bool) -> _Branch:
    def branch(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
        a = _normed(m, norm, h, pre)
        inner = _at(m, "dropout")(activation(m)(_at(m, "linear1")(a)))
        return _at(m, dropout)(_at(m, "linear2")(inner))
    return branch


def _site(label: str, branch: _Branch, zero: str, norm: str, pre: bool) -> Site:
    return Site(label, branch, (f"{zero}.weight", f"{zero}.bias"),
                norm="pre" if pre else "post", norms=(norm,))


def encoder(pre: bool) -> Recipe:
    """``nn.TransformerEncoderLayer`` with ``norm_first=pre``."""
    return Recipe(
        name=f"torch.TransformerEncoderLayer({'pre' if pre else 'post'})",
        factory=lambda dtype: nn.TransformerEncoderLayer(
            D_MODEL, HEADS, FF, 0.0, batch_first=True, norm_first=pre, dtype=dtype),
        sites=(_site("self-attention", _self_attention("norm1", pre), "self_attn.out_proj",
                     "norm1", pre),
               _site("feed-forward", _feed_forward("norm2", "dropout2", pre), "linear2",
                     "norm2", pre)),
        shape=("batch", "seq", D_MODEL),
        notes="norm_first=True: x + SA(N1(x)), then + FF(N2(.)); False: N1(x + SA(x)), "
              "then N2(. + FF(.)), whose zero branch is N2(N1(x)), not N1(x)")


def decoder(pre: bool) -> Recipe:
    """``nn.TransformerDecoderLayer`` with ``norm_first=pre``; ``memory`` is drawn like x."""
    return Recipe(
        name=f"torch.TransformerDecoderLayer({'pre' if pre else 'post'})",
        factory=lambda dtype: nn.TransformerDecoderLayer(
            D_MODEL, HEADS, FF, 0.0, batch_first=True, norm_first=pre, dtype=dtype),
        sites=(_site("self-attention", _self_attention("norm1", pre), "self_attn.out_proj",
                     "norm1", pre),
               _site("cross-attention", _cross_attention(pre), "multihead_attn.out_proj",
                     "norm2", pre),
               _site("feed-forward", _feed_forward("norm3", "dropout3", pre), "linear2",
                     "norm3", pre)),
        shape=("batch", "seq", D_MODEL),
        context={"memory": ("batch", "seq", D_MODEL)},
        notes="three sites; the cross-attention reads memory, an extra input drawn like x")


RECIPES = (encoder(True), encoder(False), decoder(True), decoder(False))
