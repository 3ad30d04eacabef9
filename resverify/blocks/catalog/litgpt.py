"""litgpt's ``Block`` as block recipes: the parallel residual of GPT-NeoX, and the sequential
pre-norm layer of Llama.

Why this block: litgpt's ``Block(parallel_residual=True)`` is the parallel residual GPT-J,
GPT-NeoX, Falcon and Pythia ship, ``x + attn(norm_1(x)) + mlp(norm_2(x))``: one residual sum
with two branches reading the same stream, which litgpt computes as
``mlp(norm_2(x)) + (attn(norm_1(x)) + x)``. The recipe declares the two branches (``branch``
and ``parallel``) and ``exact=False``: the sum is judged within the rounding budget of the
three-term sum in any order, each branch's magnitude counted. The same class with
``parallel_residual=False``, RMSNorm and the gated LLaMA MLP is a Llama layer: two sites, each
``x + F(norm(x))`` in that order, judged bitwise.

How they are built: a tiny config (16 wide, 2 heads, rotary embeddings on every head
dimension), ``Block(config, 0)``, on ``(batch, seq, 16)`` with both sizes drawn; no weight
download. litgpt's layers take no ``dtype=``, so each block is built under torch's default
dtype set to the dtype checked (``_build.built_in``). ``Block.forward`` also takes the rotary
tables ``cos`` and ``sin`` of the sequence length: the recipe computes them with litgpt's own
``build_rope_cache`` for the length it is given, in the block's dtype, as ``GPT.forward`` hands
them over (``mask=None``: causal attention). ``litgpt`` is imported only when a factory runs;
without it the import of this module raises ImportError with the reason, which the catalog
reports as this source's skip.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resverify.blocks.catalog._build import built_in
from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

LIBRARY = "litgpt"
WIDTH = 16
"""The embedding width (2 heads of 8)."""

if importlib.util.find_spec(LIBRARY) is None:
    raise ImportError("litgpt is not installed: make blocks adds it (pip install --no-deps "
                      "-c constraints.txt litgpt beside 'resverify[blocks-litgpt]'); see "
                      "docs/blocks-install.md")
VERSION = importlib.metadata.version(LIBRARY)
"""The installed litgpt version (the catalog skips this module without it)."""

_CONFIGS: Mapping[str, Mapping[str, Any]] = {
    "parallel": {"parallel_residual": True, "bias": True, "norm_class_name": "LayerNorm",
                 "mlp_class_name": "GptNeoxMLP", "intermediate_size": 4 * WIDTH},
    "llama": {"parallel_residual": False, "bias": False, "norm_class_name": "RMSNorm",
              "mlp_class_name": "LLaMAMLP", "intermediate_size": 2 * WIDTH},
}
"""Per form, the ``Config`` fields beyond the shared tiny sizes."""


def _block(dtype: torch.dtype, form: str) -> nn.Module:
    from litgpt.config import Config
    from litgpt.model import Block

    def build() -> nn.Module:
        config = Config(n_layer=1, n_head=2, n_embd=WIDTH, block_size=64,
                        padded_vocab_size=32, rotary_percentage=1.0, **_CONFIGS[form])
        block: nn.Module = Block(config, 0)
        return block
    return built_in(dtype, build)


def _rope(m: nn.Module, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` for ``s``'s length, ``(1, seq, rope_n_elem)`` in ``s``'s dtype."""
    from litgpt.model import build_rope_cache

    config: Any = m.config
    cos, sin = build_rope_cache(s.shape[1], config.rope_n_elem, device=s.device,
                                base=config.rope_base)
    return cos.unsqueeze(0).to(s.dtype), sin.unsqueeze(0).to(s.dtype)


def _attention(m: nn.Module, s: torch.Tensor, ctx: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``post_attention_norm(attn(norm_1(s), cos, sin))``, causal."""
    cos, sin = _rope(m, s)
    out: torch.Tensor = m.get_submodule("post_attention_norm")(
        m.get_submodule("attn")(m.get_submodule("norm_1")(s), cos, sin))
    return out


def _mlp(m: nn.Module, s: torch.Tensor, ctx: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``post_mlp_norm(mlp(norm_2(s)))``."""
    out: torch.Tensor = m.get_submodule("post_mlp_norm")(
        m.get_submodule("mlp")(m.get_submodule("norm_2")(s)))
    return out


def _call(m: nn.Module, x: torch.Tensor, ctx: Mapping[str, torch.Tensor]) -> torch.Tensor:
    cos, sin = _rope(m, x)
    out: torch.Tensor = m(x, cos, sin)
    return out


def _parallel() -> Recipe:
    zero = ("attn.proj.weight", "attn.proj.bias", "mlp.proj.weight", "mlp.proj.bias")
    return Recipe(
        name="litgpt.Block(parallel_residual)",
        factory=lambda dtype: _block(dtype, "parallel"),
        sites=(Site("attention+mlp", _attention, zero, norms=("norm_1",), parallel=(_mlp,),
                    exact=False),),
        shape=("batch", "seq", WIDTH),
        call=_call,
        library=LIBRARY,
        notes="x + attn(norm_1(x)) + mlp(norm_2(x)), computed as mlp(norm_2(x)) + "
              "(attn(norm_1(x)) + x): GPT-NeoX's parallel residual, LayerNorm, rotary",
    )


def _llama() -> Recipe:
    return Recipe(
        name="litgpt.Block(llama)",
        factory=lambda dtype: _block(dtype, "llama"),
        sites=(Site("attention", _attention, ("attn.proj.weight",), norms=("norm_1",)),
               Site("mlp", _mlp, ("mlp.proj.weight",), norms=("norm_2",))),
        shape=("batch", "seq", WIDTH),
        call=_call,
        library=LIBRARY,
        notes="h = x + attn(norm_1(x)); h + mlp(norm_2(h)): RMSNorm, the gated LLaMA MLP, "
              "rotary, no biases",
    )


RECIPES: tuple[Recipe, ...] = (_parallel(), _llama())
"""Every litgpt recipe, in the order the catalog lists them."""
