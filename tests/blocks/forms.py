"""The residual forms people ship, each as a correct block and a broken twin, built here.

Why built here: the libraries that ship these forms (litgpt, diffusers, x-transformers,
DeepNet-style code) pin other torch versions than ``constraints.txt``; each class below
copies the one line of its library that makes the form (cited in its docstring) around
torch's own layers, so the recipe a user writes for the real block is the recipe here.

:data:`FORMS` holds the correct blocks, which must pass every applicable law in every
dtype they claim; :data:`FORM_BUGS` the broken twins, each meant for one law
(:class:`tests.blocks.broken_blocks.Bug`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from resverify.blocks.recipe import Branch, Recipe, Site
from tests.blocks.broken_blocks import GAMMA_INIT, Bug

__all__ = ["FORMS", "FORM_BUGS"]

DIM, HIDDEN, OUT = 16, 32, 8
_Ctx = Mapping[str, torch.Tensor]


class Mlp(nn.Module):
    """``fc2(gelu(fc1(h)))``."""

    def __init__(self, dtype: torch.dtype, out: int = DIM) -> None:
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN, dtype=dtype)
        self.fc2 = nn.Linear(HIDDEN, out, dtype=dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(h)))


# ------------------------------------------------------------------------------------------
# exact=False: a fused add


class FusedScaleBlock(nn.Module):
    """``x + γ · MLP(LN(x))`` with the LayerScale fused into the add,
    ``torch.addcmul(x, MLP(LN(x)), γ)``: the sum is one call, not the recipe's two ops."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)
        self.gamma = nn.Parameter(torch.full((DIM,), GAMMA_INIT, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x, self.mlp(self.norm(x)), self.gamma)


class FusedScaleTwice(FusedScaleBlock):
    """The fused add given ``value=2``: the update counted twice."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x, self.mlp(self.norm(x)), self.gamma, value=2.0)


def _scaled_mlp(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, FusedScaleBlock)
    return m.mlp(m.norm(s)) * m.gamma


def fused_recipe(name: str, cls: type[FusedScaleBlock]) -> Recipe:
    site = Site("mlp", _scaled_mlp, ("gamma",), norms=("norm",), scale="gamma",
                scale_init=GAMMA_INIT, exact=False)
    return Recipe(name, cls, (site,), shape=("batch", "seq", DIM))


# ------------------------------------------------------------------------------------------
# parallel residual (GPT-J, GPT-NeoX, Falcon, PaLM; litgpt Block(parallel_residual=True))


class ParallelBlock(nn.Module):
    """litgpt's parallel residual, ``x = self.mlp(x_normed) + attention_output + x`` with
    ``x_normed = self.norm_2(x)`` (``shared_attention_norm=False``): both branches read
    the block's input, and the sum is taken in litgpt's order, not ``x + attn + mlp``."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm_1 = nn.LayerNorm(DIM, dtype=dtype)
        self.attn = nn.MultiheadAttention(DIM, 2, batch_first=True, dtype=dtype)
        self.norm_2 = nn.LayerNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)

    def attend(self, h: torch.Tensor) -> torch.Tensor:
        a = self.norm_1(h)
        return self.attn(a, a, a, need_weights=False)[0]

    def feed(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm_2(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attention_output = self.attend(x)
        return self.feed(x) + attention_output + x


class ParallelNormShared(ParallelBlock):
    """The MLP reads ``norm_1``'s output, ``norm_2`` built and never called (litgpt's
    ``shared_attention_norm`` taken where the checkpoint has two norms)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.norm_1(x)
        return self.mlp(a) + self.attn(a, a, a, need_weights=False)[0] + x


class ParallelInStreamOrder(ParallelBlock):
    """The same block summing ``x + attention_output + mlp``, that is ``(x + a) + m``:
    another order than the recipe's ``x + (a + m)``, so not the same float."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attend(x) + self.feed(x)


def _attend(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ParallelBlock)
    return m.attend(s)


def _feed(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ParallelBlock)
    return m.feed(s)


def parallel_recipe(name: str, cls: type[ParallelBlock], branch: Branch = _attend,
                    **fields: Any) -> Recipe:
    """One site, ``branch`` (the attention) beside ``_feed``, summed in any order; ``fields``
    add to the site (a LayerScale on the attention)."""
    site = Site("attention+mlp", branch, ("attn.out_proj.weight", "attn.out_proj.bias",
                                          "mlp.fc2.weight", "mlp.fc2.bias"),
                norms=("norm_1",), parallel=(_feed,), exact=False, **fields)
    return Recipe(name, cls, (site,), shape=("batch", "seq", DIM))


# ------------------------------------------------------------------------------------------
# skip scales: a parameter (x-transformers scale_residual), a constant (DeepNet)


class SkipScaledBlock(nn.Module):
    """x-transformers' ``Residual(scale_residual=True)``: ``residual = residual *
    self.residual_scale``, then ``x + residual`` with x the branch's output."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)
        self.residual_scale = nn.Parameter(torch.ones(DIM, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x * self.residual_scale
        return self.mlp(self.norm(x)) + residual


class SkipScaleAfterSum(SkipScaledBlock):
    """The scale applied to the sum, ``(x + F) * residual_scale``, not to the skip."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.mlp(self.norm(x))) * self.residual_scale


def _mlp(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, SkipScaledBlock | DeepNormBlock)
    return m.mlp(m.norm(s)) if isinstance(m, SkipScaledBlock) else m.mlp(s)


def skip_scaled_recipe(name: str, cls: type[SkipScaledBlock]) -> Recipe:
    site = Site("mlp", _mlp, ("mlp.fc2.weight", "mlp.fc2.bias"), norms=("norm",),
                skip_scale="residual_scale")
    return Recipe(name, cls, (site,), shape=("batch", "seq", DIM))


DEEPNET_ALPHA = (2 * 6) ** 0.25
"""DeepNet's encoder α for a 6-layer encoder, ``(2N)^(1/4)``: not a power of two."""


class DeepNormBlock(nn.Module):
    """DeepNet's post-norm DeepNorm, ``LN(α·x + G(x))``."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.mlp = Mlp(dtype)
        self.norm = nn.LayerNorm(DIM, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x * DEEPNET_ALPHA + self.mlp(x))


def deepnorm_recipe(name: str, cls: type[DeepNormBlock], exact: bool) -> Recipe:
    site = Site("mlp", _mlp, ("mlp.fc2.weight", "mlp.fc2.bias"), norm="post",
                norms=("norm",), skip_scale=DEEPNET_ALPHA, exact=exact)
    return Recipe(name, cls, (site,), shape=("batch", "seq", DIM))


# ------------------------------------------------------------------------------------------
# a post-scale of the sum (diffusers ResnetBlock2D's output_scale_factor)

SQRT2 = math.sqrt(2.0)


class PostScaledBlock(nn.Module):
    """diffusers' ``ResnetBlock2D`` tail, ``(self.conv_shortcut(input_tensor) +
    hidden_states) / self.output_scale_factor``, channels-last with a linear shortcut."""

    def __init__(self, dtype: torch.dtype, output_scale_factor: float = SQRT2) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype, OUT)
        self.conv_shortcut = nn.Linear(DIM, OUT, dtype=dtype)
        self.output_scale_factor = output_scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.conv_shortcut(x) + self.mlp(self.norm(x))) / self.output_scale_factor


class PostScaledTermByTerm(PostScaledBlock):
    """The same block dividing each term by c before adding them, ``shortcut(x)/c + F/c``:
    another rounding of the same computation, judged within its budget (``exact=False``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.output_scale_factor
        return self.conv_shortcut(x) / c + self.mlp(self.norm(x)) / c


class PostScaleOnBranch(PostScaledBlock):
    """The post-scale applied to the branch alone, ``shortcut(x) + F / c``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_shortcut(x) + self.mlp(self.norm(x)) / self.output_scale_factor


def _post_branch(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, PostScaledBlock)
    return m.mlp(m.norm(s))


def post_scaled_recipe(name: str, cls: type[PostScaledBlock], exact: bool = True,
                       c: float = SQRT2) -> Recipe:
    site = Site("resnet", _post_branch, ("mlp.fc2.weight", "mlp.fc2.bias"), norms=("norm",),
                shortcut="conv_shortcut", post_scale=c, exact=exact)
    return Recipe(name, lambda dtype: cls(dtype, c), (site,), shape=("batch", "seq", DIM))


# ------------------------------------------------------------------------------------------
# a multiplying post-scale (EDM's UNetBlock: ``x = x * self.skip_scale``, skip_scale =
# sqrt(0.5)), here with a LayerScale γ inside F so the γ law is judged on a scaled site

SKIP_SCALE = math.sqrt(0.5)
"""EDM's ``skip_scale``: ``np.sqrt(0.5)``, the float the block multiplies by (1/√2 rounded,
not √2 divided)."""


class PostMultipliedBlock(nn.Module):
    """EDM's ``UNetBlock`` tail, ``x = x.add_(orig); x = x * self.skip_scale``, around a
    pre-norm MLP with a LayerScale: ``(x + γ · MLP(LN(x))) * skip_scale``."""

    def __init__(self, dtype: torch.dtype, skip_scale: float = SKIP_SCALE) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)
        self.gamma = nn.Parameter(torch.full((DIM,), GAMMA_INIT, dtype=dtype))
        self.skip_scale = skip_scale

    def update(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x)) * self.gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.update(x)) * self.skip_scale


class PostMultipliedTermByTerm(PostMultipliedBlock):
    """The same block multiplying each term, ``x·m + (γF)·m``: another rounding of the same
    computation, judged within its budget (``exact=False``; bitwise at m = ½)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.skip_scale + self.update(x) * self.skip_scale


class PostFactorOnBranch(PostMultipliedBlock):
    """The factor applied to the update alone, ``x + γF·m``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.update(x) * self.skip_scale


class PostMultipliedGammaTwice(PostMultipliedBlock):
    """γ applied twice inside the update, ``γ·γ·MLP(LN(x))``: held, zeroed and decomposed
    right, and quadratic in γ."""

    def update(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x)) * self.gamma * self.gamma


def _multiplied_update(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, PostMultipliedBlock)
    return m.update(s)


def post_multiplied_recipe(name: str, cls: type[PostMultipliedBlock], exact: bool = True,
                           factor: float = SKIP_SCALE) -> Recipe:
    site = Site("mlp", _multiplied_update, ("mlp.fc2.weight", "mlp.fc2.bias"), norms=("norm",),
                scale="gamma", scale_init=GAMMA_INIT, post_factor=factor, exact=exact)
    return Recipe(name, lambda dtype: cls(dtype, factor), (site,), shape=("batch", "seq", DIM))


# ------------------------------------------------------------------------------------------
# a parallel residual with a LayerScale on one branch: the γ law beside another branch


class ParallelScaledBlock(ParallelBlock):
    """litgpt's parallel sum with a LayerScale on the attention branch, ``mlp(n2(x)) +
    γ·attn(n1(x)) + x``."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        self.gamma = nn.Parameter(torch.full((DIM,), GAMMA_INIT, dtype=dtype))

    def scaled_attend(self, h: torch.Tensor) -> torch.Tensor:
        return self.attend(h) * self.gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feed(x) + self.scaled_attend(x) + x


class ParallelGammaTwice(ParallelScaledBlock):
    """γ applied twice to the attention branch (a LayerScale in the sublayer and again in
    the block): quadratic in γ, every other law holds."""

    def scaled_attend(self, h: torch.Tensor) -> torch.Tensor:
        return self.attend(h) * self.gamma * self.gamma


def _scaled_attend(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ParallelScaledBlock)
    return m.scaled_attend(s)


def parallel_scaled_recipe(name: str, cls: type[ParallelScaledBlock]) -> Recipe:
    return parallel_recipe(name, cls, _scaled_attend, scale="gamma", scale_init=GAMMA_INIT)


# ------------------------------------------------------------------------------------------
# gates: x + tanh(g)·F (torchtune's TanhGate)


class TanhGate(nn.Module):
    """torchtune's ``TanhGate``: ``x * self.scale.tanh()``, ``scale`` a zero-initialised
    parameter of one element."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(1, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale.tanh()


class GatedLayer(nn.Module):
    """torchtune's gated ``TransformerSelfAttentionLayer``: ``h = self.sa_scale(attn_out) +
    x``, then ``h + self.mlp_scale(mlp_out)``, RMSNorm pre-norms and tanh gates, so the
    layer as built (gates at 0) is the identity."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.sa_norm = nn.RMSNorm(DIM, dtype=dtype)
        self.attn = nn.MultiheadAttention(DIM, 2, batch_first=True, dtype=dtype)
        self.sa_scale = TanhGate(dtype)
        self.mlp_norm = nn.RMSNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)
        self.mlp_scale = TanhGate(dtype)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        h = self.sa_norm(x)
        return self.sa_scale(self.attn(h, h, h, need_weights=False)[0])

    def feed(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp_scale(self.mlp(self.mlp_norm(h)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attend(x) + x
        return h + self.feed(h)


class _LinearGate(TanhGate):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class GateWithoutTanh(GatedLayer):
    """The MLP's gate multiplies by g, not tanh(g): zero at 0, the identity as built, and
    every sum decomposes (F is the gated update, whatever the gate computes)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        self.mlp_scale = _LinearGate(dtype)


def _gated_attend(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, GatedLayer)
    return m.attend(s)


def _gated_feed(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, GatedLayer)
    return m.feed(s)


def gated_recipe(name: str, cls: type[GatedLayer]) -> Recipe:
    sites = (Site("self-attention", _gated_attend, ("sa_scale.scale",), norms=("sa_norm",),
                  scale="sa_scale.scale", scale_init=0.0, scale_fn="tanh"),
             Site("mlp", _gated_feed, ("mlp_scale.scale",), norms=("mlp_norm",),
                  scale="mlp_scale.scale", scale_init=0.0, scale_fn="tanh"))
    return Recipe(name, cls, sites, shape=("batch", "seq", DIM), zero_init=cls)


# ------------------------------------------------------------------------------------------
# a float32 stream with half-precision sublayers read through a cast (Megatron
# fp32_residual_connection, Mamba residual_in_fp32)


class Fp32StreamLayer(nn.Module):
    """A Llama-style layer whose stream stays float32 while its sublayers, norms included,
    run in ``dtype``: each norm reads ``hidden.to(dtype)``, each update is added to the
    float32 residual (``residual + h`` promotes ``h`` exactly)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(DIM, dtype=dtype)
        self.self_attn = nn.MultiheadAttention(DIM, 2, batch_first=True, dtype=dtype)
        self.post_attention_layernorm = nn.RMSNorm(DIM, dtype=dtype)
        self.mlp = Mlp(dtype)
        self.branch_dtype = dtype

    def attend(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.input_layernorm(hidden.to(self.branch_dtype))
        return self.self_attn(h, h, h, need_weights=False)[0]

    def feed(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.post_attention_layernorm(hidden.to(self.branch_dtype)))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        residual = hidden
        hidden = residual + self.attend(hidden)
        residual = hidden
        return residual + self.feed(hidden)


class Fp32StreamDowncast(Fp32StreamLayer):
    """The stream stored in ``dtype`` between the sublayers (NVIDIA/Megatron-LM PR #3504):
    the first sum is cast down before the second sublayer reads it."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = (hidden + self.attend(hidden)).to(self.branch_dtype)
        return hidden + self.feed(hidden)


def _fp32_attend(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, Fp32StreamLayer)
    return m.attend(s)


def _fp32_feed(m: nn.Module, s: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, Fp32StreamLayer)
    return m.feed(s)


def fp32_stream_recipe(name: str, cls: type[Fp32StreamLayer]) -> Recipe:
    ends = ("self_attn.out_proj.weight", "self_attn.out_proj.bias")
    sites = (Site("self-attention", _fp32_attend, ends, norms=("input_layernorm",),
                  reads="cast"),
             Site("mlp", _fp32_feed, ("mlp.fc2.weight", "mlp.fc2.bias"),
                  norms=("post_attention_layernorm",), reads="cast"))
    return Recipe(name, cls, sites, shape=("batch", "seq", DIM),
                  dtypes=("float32", "bfloat16", "float16"), stream_dtype="float32")


FORMS: Mapping[str, Recipe] = {
    "fused_scale": fused_recipe("FusedScaleBlock", FusedScaleBlock),
    "parallel": parallel_recipe("ParallelBlock", ParallelBlock),
    "parallel_stream_order": parallel_recipe("ParallelInStreamOrder", ParallelInStreamOrder),
    "skip_scaled": skip_scaled_recipe("SkipScaledBlock", SkipScaledBlock),
    "deepnorm": deepnorm_recipe("DeepNormBlock", DeepNormBlock, True),
    "post_scaled": post_scaled_recipe("PostScaledBlock(c=√2)", PostScaledBlock),
    "post_scaled_term_by_term": post_scaled_recipe("PostScaledTermByTerm(c=√2)",
                                                   PostScaledTermByTerm, exact=False),
    "gated": gated_recipe("GatedLayer", GatedLayer),
    "fp32_stream": fp32_stream_recipe("Fp32StreamLayer", Fp32StreamLayer),
    "post_scaled_pow2": post_scaled_recipe("PostScaledTermByTerm(c=2)", PostScaledTermByTerm,
                                           exact=True, c=2.0),
    "post_multiplied": post_multiplied_recipe("PostMultipliedBlock(m=√½)", PostMultipliedBlock),
    "post_multiplied_term_by_term": post_multiplied_recipe(
        "PostMultipliedTermByTerm(m=√½)", PostMultipliedTermByTerm, exact=False),
    "post_multiplied_pow2": post_multiplied_recipe(
        "PostMultipliedTermByTerm(m=½)", PostMultipliedTermByTerm, exact=True, factor=0.5),
    "deepnorm_inexact": deepnorm_recipe("DeepNormBlock(exact=False)", DeepNormBlock, False),
    "parallel_scaled": parallel_scaled_recipe("ParallelScaledBlock", ParallelScaledBlock),
}
"""The correct blocks of each form: every applicable law passes in every claimed dtype."""

FORM_BUGS: Mapping[str, Bug] = {
    "fused_scale_twice": Bug(fused_recipe("FusedScaleTwice", FusedScaleTwice), "float32",
                             "decomposition"),
    "parallel_norm_shared": Bug(parallel_recipe("ParallelNormShared", ParallelNormShared),
                                "float32", "decomposition"),
    "skip_scale_after_sum": Bug(skip_scaled_recipe("SkipScaleAfterSum", SkipScaleAfterSum),
                                "float32", "decomposition"),
    "post_scale_on_branch": Bug(post_scaled_recipe("PostScaleOnBranch(c=√2)",
                                                   PostScaleOnBranch, exact=False),
                                "float32", "decomposition", ("zero_branch",),
                                "zeroed, the block is shortcut(x), not shortcut(x)/c"),
    "post_factor_on_branch": Bug(post_multiplied_recipe("PostFactorOnBranch(m=√½)",
                                                        PostFactorOnBranch),
                                 "float32", "decomposition", ("zero_branch", "affine_in_gamma"),
                                 "zeroed (the branch or γ), the block is x, not x·m"),
    "post_multiplied_gamma_twice": Bug(post_multiplied_recipe("PostMultipliedGammaTwice",
                                                              PostMultipliedGammaTwice),
                                       "float32", "affine_in_gamma"),
    "parallel_gamma_twice": Bug(parallel_scaled_recipe("ParallelGammaTwice", ParallelGammaTwice),
                                "float32", "affine_in_gamma"),
    "gate_without_tanh": Bug(gated_recipe("GateWithoutTanh", GateWithoutTanh), "float32",
                             "affine_in_gamma"),
    "fp32_stream_downcast": Bug(fp32_stream_recipe("Fp32StreamDowncast", Fp32StreamDowncast),
                                "bfloat16", "stream_dtype", ("decomposition", "zero_branch"),
                                "the sums are rounded to bfloat16, zeroed or not, where the "
                                "recipe composes float32 ones"),
}
"""Each form's broken twin, the law meant for it and the related laws that may fire."""
