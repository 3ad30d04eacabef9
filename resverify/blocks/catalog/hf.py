"""Hugging Face ``transformers`` layers as block recipes: Llama, Mistral, Qwen2, GPT-2, BERT,
ViT, T5.

Why these seven: they cover the three shapes a shipped transformer layer takes. Llama, Mistral
and Qwen2 are pre-norm decoder layers with an RMSNorm that computes in float32 whatever the
input's dtype; GPT-2 is pre-norm with LayerNorm and a ``Conv1D`` output projection (weight
stored transposed), and ViT's layer pre-norm with LayerNorm and attention both ways (the
layer of the catalog's ViT model, so ``resverify model`` runs its layer laws); BERT is
post-norm (each sum goes through its own LayerNorm, so a zeroed branch leaves
``LN2(LN1(x))``, not ``x``); T5's block clamps its stream between sites in float16 (the fix
for transformers#9295's overflow to inf), and its pretrained loader keeps the feed-forward
output projection ``wo`` in float32, which turns a float16 stream into a float32 one after
the first feed-forward sum (the ``T5Block(wo float32)`` recipe builds it that way).

How they are built: from tiny configs (hidden size 16, two heads, one layer), eager attention
pinned, every dropout probability 0 so a train-mode call is deterministic, and never a weight
download. A lone decoder layer is given what its model would compute for it: the rotary
position embedding of positions ``0..seq-1`` and a causal additive mask (without the mask a
lone layer attends both ways). ``transformers`` is imported only when a factory runs, so
listing the catalog stays cheap; without it the import of this module raises ImportError
with the reason, which the catalog reports as this source's skip.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from resverify.blocks.catalog.models import VIT_EPS
from resverify.blocks.recipe import Finding, Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

LIBRARY = "transformers"
HIDDEN = 16
"""The model width of every tiny config here."""
_TINY = {"vocab_size": 32, "num_hidden_layers": 1, "attn_implementation": "eager",
         "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}

if importlib.util.find_spec(LIBRARY) is None:
    raise ImportError("transformers is not installed: make blocks (or pip install "
                      "'resverify[blocks-hf]') adds it; see docs/blocks-install.md")
VERSION = importlib.metadata.version(LIBRARY)
"""The installed ``transformers`` version (the catalog skips this module without it)."""


def _modeling(family: str) -> Any:
    return importlib.import_module(f"transformers.models.{family}.modeling_{family}")


def _config(family: str, **fields: Any) -> Any:
    module = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    cls = next(getattr(module, n) for n in dir(module)
               if n.lower() == f"{family}config")
    return cls(**_TINY, **fields)


def causal_mask(x: torch.Tensor) -> torch.Tensor:
    """The additive ``(batch, 1, seq, seq)`` mask a decoder model hands its layers: 0 on and
    below the diagonal, the dtype's most negative finite value above it."""
    import torch

    n = x.shape[1]
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    mask = torch.zeros(n, n, dtype=x.dtype).masked_fill(above, torch.finfo(x.dtype).min)
    return mask.expand(x.shape[0], 1, n, n)


# -- pre-norm decoder layers with rotary embeddings: Llama, Mistral, Qwen2 -------------------

def _rotary(family: str, module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(cos, sin)`` of positions ``0..seq-1``, from the family's own rotary module."""
    import torch

    modeling = _modeling(family)
    cls = next(getattr(modeling, n) for n in dir(modeling) if n.endswith("RotaryEmbedding"))
    rope = cls(config=vars(module.get_submodule("self_attn"))["config"])
    positions = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
    return tuple(rope(x, positions))


def _decoder_kwargs(family: str, module: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    return {"attention_mask": causal_mask(x),
            "position_embeddings": _rotary(family, module, x)}


def _decoder_call(family: str) -> Callable[[nn.Module, torch.Tensor, Mapping[str, Any]],
                                           torch.Tensor]:
    def call(module: nn.Module, x: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
        return module(x, **_decoder_kwargs(family, module, x))
    return call


def _decoder_attention(family: str) -> Callable[[nn.Module, torch.Tensor, Mapping[str, Any]],
                                                torch.Tensor]:
    def branch(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
        normed = module.get_submodule("input_layernorm")(s)
        out, _weights = module.get_submodule("self_attn")(
            hidden_states=normed, **_decoder_kwargs(family, module, s))
        return out
    return branch


def _decoder_factory(family: str, layer: str) -> Callable[[torch.dtype], nn.Module]:
    def factory(dtype: torch.dtype) -> nn.Module:
        cfg = _config(family, hidden_size=HIDDEN, intermediate_size=32,
                      num_attention_heads=2, num_key_value_heads=1, attention_dropout=0.0)
        module: nn.Module = getattr(_modeling(family), layer)(cfg, layer_idx=0)
        return module.to(dtype)
    return factory


def _decoder(family: str, layer: str, notes: str) -> Recipe:
    return Recipe(
        name=f"hf.{layer}",
        factory=_decoder_factory(family, layer),
        sites=(
            Site("self_attn", _decoder_attention(family), zero=("self_attn.o_proj.weight",),
                 norms=("input_layernorm",)),
            Site("mlp", ("post_attention_layernorm", "mlp"), zero=("mlp.down_proj.weight",),
                 norms=("post_attention_layernorm",)),
        ),
        call=_decoder_call(family),
        notes=notes,
    )


_RMS_NOTE = ("RMSNorm casts its input to float32, normalizes, and casts back, in every "
             "dtype: float64 included, where it loses float64's precision inside F")


# -- GPT-2: pre-norm, LayerNorm, Conv1D projections ------------------------------------------

def _gpt2_factory(dtype: torch.dtype) -> nn.Module:
    cfg = _config("gpt2", n_embd=HIDDEN, n_head=2, n_positions=64, resid_pdrop=0.0,
                  embd_pdrop=0.0, attn_pdrop=0.0)
    module: nn.Module = _modeling("gpt2").GPT2Block(cfg, layer_idx=0)
    return module.to(dtype)


def _gpt2_attention(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, Any]
                    ) -> torch.Tensor:
    out, _weights = module.get_submodule("attn")(
        module.get_submodule("ln_1")(s), attention_mask=causal_mask(s))
    return out


def _gpt2_call(module: nn.Module, x: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
    return module(x, attention_mask=causal_mask(x))


GPT2 = Recipe(
    name="hf.GPT2Block",
    factory=_gpt2_factory,
    sites=(
        Site("attn", _gpt2_attention, zero=("attn.c_proj.weight", "attn.c_proj.bias"),
             norms=("ln_1",)),
        Site("mlp", ("ln_2", "mlp"), zero=("mlp.c_proj.weight", "mlp.c_proj.bias"),
             norms=("ln_2",)),
    ),
    call=_gpt2_call,
    notes="the sum is written attn(ln_1(x)) + x (F first); gelu_new is the tanh form",
)


# -- BERT: post-norm ---------------------------------------------------------------------------

def _bert_factory(dtype: torch.dtype) -> nn.Module:
    cfg = _config("bert", hidden_size=HIDDEN, num_attention_heads=2, intermediate_size=32,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    module: nn.Module = _modeling("bert").BertLayer(cfg)
    return module.to(dtype)


def _bert_attention(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, Any]
                    ) -> torch.Tensor:
    out, _weights = module.get_submodule("attention.self")(s)
    return module.get_submodule("attention.output.dense")(out)


BERT = Recipe(
    name="hf.BertLayer",
    factory=_bert_factory,
    sites=(
        Site("attention", _bert_attention,
             zero=("attention.output.dense.weight", "attention.output.dense.bias"),
             norm="post", norms=("attention.output.LayerNorm",)),
        Site("ffn", ("intermediate", "output.dense"),
             zero=("output.dense.weight", "output.dense.bias"),
             norm="post", norms=("output.LayerNorm",)),
    ),
    notes="post-norm: a zeroed branch leaves LN2(LN1(x)), which is not LN1(x) (LN∘LN ≠ LN)",
)


# -- ViT: pre-norm LayerNorm, bidirectional attention, GELU (erf) MLP --------------------------

def _vit_factory(dtype: torch.dtype) -> nn.Module:
    cfg = _config("vit", hidden_size=HIDDEN, num_attention_heads=2, intermediate_size=32,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  layer_norm_eps=VIT_EPS)  # the catalog ViT model's
    module: nn.Module = _modeling("vit").ViTLayer(cfg)
    return module.to(dtype)


def _vit_attention(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, Any]
                   ) -> torch.Tensor:
    out, _weights = module.get_submodule("attention")(module.get_submodule("layernorm_before")(s))
    return out


VIT = Recipe(
    name="hf.ViTLayer",
    factory=_vit_factory,
    sites=(
        Site("attention", _vit_attention, zero=("attention.o_proj.weight", "attention.o_proj.bias"),
             norms=("layernorm_before",)),
        Site("mlp", ("layernorm_after", "mlp"), zero=("mlp.fc2.weight", "mlp.fc2.bias"),
             norms=("layernorm_after",)),
    ),
    notes="bidirectional attention (no mask); layer norm epsilon 1e-6 (timm's), not "
          "ViTConfig's 1e-12",
)


# -- T5: pre-norm RMS (T5LayerNorm), float16 clamp between sites --------------------------------

def _t5_config() -> Any:
    return _config("t5", d_model=HIDDEN, d_kv=8, d_ff=32, num_heads=2, num_layers=1,
                   dropout_rate=0.0, feed_forward_proj="relu", is_decoder=False)


def _t5_factory(dtype: torch.dtype) -> nn.Module:
    module: nn.Module = _modeling("t5").T5Block(_t5_config(), has_relative_attention_bias=True,
                                               layer_idx=0)
    return module.to(dtype)


def _t5_wo_float32_factory(dtype: torch.dtype) -> nn.Module:
    """The block as ``from_pretrained`` loads it in half precision: every weight in
    ``dtype`` but the feed-forward's ``wo``, kept in float32 (``_keep_in_fp32_modules``)."""
    import torch

    module = _t5_factory(dtype)
    module.get_submodule("layer.1.DenseReluDense.wo").to(torch.float32)
    return module


def _t5_attention(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
    normed = module.get_submodule("layer.0.layer_norm")(s)
    return module.get_submodule("layer.0.SelfAttention")(normed)[0]


def _t5_call(module: nn.Module, x: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
    return module(x)[0]


_T5_SITES = (
    Site("self_attention", _t5_attention, zero=("layer.0.SelfAttention.o.weight",),
         norms=("layer.0.layer_norm",)),
    Site("ff", ("layer.1.layer_norm", "layer.1.DenseReluDense"),
         zero=("layer.1.DenseReluDense.wo.weight",), norms=("layer.1.layer_norm",)),
)

T5 = Recipe(
    name="hf.T5Block",
    factory=_t5_factory,
    sites=_T5_SITES,
    call=_t5_call,
    notes=("in float16 the block clamps its stream after each site to ±(max - 1000) when any "
           "element is inf, else to ±max (a finite stream passes unchanged)"),
)

_T5_FINDING = ("docs/findings/blocks-notes.md#5-t5-as-from_pretrained-loads-it-in-half-precision-"
               "carries-a-float32-stream")

T5_WO_FLOAT32 = Recipe(
    name="hf.T5Block(wo float32)",
    factory=_t5_wo_float32_factory,
    sites=_T5_SITES,
    call=_t5_call,
    dtypes=("bfloat16", "float16"),
    notes=("from_pretrained keeps wo in float32 in half precision: the feed-forward's update "
           "is float32, so the sum promotes the half-precision stream to float32"),
    findings={
        "zero_branch": Finding(
            "T5 keeps wo in float32 (_keep_in_fp32_modules), so a half-precision stream turns "
            "float32 after the feed-forward site: the zeroed block's output is x's values in "
            "float32", _T5_FINDING),
        "stream_dtype": Finding(
            "the same float32 wo: the stream leaves its half-precision dtype at the "
            "feed-forward site's exit", _T5_FINDING),
    },
)


RECIPES: tuple[Recipe, ...] = (
    _decoder("llama", "LlamaDecoderLayer", _RMS_NOTE),
    _decoder("mistral", "MistralDecoderLayer", _RMS_NOTE),
    _decoder("qwen2", "Qwen2DecoderLayer", _RMS_NOTE + "; q, k, v projections carry a bias"),
    GPT2,
    BERT,
    VIT,
    T5,
    T5_WO_FLOAT32,
)
"""Every Hugging Face recipe, in the order the catalog lists them."""
