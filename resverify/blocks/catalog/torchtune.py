"""torchtune's ``TransformerSelfAttentionLayer`` with tanh gates as a block recipe.

Why this layer: torchtune assembles its layers from parts, and the one part no other catalog
block has is ``TanhGate`` (``x * self.scale.tanh()``, its one-element ``scale`` initialised to
0), the gate of Llama 3.2 Vision's fusion layers. With a gate on each sublayer (``sa_scale``,
``mlp_scale``) the layer computes ``h = tanh(g_1)·attn(sa_norm(x)) + x`` and ``h +
tanh(g_2)·mlp(mlp_norm(h))``; the recipe declares each gate with ``scale_fn="tanh"``, so the
gate law judges ``y(g) - x = tanh(g)·(y(20) - x)``, and, since the gates start at 0, the layer
as built is the identity (``zero_init`` names the factory).

How it is built: width 16, two query heads sharing one key/value head (grouped-query, as
Llama's), head dimension 8, rotary embeddings, RMSNorm, a SwiGLU feed-forward 32 wide, no
bias, dropout 0, no weight download; called without a mask, so the attention is causal (the
layer's default). torchtune's modules take no ``dtype=``, so the layer is built under torch's
default dtype set to the dtype checked (``_build.built_in``); its RoPE cache stays float32 (the
library builds it with ``.float()``) and its RMSNorm computes in float32 whatever the input's
dtype, as Hugging Face's does.

Why this module may be absent: ``import torchtune`` raises ImportError unless torchao is
installed too, and torchtune 0.6.1 needs ``torchao==0.13.0`` beside torch 2.13
(docs/blocks-install.md). ``torchtune`` is imported only when a factory runs; without it (or
without torchao) this module raises ImportError with the reason, which the catalog reports as
this source's skip.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

from resverify.blocks.catalog._build import built_in
from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

LIBRARY = "torchtune"
DIM, HEAD_DIM, HIDDEN = 16, 8, 32
_INSTALL = ("pip install -c constraints.txt 'resverify[blocks-torchtune]' adds torchtune 0.6.1 "
            "with torchao 0.13.0; see docs/blocks-install.md")


def import_problem() -> str | None:
    """Why torchtune's layer cannot be built here, or None when it can."""
    if importlib.util.find_spec(LIBRARY) is None:
        return f"torchtune is not installed: {_INSTALL}"
    if importlib.util.find_spec("torchao") is None:
        return f"torchtune is installed but torchao is not, and torchtune imports it: {_INSTALL}"
    return None


_PROBLEM = import_problem()
if _PROBLEM is not None:
    raise ImportError(_PROBLEM)
VERSION = importlib.metadata.version(LIBRARY)
"""The installed torchtune version (the catalog skips this module without it)."""


def _layer(dtype: torch.dtype) -> nn.Module:
    from torch import nn
    from torchtune.modules import (
        FeedForward,
        MultiHeadAttention,
        RMSNorm,
        RotaryPositionalEmbeddings,
        TanhGate,
        TransformerSelfAttentionLayer,
    )

    def build() -> nn.Module:
        attn = MultiHeadAttention(
            embed_dim=DIM, num_heads=2, num_kv_heads=1, head_dim=HEAD_DIM,
            q_proj=nn.Linear(DIM, 2 * HEAD_DIM, bias=False),
            k_proj=nn.Linear(DIM, HEAD_DIM, bias=False),
            v_proj=nn.Linear(DIM, HEAD_DIM, bias=False),
            output_proj=nn.Linear(2 * HEAD_DIM, DIM, bias=False),
            pos_embeddings=RotaryPositionalEmbeddings(HEAD_DIM, max_seq_len=64),
            max_seq_len=64, attn_dropout=0.0)
        mlp = FeedForward(gate_proj=nn.Linear(DIM, HIDDEN, bias=False),
                          down_proj=nn.Linear(HIDDEN, DIM, bias=False),
                          up_proj=nn.Linear(DIM, HIDDEN, bias=False))
        layer: nn.Module = TransformerSelfAttentionLayer(
            attn, mlp, sa_norm=RMSNorm(DIM, eps=1e-5), mlp_norm=RMSNorm(DIM, eps=1e-5),
            sa_scale=TanhGate(), mlp_scale=TanhGate())
        return layer
    return built_in(dtype, build)


def _attend(m: nn.Module, s: torch.Tensor, _ctx: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``sa_scale(attn(h, h))`` with ``h = sa_norm(s)``, as the layer's forward calls them."""
    h = m.get_submodule("sa_norm")(s)
    out: torch.Tensor = m.get_submodule("sa_scale")(m.get_submodule("attn")(h, h))
    return out


GATED = Recipe(
    name="torchtune.TransformerSelfAttentionLayer(TanhGate)",
    factory=_layer,
    sites=(Site("self-attention", _attend, zero=("sa_scale.scale",), norms=("sa_norm",),
                scale="sa_scale.scale", scale_init=0.0, scale_fn="tanh"),
           Site("mlp", ("mlp_norm", "mlp", "mlp_scale"), zero=("mlp_scale.scale",),
                norms=("mlp_norm",), scale="mlp_scale.scale", scale_init=0.0,
                scale_fn="tanh")),
    zero_init=_layer,
    library=LIBRARY,
    notes=("tanh(g1)·attn(sa_norm(x)) + x, then h + tanh(g2)·mlp(mlp_norm(h)); the gates start "
           "at 0, so the layer as built is the identity (zero_init); causal RoPE attention, "
           "RMSNorm in float32, SwiGLU"),
)

RECIPES: tuple[Recipe, ...] = (GATED,)
"""Every torchtune recipe, in the order the catalog lists them."""
