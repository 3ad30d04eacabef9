"""Whole models, built from tiny configs, for judging a model exactly layer by layer.

Why whole models beside the block recipes: a block recipe judges one residual layer alone,
handed what its model would compute for it (a rotary table, a causal mask); a model entry
judges the stack as the model runs it, so the stream between layers, the embeddings, the
final norm and a tied head are judged too (``resverify model``,
:mod:`resverify.blocks.exact_model`). Each entry says what its residual layers are (their
submodule paths, in model order), what the judged input is (the embeddings for a language
model: token ids are integers, which the exact judgement does not draw), the dtypes it
claims and the size knobs (:class:`Sizes`). Nothing is downloaded: every model is built
from a config, eager attention pinned and every dropout 0; ``transformers`` is imported
only when an entry is built.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resverify.spec.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["model_entry", "models"]

DTYPES = ("float32", "bfloat16")
"""The dtypes every model here claims (float64 works too, but says nothing a user ships)."""


@dataclass(frozen=True)
class Sizes:
    """The size knobs of a tiny model: ``hidden`` width, ``seq`` tokens (a ViT: patches, a
    square number), ``batch``, ``layers``, attention ``heads``, the MLP's ``intermediate``
    width (0: twice ``hidden``) and the ``vocab``."""

    hidden: int = 16
    seq: int = 4
    batch: int = 2
    layers: int = 2
    heads: int = 2
    intermediate: int = 0
    vocab: int = 32

    @property
    def mlp(self) -> int:
        return self.intermediate or 2 * self.hidden

    def checked(self) -> Sizes:
        """These sizes, or a UsageError naming the one that cannot build a model."""
        for knob in ("hidden", "seq", "batch", "layers", "heads", "vocab"):
            if getattr(self, knob) < 1:
                raise UsageError(f"--{knob} {getattr(self, knob)}: must be at least 1")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise UsageError(f"--hidden {self.hidden}: must be a multiple of twice the "
                             f"{self.heads} heads (each head's width even, for rotary)")
        return self


@dataclass(frozen=True)
class ModelEntry:
    """One model: how to build it and call it, and where its parts live.

    ``layers`` is the path of layer ``k`` (``model.layers.{k}``, formatted with ``k``);
    ``embeddings``, ``norm`` and ``head`` are the prefixes of the parameters before the
    layers, of the final norm and of the head (empty: none). ``example(sizes)`` is the
    judged input's shape; ``call(model, x)`` runs the model and returns its output tensor.
    """

    name: str
    build: Callable[[Sizes], nn.Module]
    call: Callable[[nn.Module, torch.Tensor], torch.Tensor]
    example: Callable[[Sizes], tuple[int, ...]]
    layers: str
    input: str
    embeddings: tuple[str, ...] = ()
    norm: tuple[str, ...] = ()
    head: tuple[str, ...] = ()
    extra_tokens: int = 0
    """Tokens the model adds to the ``seq`` it is given (a ViT's class token)."""
    fixed: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments the model is called with besides its input (no cache)."""
    dtypes: tuple[str, ...] = DTYPES
    sizes: Sizes = Sizes()
    notes: str = ""

    def layer_paths(self, sizes: Sizes) -> list[str]:
        """The residual layers' submodule paths, in model order."""
        return [self.layers.format(k) for k in range(sizes.layers)]

    def stream(self, sizes: Sizes) -> int:
        """Elements of the stream between two layers (batch x tokens x hidden)."""
        return sizes.batch * (sizes.seq + self.extra_tokens) * sizes.hidden


def _config(family: str, **fields: Any) -> Any:
    module = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    cls = next(getattr(module, n) for n in dir(module) if n.lower() == f"{family}config")
    return cls(attn_implementation="eager", **fields)


def _modeling(family: str, cls: str) -> Any:
    return getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"),
                   cls)


_NO_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def _llama(s: Sizes) -> nn.Module:
    cfg = _config("llama", vocab_size=s.vocab, hidden_size=s.hidden,
                  intermediate_size=s.mlp, num_hidden_layers=s.layers,
                  num_attention_heads=s.heads, num_key_value_heads=max(1, s.heads // 2),
                  tie_word_embeddings=True, attention_dropout=0.0, **_NO_TOKENS)
    model: nn.Module = _modeling("llama", "LlamaForCausalLM")(cfg)
    return model


def _gpt2(s: Sizes) -> nn.Module:
    cfg = _config("gpt2", vocab_size=s.vocab, n_embd=s.hidden, n_inner=s.mlp,
                  n_layer=s.layers, n_head=s.heads, n_positions=max(64, s.seq),
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **_NO_TOKENS)
    model: nn.Module = _modeling("gpt2", "GPT2LMHeadModel")(cfg)
    return model


VIT_EPS = 1e-6
"""The ViT's layer norm epsilon: the original ViT's and timm's (``ViTConfig``'s default,
1e-12, makes the norms' budgets so loose that the largest ``|error| / bound`` is about
1e-18 in float32: judged, but nearly nothing claimed)."""
PATCH = 4
"""A ViT's patch side (pixels); its image is ``sqrt(seq)`` patches on a side, 3 channels."""


def _side(s: Sizes) -> int:
    side = math.isqrt(s.seq)
    if side * side != s.seq:
        raise UsageError(f"--seq {s.seq}: a ViT's tokens are a square of patches (1, 4, 9 ...)")
    return side * PATCH


def _vit(s: Sizes) -> nn.Module:
    cfg = _config("vit", hidden_size=s.hidden, num_hidden_layers=s.layers,
                  num_attention_heads=s.heads, intermediate_size=s.mlp,
                  image_size=_side(s), patch_size=PATCH, num_channels=3,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  layer_norm_eps=VIT_EPS)
    model: nn.Module = _modeling("vit", "ViTModel")(cfg, add_pooling_layer=False)
    return model


def _embedded(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = model(inputs_embeds=x, use_cache=False).logits
    return out


def _pixels(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = model(pixel_values=x).last_hidden_state
    return out


_MODELS = (
    ModelEntry("hf.LlamaForCausalLM", _llama, _embedded,
               lambda s: (s.batch, s.seq, s.hidden), "model.layers.{}", "inputs_embeds",
               embeddings=("model.embed_tokens", "model.rotary_emb"), norm=("model.norm",),
               head=("lm_head",), fixed=(("use_cache", False),),
               notes="tied embeddings: lm_head.weight is model.embed_tokens.weight, judged "
                     "once (its gradient the head's, under the embeddings' row)"),
    ModelEntry("hf.GPT2LMHeadModel", _gpt2, _embedded,
               lambda s: (s.batch, s.seq, s.hidden), "transformer.h.{}", "inputs_embeds",
               embeddings=("transformer.wte", "transformer.wpe"), norm=("transformer.ln_f",),
               head=("lm_head",), fixed=(("use_cache", False),),
               notes="tied embeddings: lm_head.weight is transformer.wte.weight"),
    ModelEntry("hf.ViTModel", _vit, _pixels,
               lambda s: (s.batch, 3, _side(s), _side(s)), "layers.{}", "pixel_values",
               embeddings=("embeddings",), norm=("layernorm",), extra_tokens=1,
               notes="no pooler; the output is the last hidden state after the final norm; "
                     "layer norm epsilon 1e-6 (timm's), not ViTConfig's 1e-12"),
)


def models() -> Mapping[str, ModelEntry]:
    """Every model entry, by name (``transformers`` is needed only to build one)."""
    return {m.name: m for m in _MODELS}


def model_entry(name: str) -> ModelEntry:
    """The entry called ``name``; a UsageError names the known ones."""
    found = models()
    if name not in found:
        raise UsageError(f"no model {name!r}; known: {', '.join(found)}")
    return found[name]
