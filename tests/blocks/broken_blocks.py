"""Blocks for proving the laws can fail: the real torch layers, each with one bug planted.

Why subclasses of the real classes: a bug planted on ``nn.TransformerEncoderLayer`` itself
(same submodules, same parameter names, same recipe) differs from the shipped block in one
line only, the line its bug class changes in the trackers (issue 26 lists them), so a law
that fires tells that line apart from everything else.

Five correct blocks come first, because ``torch.nn`` has neither LayerScale, drop path nor a
mixed-precision stream: :class:`ScaledEncoderLayer` (a ViT-style pre-norm layer with
LayerScale γ and per-sample drop path, as timm writes them) and
:class:`MixedStreamEncoderLayer` (a float32 stream whose branches run in bfloat16, as
``residual_in_fp32`` asks), and the encoder given a zero-init option (torch has none; it
zeroes each branch's last layer, weight and bias), and :class:`ProjectedReluBlock` (one
post-activation site with a projection shortcut, ResNet's form); :class:`ChannelScaledBlock`
(ConvNeXt's per-channel γ on an ``(N, C, H, W)`` map) makes a fifth. Every bug is a subclass
of one of them or of a torch layer.
:data:`BUGS` says which law each bug is meant for and which related laws may fire with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from resverify.blocks.catalog.torch_nn import D_MODEL, FF, HEADS, activation, decoder, encoder
from resverify.blocks.recipe import Branch, Recipe, Site

__all__ = ["BUGS", "CORRECT", "Bug"]

GAMMA_INIT = 1e-2
DROP = 0.25
_Ctx = Mapping[str, torch.Tensor]


class LayerScale(nn.Module):
    """``x * γ`` with γ a parameter initialised to ``init`` (timm's LayerScale)."""

    def __init__(self, dim: int, init: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Per-sample inverted drop path: a row is zeroed with probability ``drop_prob``, the
    kept rows are divided by the keep rate; the identity in eval or at probability 0."""

    def __init__(self, drop_prob: float, scale: bool = True) -> None:
        super().__init__()
        self.drop_prob = drop_prob
        self.scale = scale

    def mask(self, x: torch.Tensor) -> torch.Tensor:
        keep = 1.0 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.dim() - 1)
        m = x.new_empty(shape).bernoulli_(keep)
        return m.div_(keep) if keep > 0.0 and self.scale else m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return x
        return x * self.mask(x)


class ScaledEncoderLayer(nn.TransformerEncoderLayer):
    """Pre-norm ``nn.TransformerEncoderLayer`` with LayerScale and drop path on each branch:
    ``x + dp1(ls1(SA(N1 x)))``, then ``+ dp2(ls2(FF(N2 .)))``."""

    def __init__(self, dtype: torch.dtype, init: float = GAMMA_INIT, drop: float = DROP,
                 scale: bool = True) -> None:
        super().__init__(D_MODEL, HEADS, FF, 0.0, batch_first=True, norm_first=True,
                         dtype=dtype)
        self.ls1 = LayerScale(D_MODEL, init, dtype)
        self.ls2 = LayerScale(D_MODEL, init, dtype)
        self.drop_path1 = DropPath(drop, scale)
        self.drop_path2 = DropPath(drop, scale)

    def attend(self, h: torch.Tensor) -> torch.Tensor:
        a = self.norm1(h)
        return self.ls1(self.self_attn(a, a, a, need_weights=False)[0])

    def feed(self, h: torch.Tensor) -> torch.Tensor:
        inner = activation(self)(self.linear1(self.norm2(h)))
        return self.ls2(self.linear2(inner))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self.drop_path1(self.attend(src))
        return x + self.drop_path2(self.feed(x))


def _attend(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ScaledEncoderLayer | MixedStreamEncoderLayer)
    return m.attend(h)


def _feed(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ScaledEncoderLayer | MixedStreamEncoderLayer)
    return m.feed(h)


def scaled_recipe(name: str, cls: type[ScaledEncoderLayer]) -> Recipe:
    """The recipe of :class:`ScaledEncoderLayer` (and of its broken subclasses)."""
    def site(label: str, branch: Branch, n: int) -> Site:
        return Site(label, branch, (f"ls{n}.gamma",), norms=(f"norm{n}",),
                    scale=f"ls{n}.gamma", scale_init=GAMMA_INIT, drop_path=(f"drop_path{n}",))
    return Recipe(name, cls, (site("self-attention", _attend, 1), site("feed-forward", _feed, 2)),
                  shape=("batch", "seq", D_MODEL))


class MixedStreamEncoderLayer(nn.TransformerEncoderLayer):
    """Pre-norm layer whose stream and norms stay float32 while attention and feed-forward
    run in ``dtype`` (bfloat16): each branch casts its normalized input down and its update
    up, and the stream adds float32 to float32."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(D_MODEL, HEADS, FF, 0.0, batch_first=True, norm_first=True,
                         dtype=torch.float32)
        for part in (self.self_attn, self.linear1, self.linear2):
            part.to(dtype)
        self.branch_dtype = dtype

    def attend(self, h: torch.Tensor) -> torch.Tensor:
        a = self.norm1(h).to(self.branch_dtype)
        return self.self_attn(a, a, a, need_weights=False)[0].float()

    def feed(self, h: torch.Tensor) -> torch.Tensor:
        a = self.norm2(h).to(self.branch_dtype)
        return self.linear2(activation(self)(self.linear1(a))).float()

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self.attend(src)
        return x + self.feed(x)


def mixed_recipe(name: str, cls: type[MixedStreamEncoderLayer]) -> Recipe:
    """A float32 stream with bfloat16 branches."""
    sites = (Site("self-attention", _attend, ("self_attn.out_proj.weight",
                                              "self_attn.out_proj.bias"), norms=("norm1",)),
             Site("feed-forward", _feed, ("linear2.weight", "linear2.bias"), norms=("norm2",)))
    return Recipe(name, cls, sites, shape=("batch", "seq", D_MODEL), dtypes=("bfloat16",),
                  stream_dtype="float32")


class ProjectedReluBlock(nn.Module):
    """A post-activation block with a projection shortcut, as ResNet's downsampling blocks
    are: ``relu(proj(x) + fc2(relu(fc1(x))))``, from torch's own Linear layers (the torch.nn
    catalog has no such block; this one exercises the activation and shortcut parts)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc1 = nn.Linear(D_MODEL, FF, dtype=dtype)
        self.fc2 = nn.Linear(FF, 8, dtype=dtype)
        self.proj = nn.Linear(D_MODEL, 8, bias=False, dtype=dtype)
        self.act = nn.ReLU()

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x) + self.branch(x))


def _projected_branch(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ProjectedReluBlock)
    return m.branch(h)


def projected_recipe(name: str, cls: type[ProjectedReluBlock]) -> Recipe:
    """One site, no norm, a projection shortcut and a ReLU after the sum."""
    site = Site("block", _projected_branch, ("fc2.weight", "fc2.bias"), norm="none",
                shortcut="proj", activation="relu")
    return Recipe(name, cls, (site,), shape=("batch", "seq", D_MODEL))


CHANNELS = 4
""":class:`ChannelScaledBlock`'s channels; its maps are ``CHANNELS`` square, so a γ broadcast
over the last dimension (the width) runs without error: the bug planted on it."""


class ChannelScaledBlock(nn.Module):
    """ConvNeXt's form on an ``(N, C, H, W)`` map, from torch's own layers:
    ``x + drop_path(pw(relu(dw(x))) · γ)`` with γ per channel (dimension 1)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dw = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1, groups=CHANNELS, dtype=dtype)
        self.pw = nn.Conv2d(CHANNELS, CHANNELS, 1, dtype=dtype)
        self.gamma = nn.Parameter(torch.full((CHANNELS,), GAMMA_INIT, dtype=dtype))
        self.drop_path = DropPath(DROP)

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return h.mul(self.gamma.reshape(1, -1, 1, 1))

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.pw(torch.relu(self.dw(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.branch(x))


def _channel_branch(m: nn.Module, h: torch.Tensor, ctx: _Ctx) -> torch.Tensor:
    assert isinstance(m, ChannelScaledBlock)
    return m.branch(h)


def channel_recipe(name: str, cls: type[ChannelScaledBlock]) -> Recipe:
    """One site, no norm, γ along dimension 1 of a square ``(N, C, C, C)`` map."""
    site = Site("block", _channel_branch, ("gamma",), norm="none", scale="gamma",
                scale_init=GAMMA_INIT, scale_axis=1, drop_path=("drop_path",))
    return Recipe(name, cls, (site,), shape=("batch", CHANNELS, CHANNELS, CHANNELS))


# ------------------------------------------------------------------------------------------
# the bugs

def _pre_encoder(dtype: torch.dtype) -> dict[str, Any]:
    return {"d_model": D_MODEL, "nhead": HEADS, "dim_feedforward": FF, "dropout": 0.0,
            "batch_first": True, "norm_first": True, "dtype": dtype}


class NormalizedSkip(nn.TransformerEncoderLayer):
    """The skip carries the normalized input: ``N1(x) + SA(N1(x))`` (pytorch/pytorch#61165)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        h = self.norm1(src)
        x = h + self._sa_block(h, None, None)
        return x + self._ff_block(self.norm2(x))


class WrongNormReused(nn.TransformerEncoderLayer):
    """The first norm reused for the second branch, ``norm2`` never called
    (ml-explore/mlx#1636)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self._sa_block(self.norm1(src), None, None)
        return x + self._ff_block(self.norm1(x))


class SeveredCrossAttention(nn.TransformerDecoderLayer):
    """The decoder's cross-attention replaces the stream instead of adding to it
    (ml-explore/mlx PR #3382)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, *args: object,
                **kwargs: object) -> torch.Tensor:
        x = tgt + self._sa_block(self.norm1(tgt), None, None)
        x = self._mha_block(self.norm2(x), memory, None, None)
        return x + self._ff_block(self.norm3(x))


class DetachedSkip(nn.TransformerEncoderLayer):
    """The first skip is detached: the forward is exact, the identity's gradient is gone."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src.detach() + self._sa_block(self.norm1(src), None, None)
        return x + self._ff_block(self.norm2(x))


class OffWhenBatchIsThree(nn.TransformerEncoderLayer):
    """Right except on a batch of three rows, whose output is shifted by 1: the
    decomposition fails on some examples only, so the laws that presume it judge the rest."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out = super().forward(src)
        return out + 1 if src.shape[0] == 3 else out


class InPlaceInput(nn.TransformerEncoderLayer):
    """A "memory saving" in-place add when no gradient is asked of the input: the caller's
    tensor becomes the block's first sum (iduta/iresnet PR #2, an in-place ReLU on the
    identity)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**_pre_encoder(dtype))

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        update = self._sa_block(self.norm1(src), None, None)
        x = src + update if src.requires_grad else src.add_(update)
        return x + self._ff_block(self.norm2(x))


class InPlaceReluIdentity(ProjectedReluBlock):
    """An in-place ReLU on the input before the branch: the identity it projects is relu(x),
    and the caller's tensor is changed (iduta/iresnet PR #2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if x.requires_grad else torch.relu_(x)
        return torch.relu(self.proj(identity) + self.branch(x))


class GammaIgnoresInit(ScaledEncoderLayer):
    """LayerScale's γ starts at 1 whatever ``init_values`` says
    (huggingface/pytorch-image-models PR #2605, a regression)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        with torch.no_grad():
            self.ls1.gamma.fill_(1.0)
            self.ls2.gamma.fill_(1.0)


class GammaAlongWidth(ChannelScaledBlock):
    """γ per channel applied as a channels-last LayerScale (``h * gamma``) to an
    ``(N, C, H, W)`` map: it scales the width, and runs because the map is C wide (code
    ported from channels-last without ConvNeXt's ``gamma.reshape(1, -1, 1, 1)``)."""

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        return h * self.gamma


class SharedDropMask(ScaledEncoderLayer):
    """One drop-path mask drawn per call and applied to both branches (DINOv2-derived
    blocks)."""

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        if not self.training or self.drop_path1.drop_prob == 0.0:
            return super().forward(src)
        mask = self.drop_path1.mask(src)
        x = src + self.attend(src) * mask
        return x + self.feed(x) * mask


class SecondDropPathDead(ScaledEncoderLayer):
    """The first drop-path module applied to both branches, ``drop_path2`` built and never
    called (DINOv2-derived blocks): each branch draws its own mask at the same rate, so with
    the two rates equal, as timm builds them, every row and rate looks right."""

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self.drop_path1(self.attend(src))
        return x + self.drop_path1(self.feed(x))


class DropPathScaleDead(ScaledEncoderLayer):
    """Drop path's rescaling dead: kept rows are not divided by the keep rate, so train and
    eval disagree on average (mosaicml/composer#372)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype, scale=False)


class Bf16StreamDowncast(MixedStreamEncoderLayer):
    """The float32 stream stored in bfloat16 between the sites (NVIDIA/Megatron-LM PR #3504)."""

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = (src + self.attend(src)).to(self.branch_dtype)
        return x + self.feed(x)


class FusedNormsRepeated(nn.TransformerEncoderLayer):
    """A post-norm layer whose own inference fast path (eval, no grad) calls torch's fused
    kernel with ``norm1``'s weight and bias in ``norm2``'s place, a copy-paste slip in a
    20-argument call: eager and every eager law see the right layer, inference does not."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(**{**_pre_encoder(dtype), "norm_first": False})

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        if self.training or torch.is_grad_enabled():
            return super().forward(src)
        sa, n1 = self.self_attn, self.norm1
        return torch._transformer_encoder_layer_fwd(
            src, sa.embed_dim, sa.num_heads, sa.in_proj_weight, sa.in_proj_bias,
            sa.out_proj.weight, sa.out_proj.bias, self.activation_relu_or_gelu == 2,
            self.norm_first, n1.eps, n1.weight, n1.bias, n1.weight, n1.bias,
            self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias,
            None, None)


def zero_init(names: tuple[str, ...]) -> Callable[[torch.dtype], nn.Module]:
    """A pre-norm encoder factory with a zero-init option that zeroes ``names``."""
    def factory(dtype: torch.dtype) -> nn.Module:
        layer = nn.TransformerEncoderLayer(**_pre_encoder(dtype))
        with torch.no_grad():
            for name in names:
                layer.get_parameter(name).zero_()
        return layer
    return factory


_ENDS = ("self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear2.weight",
         "linear2.bias")


@dataclass(frozen=True)
class Bug:
    """A planted bug: its recipe, the dtype it is checked in, the law meant to catch it,
    and the related laws that may fire too (with why)."""

    recipe: Recipe
    dtype: str
    meant: str
    also: tuple[str, ...] = ()
    why: str = ""
    paths: tuple[str, ...] = ()
    """The paths the checker is asked to judge besides eager (``check_block(paths=...)``)."""


def _encoder_like(name: str, cls: type[nn.Module]) -> Recipe:
    from dataclasses import replace

    return replace(encoder(True), name=name, factory=cls)


def _post_encoder_like(name: str, cls: type[nn.Module]) -> Recipe:
    from dataclasses import replace

    return replace(encoder(False), name=name, factory=cls)


def _decoder_like(name: str, cls: type[nn.Module]) -> Recipe:
    from dataclasses import replace

    return replace(decoder(True), name=name, factory=cls)


def _zero_init_recipe(name: str, names: tuple[str, ...]) -> Recipe:
    from dataclasses import replace

    return replace(encoder(True), name=name, zero_init=zero_init(names))


CORRECT: Mapping[str, Recipe] = {
    "projected_relu": projected_recipe("ProjectedReluBlock", ProjectedReluBlock),
    "zero_init": _zero_init_recipe("ZeroInitEncoderLayer", _ENDS),
    "scaled": scaled_recipe("ScaledEncoderLayer", ScaledEncoderLayer),
    "mixed": mixed_recipe("MixedStreamEncoderLayer", MixedStreamEncoderLayer),
    "channel_scaled": channel_recipe("ChannelScaledBlock", ChannelScaledBlock),
}
"""The correct test blocks: they must pass every law."""

BUGS: Mapping[str, Bug] = {
    "zero_init_keeps_bias": Bug(_zero_init_recipe("ZeroInitKeepsBias", _ENDS[::2]), "float32",
                                "zero_branch"),
    "normalized_skip": Bug(_encoder_like("NormalizedSkip", NormalizedSkip), "float32",
                           "decomposition", ("zero_branch",),
                           "zeroed, the block is N1(x), not x"),
    "wrong_norm_reused": Bug(_encoder_like("WrongNormReused", WrongNormReused), "float32",
                             "decomposition"),
    "severed_cross_attention": Bug(_decoder_like("SeveredCrossAttention",
                                                 SeveredCrossAttention), "float32",
                                   "decomposition", ("zero_branch",),
                                   "zeroed, the cross-attention site returns 0, not x"),
    "detached_skip": Bug(_encoder_like("DetachedSkip", DetachedSkip), "float32",
                         "gradient_skip", ("zero_branch",),
                         "zeroed, x̄ = ȳ is the skip's gradient alone"),
    "in_place_input": Bug(_encoder_like("InPlaceInput", InPlaceInput), "float32",
                          "no_aliasing"),
    "in_place_relu_identity": Bug(projected_recipe("InPlaceReluIdentity", InPlaceReluIdentity),
                                  "float32", "no_aliasing", ("decomposition",),
                                  "the identity the block adds is relu(x), not x"),
    "gamma_ignores_init": Bug(scaled_recipe("GammaIgnoresInit", GammaIgnoresInit), "float32",
                              "affine_in_gamma"),
    "gamma_along_width": Bug(channel_recipe("GammaAlongWidth", GammaAlongWidth), "float32",
                             "affine_in_gamma"),
    "shared_drop_mask": Bug(scaled_recipe("SharedDropMask", SharedDropMask), "float32",
                            "drop_path"),
    "second_drop_path_dead": Bug(scaled_recipe("SecondDropPathDead", SecondDropPathDead),
                                 "float32", "drop_path"),
    "drop_path_scale_dead": Bug(scaled_recipe("DropPathScaleDead", DropPathScaleDead),
                                "float32", "drop_path"),
    "bf16_stream_downcast": Bug(mixed_recipe("Bf16StreamDowncast", Bf16StreamDowncast),
                                "bfloat16", "stream_dtype", ("decomposition", "zero_branch"),
                                "the sums themselves are rounded to bfloat16, zeroed or not"),
    "fused_norms_repeated": Bug(_post_encoder_like("FusedNormsRepeated", FusedNormsRepeated),
                                "float32", "paths", paths=("fastpath",)),
}
"""Every planted bug, by name."""

BUG_RECIPES: Mapping[str, Recipe] = {bug.recipe.name: bug.recipe for bug in BUGS.values()}
"""The planted bugs' recipes by block name, for the command line
(``tests.blocks.broken_blocks:BUG_RECIPES --block NAME``), as a failure's replay names them."""

SOMETIMES_WRONG = _encoder_like("OffWhenBatchIsThree", OffWhenBatchIsThree)
"""A block whose decomposition fails on some drawn examples (a batch of three), not all."""
