"""x-transformers' ``Encoder`` layer as block recipes: a LayerScale, and a learned skip scale.

Why these two: they are the two scales the Hugging Face and torch layers lack, in a library
whose layer is assembled from options. ``use_layerscale=True`` wraps each branch in a
``LayerScale`` (``out * γ``), so the affine-in-γ law has a γ to judge;
``scale_residual=True`` gives each ``Residual`` a learned per-channel skip scale
(``branch + residual * residual_scale``), which the recipe declares as ``skip_scale``.

How they are built: ``Encoder(dim=16, depth=1, heads=2)``, one attention and one
feed-forward sublayer (two sites), every dropout 0, no weight download, and
``pre_norm_has_final_norm=False``: a pre-norm stack normalizes its output once after the
last layer, which belongs to the stack and not to the layer (with it the zeroed layer is
``LN(x)``, not ``x``). x-transformers' constructors take no ``dtype=``, so each block is
built under torch's default dtype set to the dtype checked (``_build.built_in``).

The LayerScale recipe passes ``norm_add_unit_offset=False``. By default x-transformers
stores every norm's and LayerScale's γ as ``γ - 1`` and multiplies by ``γ + 1`` (the "unit
offset", so weight decay pulls γ toward 1): the parameter named ``gamma`` is then not the
scale, zeroing it leaves the branch whole, and γ = 0 is written ``gamma = -1``. The skip-scale
recipe keeps the default (its norms carry the offset, which the laws need not read).

``x_transformers`` is imported only when a factory runs; without it the import of this module
raises ImportError with the reason, which the catalog reports as this source's skip.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any, cast

from resverify.blocks.catalog._build import built_in
from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

LIBRARY = "x-transformers"
DIM = 16
LAYER_SCALE = 1e-2
"""``layerscale_init_value`` given to the LayerScale recipe's constructor."""

if importlib.util.find_spec("x_transformers") is None:
    raise ImportError("x-transformers is not installed: pip install -c constraints.txt "
                      "'resverify[blocks-xt]' adds it; see docs/blocks-install.md")
VERSION = importlib.metadata.version(LIBRARY)
"""The installed x-transformers version (the catalog skips this module without it)."""


def encoder_class() -> type[nn.Module]:
    """``x_transformers.Encoder``, imported without the one warning its import raises: its
    ``attend.py`` decorates a helper with ``torch.jit.script``, which torch 2.13 deprecates
    (a DeprecationWarning, an error under this project's pytest settings); the library's
    to fix, nothing a check of its layer should stop on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.script` is deprecated",
                                DeprecationWarning)
        from x_transformers import Encoder
    return cast("type[nn.Module]", Encoder)


def _encoder(dtype: torch.dtype, **options: Any) -> nn.Module:
    Encoder = encoder_class()

    def build() -> nn.Module:
        layer: nn.Module = Encoder(dim=DIM, depth=1, heads=2, attn_dim_head=8, ff_mult=2,
                                   pre_norm_has_final_norm=False, **options)
        return layer
    return built_in(dtype, build)


def _site(k: int, zero: tuple[str, ...], **fields: Any) -> Site:
    """Sublayer ``k`` of the layer (``layers.k``: its norms, its branch, its residual; 0 the
    attention, 1 the feed-forward): the branch is the pre-norm, then the sublayer (wrapped in
    its LayerScale where there is one)."""
    norm = f"layers.{k}.0.0"
    return Site(("attention", "feedforward")[k], (norm, f"layers.{k}.1"), zero=zero,
                norms=(norm,), **fields)


_LAYERSCALE_OPTIONS = {"use_layerscale": True, "norm_add_unit_offset": False}

LAYERSCALE = Recipe(
    name="x_transformers.Encoder(layerscale)",
    factory=lambda dtype: _encoder(dtype, layerscale_init_value=LAYER_SCALE,
                                   **_LAYERSCALE_OPTIONS),
    sites=tuple(_site(k, (f"layers.{k}.1.gamma",), scale=f"layers.{k}.1.gamma",
                      scale_init=LAYER_SCALE) for k in (0, 1)),
    zero_init=lambda dtype: _encoder(dtype, **_LAYERSCALE_OPTIONS),
    library=LIBRARY,
    notes=(f"x + LayerScale(attn(LN(x))), then the same with the feed-forward; γ = "
           f"{LAYER_SCALE} (the library's default 0, the zero_init, builds the identity); "
           "norm_add_unit_offset=False, else gamma stores γ - 1"),
)

SCALE_RESIDUAL = Recipe(
    name="x_transformers.Encoder(scale_residual)",
    factory=lambda dtype: _encoder(dtype, scale_residual=True),
    sites=(_site(0, ("layers.0.1.to_out.weight",), skip_scale="layers.0.2.residual_scale"),
           _site(1, ("layers.1.1.ff.2.weight", "layers.1.1.ff.2.bias"),
                 skip_scale="layers.1.2.residual_scale")),
    library=LIBRARY,
    notes=("attn(LN(x)) + x * residual_scale, then the same with the feed-forward: a learned "
           "per-channel skip scale (initialised to 1); norms with the default unit offset"),
)

RECIPES: tuple[Recipe, ...] = (LAYERSCALE, SCALE_RESIDUAL)
"""Every x-transformers recipe, in the order the catalog lists them."""
