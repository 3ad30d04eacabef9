"""Wiring bugs planted in the second layer of tiny whole models, each beside its correct twin.

Why whole models: a wiring bug is a program the layer really computes, so the trace of the
model is faithful to it and the model's exact judgement passes it; it shows only as a
broken residual law of the layer it sits in, which the per-layer laws
(:mod:`resverify.blocks.model_layers`) must find at that layer and its op.

The forms:

- ``flax4567``: google/flax#4567, Gemma's residual paths wired wrongly: the norm meant for the
  attention output is applied to the residual sum, and that norm is fed onward as the stream
  (``h = norm2(x + attn(norm1(x)))``, then ``h + mlp(h)``).
- ``olmo680``: allenai/OLMo#680, "the attention norm was modifying the residual stream", so
  the residual add reads ``norm1(x)`` for ``x``: written here out of place, the attention
  norm's output taken as the stream (``residual = norm1(x)``), the effect of the in-place
  norm as a program.
- ``olmo680_inplace``: the same bug as an in-place norm, the attention pre-norm's result
  written into its input (``x.copy_(norm1(x))``); the layer's forward is the library's.

The first two are the layer's forward replaced on ``layers[1]`` only (Llama's
``LlamaDecoderLayer``, GPT-2's ``GPT2Block``), the third its pre-norm's (``input_layernorm``,
``ln_1``). Why both OLMo forms: the in-place one is what shipped, but its trace keeps an
``aten.copy`` (the write functionalized) that the IR refuses, and its eager backward would
be refused too where the norm saved its input; the out-of-place one is the program the
exact judgement can trace, and passes. The twin of each is the same hand-written forward
with the bug off (so the replacement itself is shown harmless), and the model untouched is
a third twin.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

FORMS = ("flax4567", "olmo680", "olmo680_inplace")
HIDDEN = 16
SEQ = 4
_TINY: dict[str, Any] = {"vocab_size": 32, "attn_implementation": "eager",
                         "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def _llama_forward(form: str | None) -> Callable[..., torch.Tensor]:
    """``LlamaDecoderLayer.forward`` (transformers 5) with ``form`` planted (None: the same
    forward, correct)."""
    def forward(self: Any, hidden_states: torch.Tensor, attention_mask: Any = None,
                position_ids: Any = None, cache: Any = None, use_cache: bool = False,
                position_embeddings: Any = None, **kwargs: Any) -> torch.Tensor:
        residual = hidden_states
        normed = self.input_layernorm(hidden_states)
        if form == "olmo680":
            residual = normed  # the attention norm's output taken as the stream
        attn, _ = self.self_attn(hidden_states=normed, attention_mask=attention_mask,
                                 position_ids=position_ids, cache=cache, use_cache=use_cache,
                                 position_embeddings=position_embeddings, **kwargs)
        hidden_states = residual + attn
        normed = self.post_attention_layernorm(hidden_states)
        residual = normed if form == "flax4567" else hidden_states  # the sum's norm onward
        out: torch.Tensor = residual + self.mlp(normed)
        return out
    return forward


def _gpt2_forward(form: str | None) -> Callable[..., torch.Tensor]:
    """``GPT2Block.forward`` (transformers 5, no cross-attention) with ``form`` planted."""
    def forward(self: Any, hidden_states: torch.Tensor, cache: Any = None,
                attention_mask: Any = None, encoder_hidden_states: Any = None,
                encoder_attention_mask: Any = None, use_cache: bool = False,
                **kwargs: Any) -> torch.Tensor:
        residual = hidden_states
        normed = self.ln_1(hidden_states)
        if form == "olmo680":
            residual = normed
        attn, _ = self.attn(normed, cache=cache, attention_mask=attention_mask,
                            use_cache=use_cache, **kwargs)
        hidden_states = attn + residual
        normed = self.ln_2(hidden_states)
        residual = normed if form == "flax4567" else hidden_states
        out: torch.Tensor = residual + self.mlp(normed)
        return out
    return forward


def _written_back(form: str | None) -> Callable[..., torch.Tensor]:
    """A norm's own forward whose result is written into its input where ``form`` is
    ``"olmo680_inplace"`` (the layer's ``residual`` is that input: the stream is
    overwritten); the twin returns the result alone."""
    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = type(self).forward(self, x)
        return x.copy_(out) if form == "olmo680_inplace" else out
    return forward


@dataclass(frozen=True)
class Family:
    """A tiny 2-layer model of one library family: how to build it, its layers' names, the
    catalog recipe name of its layer class, its layer's two norms (the attention's pre-norm
    and the one that reads the first sum) and the layer's hand-written forward."""

    name: str
    build: Callable[[], nn.Module]
    layers: tuple[str, ...]
    recipe: str
    norms: tuple[str, str]
    forward: Callable[[str | None], Callable[..., torch.Tensor]]

    def planted(self, model: nn.Module, form: str, planted: bool) -> None:
        """``form`` (or its twin, ``planted=False``) planted in ``model``'s second layer."""
        layer = model.get_submodule(self.layers[1])
        target, make = (layer.get_submodule(self.norms[0]), _written_back) \
            if form == "olmo680_inplace" else (layer, self.forward)
        target.forward = types.MethodType(make(form if planted else None), target)


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**_TINY, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, attention_dropout=0.0)
    return LlamaForCausalLM(cfg)


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**_TINY, n_embd=HIDDEN, n_layer=2, n_head=2, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


FAMILIES = {
    "llama": Family("llama", _llama, ("model.layers.0", "model.layers.1"),
                    "hf.LlamaDecoderLayer", ("input_layernorm", "post_attention_layernorm"),
                    _llama_forward),
    "gpt2": Family("gpt2", _gpt2, ("transformer.h.0", "transformer.h.1"), "hf.GPT2Block",
                   ("ln_1", "ln_2"), _gpt2_forward),
}


def model(family: str, form: str | None, planted: bool = True, seed: int = 0) -> nn.Module:
    """``family``'s tiny 2-layer model built under ``seed`` in eval mode, ``form`` planted
    in its second layer (``planted=False``: the same hand-written forward with the bug off,
    the twin; ``form=None``: the model untouched)."""
    chosen = FAMILIES[family]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = chosen.build().eval()
    if form is not None:
        chosen.planted(built, form, planted)
    return built


def inputs(seed: int = 1) -> dict[str, Any]:
    """The model's example inputs: ``inputs_embeds`` of batch 1 and sequence ``SEQ``."""
    gen = torch.Generator().manual_seed(seed)
    return {"inputs_embeds": torch.randn(1, SEQ, HIDDEN, generator=gen), "use_cache": False}


class Logits(nn.Module):
    """The model as one tensor function for the exact judgement: ``inputs_embeds`` to
    logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(inputs_embeds=embeds, use_cache=False).logits
        return logits
