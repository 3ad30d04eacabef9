"""diffusers' ``ResnetBlock2D`` as block recipes: a 1×1 conv shortcut, a time embedding and a
post-scaled sum.

Why this block: it is the residual unit of every diffusers UNet, and it carries two forms
the other catalog blocks lack. Its sum is divided after the add,
``(conv_shortcut(x) + F(x, temb)) / output_scale_factor`` (the recipe's ``post_scale``; score-
SDE UNets use √2, which is not a power of two, so the division rounds), and its branch reads
a second input, the time embedding ``temb`` of shape ``(batch, temb_channels)``, projected
and added to every pixel after the first conv (the recipe's ``context``). The projecting
recipe widens 8 to 16 channels, so its shortcut is the 1×1 conv; the other keeps the width
and the default ``output_scale_factor=1``, so its shortcut is the identity.

How they are built: 8 channels in, GroupNorm with 4 groups, ``temb_channels=8``, dropout 0,
on ``(batch, 8, H, W)`` maps with H = W drawn; no weight download. ``ResnetBlock2D`` takes no
``dtype=``, so each block is built under torch's default dtype set to the dtype checked
(``_build.built_in``). ``diffusers`` is imported only when a factory runs; without it the
import of this module raises ImportError with the reason, which the catalog reports as this
source's skip.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from resverify.blocks.catalog._build import built_in
from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

LIBRARY = "diffusers"
CHANNELS, TEMB = 8, 8
"""The input's channels and the time embedding's width."""
SCALE = math.sqrt(2.0)
"""The projecting recipe's ``output_scale_factor`` (score-SDE's)."""

if importlib.util.find_spec(LIBRARY) is None:
    raise ImportError("diffusers is not installed: pip install -c constraints.txt "
                      "'resverify[blocks-diffusers]' adds it; see docs/blocks-install.md")
VERSION = importlib.metadata.version(LIBRARY)
"""The installed diffusers version (the catalog skips this module without it)."""


def _block(dtype: torch.dtype, out_channels: int, output_scale_factor: float) -> nn.Module:
    from diffusers.models.resnet import ResnetBlock2D

    def build() -> nn.Module:
        block: nn.Module = ResnetBlock2D(in_channels=CHANNELS, out_channels=out_channels,
                                         temb_channels=TEMB, groups=4, dropout=0.0,
                                         output_scale_factor=output_scale_factor)
        return block
    return built_in(dtype, build)


def _branch(m: nn.Module, s: torch.Tensor, ctx: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``ResnetBlock2D.forward`` without its sum: norm1, swish, conv1, plus the projected
    swish of temb per channel, norm2, swish, dropout, conv2."""
    act = m.get_submodule("nonlinearity")
    h = m.get_submodule("conv1")(act(m.get_submodule("norm1")(s)))
    h = h + m.get_submodule("time_emb_proj")(act(ctx["temb"]))[:, :, None, None]
    h = m.get_submodule("dropout")(act(m.get_submodule("norm2")(h)))
    out: torch.Tensor = m.get_submodule("conv2")(h)
    return out


def _recipe(out_channels: int, output_scale_factor: float) -> Recipe:
    projects = out_channels != CHANNELS
    name = "diffusers.ResnetBlock2D" + (f"({CHANNELS}->{out_channels})" if projects else "")
    return Recipe(
        name=name,
        factory=lambda dtype: _block(dtype, out_channels, output_scale_factor),
        sites=(Site("resnet", _branch, zero=("conv2.weight", "conv2.bias"), norms=("norm1",),
                    shortcut="conv_shortcut" if projects else "identity",
                    post_scale=output_scale_factor),),
        shape=("batch", CHANNELS, "seq", "seq"),
        context={"temb": ("batch", TEMB)},
        library=LIBRARY,
        notes=("(shortcut(x) + conv2(drop(swish(norm2(conv1(swish(norm1(x))) + "
               "proj(swish(temb))))))) / output_scale_factor" +
               ("; a 1x1 conv shortcut, output_scale_factor √2" if projects else
                "; identity shortcut, output_scale_factor 1")),
    )


RECIPES: tuple[Recipe, ...] = (_recipe(CHANNELS, 1.0), _recipe(2 * CHANNELS, SCALE))
"""Every diffusers recipe, in the order the catalog lists them."""
