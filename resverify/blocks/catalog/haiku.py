"""dm-haiku's ResNet ``BlockV1`` and ``BlockV2`` as block recipes: the JAX side of the catalog.

Why Haiku: flax, equinox and keras core ship no residual block, and keras-hub's would pull a
second TensorFlow; ``haiku.nets.ResNet.BlockV1`` (post-activation, ``relu(shortcut(x) +
F(x))``, the shortcut a 1x1 conv and a BatchNorm when projecting) and ``BlockV2``
(pre-activation, ``shortcut(x) + F(x)``, where the projecting shortcut reads the branch's
``relu(batchnorm_0(x))``) are library blocks, installed with the ``blocks-jax`` extra. The
recipes are checked through :mod:`resverify.blocks.haiku_adapter`.

The zeroing parameters: BlockV1's branch ends in ``batchnorm_1``, whose scale *and* offset
must be 0 for F to be 0; BlockV2's ends in the conv ``conv_1`` (no BatchNorm after it), whose
kernel alone is enough. Sizes: 8 channels on 4 x 4 maps (NHWC), stride 1; BatchNorm in both
modes (``is_training`` False and True: moving statistics, or the batch's).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from resverify.blocks.haiku_adapter import BLOCK, JaxRecipe, import_haiku, no_torch
from resverify.blocks.recipe import Site

if importlib.util.find_spec("haiku") is None:
    raise ImportError("dm-haiku is not installed (make blocks, or pip install "
                      "'resverify[blocks-jax]')")

import jax

hk = import_haiku()

__all__ = []

VERSION = importlib.metadata.version("dm-haiku")
"""The installed dm-haiku version."""
CHANNELS = 8
BN = {"decay_rate": 0.9, "eps": 1e-5}


def _v1(projection: bool) -> Any:
    return hk.nets.ResNet.BlockV1(CHANNELS, 1, projection, BN, False, name=BLOCK)


def _v2(projection: bool) -> Any:
    return hk.nets.ResNet.BlockV2(CHANNELS, 1, projection, BN, False, name=BLOCK)


def v1_parts(block: Any, x: Any, training: bool) -> tuple[Any, Any]:
    """BlockV1's ``(shortcut, F)``: ``x`` or ``shortcut_batchnorm(shortcut_conv(x))``, and
    conv, BatchNorm and ReLU per layer with no ReLU after the last BatchNorm."""
    skip = x
    if block.use_projection:
        skip = block.proj_batchnorm(block.proj_conv(x), training, False)
    out = x
    for i, (conv, bn) in enumerate(block.layers):
        out = bn(conv(out), training, False)
        if i < len(block.layers) - 1:
            out = jax.nn.relu(out)
    return skip, out


def v2_parts(block: Any, x: Any, training: bool) -> tuple[Any, Any]:
    """BlockV2's ``(shortcut, F)``: F is BatchNorm, ReLU and conv per layer; the shortcut
    ``x``, or ``shortcut_conv`` of F's first ``relu(batchnorm_0(x))`` (the same value)."""
    skip = out = x
    for i, (conv, bn) in enumerate(block.layers):
        out = jax.nn.relu(bn(out, training, False))
        if i == 0 and block.use_projection:
            skip = block.proj_conv(out)
        out = conv(out)
    return skip, out


_V1 = ("conv_0", "batchnorm_0", "relu", "conv_1", "batchnorm_1")
_V2 = ("batchnorm_0", "relu", "conv_0", "batchnorm_1", "relu", "conv_1")


def _recipe(name: str, version: int, projection: bool) -> JaxRecipe:
    shortcut = "shortcut_conv+shortcut_batchnorm" if version == 1 else "shortcut_conv"
    site = Site("residual", _V1 if version == 1 else _V2,
                zero=("batchnorm_1.scale", "batchnorm_1.offset") if version == 1
                else ("conv_1.w",), norm="none",
                activation="relu" if version == 1 else None,
                shortcut=shortcut if projection else "identity")
    make = _v1 if version == 1 else _v2
    return JaxRecipe(
        name=name, factory=no_torch, sites=(site,), shape=("batch", 4, 4, CHANNELS),
        dtypes=("float64", "float32", "bfloat16", "float16"),
        block=lambda: make(projection),
        parts=v1_parts if version == 1 else v2_parts,
        notes=f"dm-haiku {VERSION}, JAX, NHWC; checked through resverify.blocks.haiku_adapter")


RECIPES = (
    _recipe("haiku.BlockV1", 1, False),
    _recipe("haiku.BlockV1(projection)", 1, True),
    _recipe("haiku.BlockV2", 2, False),
    _recipe("haiku.BlockV2(projection)", 2, True),
)
