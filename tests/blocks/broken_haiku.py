"""Planted bugs on the real Haiku ResNet blocks, each breaking one residual law.

Each class subclasses ``haiku.nets.ResNet.BlockV1`` or ``BlockV2`` and changes only its
``__call__``, so its parameters, submodules and recipe are the library's; :data:`BUGS` maps a
bug to the catalog recipe it replaces, the dtype it shows in and the laws it must fail (every
other judged law must pass on it).
"""

from __future__ import annotations

from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp

from resverify.blocks.haiku_adapter import import_haiku

import_haiku()  # haiku's flax stand-in out of sys.modules, as the catalog does


def _branch(block: Any, x: Any, training: bool, test_local_stats: bool) -> Any:
    out = x
    for i, (conv, bn) in enumerate(block.layers):
        out = bn(conv(out), training, test_local_stats)
        if i < len(block.layers) - 1:
            out = jax.nn.relu(out)
    return out


class DroppedSkipV1(hk.nets.ResNet.BlockV1):  # type: ignore[misc,valid-type,unused-ignore]
    """``relu(F(x))``: the skip is gone."""

    def __call__(self, inputs: Any, is_training: bool, test_local_stats: bool) -> Any:
        return jax.nn.relu(_branch(self, inputs, is_training, test_local_stats))


class UnnormalizedShortcutV1(hk.nets.ResNet.BlockV1):  # type: ignore[misc,valid-type,unused-ignore]
    """The projecting shortcut skips its BatchNorm: ``relu(shortcut_conv(x) + F(x))``."""

    def __call__(self, inputs: Any, is_training: bool, test_local_stats: bool) -> Any:
        out = _branch(self, inputs, is_training, test_local_stats)
        return jax.nn.relu(out + self.proj_conv(inputs))


class DetachedSkipV1(hk.nets.ResNet.BlockV1):  # type: ignore[misc,valid-type,unused-ignore]
    """``relu(F(x) + stop_gradient(x))``: the forward exact, the skip's gradient gone."""

    def __call__(self, inputs: Any, is_training: bool, test_local_stats: bool) -> Any:
        out = _branch(self, inputs, is_training, test_local_stats)
        return jax.nn.relu(out + jax.lax.stop_gradient(inputs))


class ScaledSkipV2(hk.nets.ResNet.BlockV2):  # type: ignore[misc,valid-type,unused-ignore]
    """``F(x) + x / 2``: the skip scaled."""

    def __call__(self, inputs: Any, is_training: bool, test_local_stats: bool) -> Any:
        out = inputs
        for conv, bn in self.layers:
            out = conv(jax.nn.relu(bn(out, is_training, test_local_stats)))
        return out + inputs * jnp.asarray(0.5, inputs.dtype)


class WideOutputV2(hk.nets.ResNet.BlockV2):  # type: ignore[misc,valid-type,unused-ignore]
    """The right values, returned in float32 whatever the stream's dtype."""

    def __call__(self, inputs: Any, is_training: bool, test_local_stats: bool) -> Any:
        return super().__call__(inputs, is_training, test_local_stats).astype(jnp.float32)


BUGS: dict[str, tuple[type[Any], str, str, frozenset[str]]] = {
    "dropped skip": (DroppedSkipV1, "haiku.BlockV1", "float32",
                     frozenset({"decomposition", "zero_branch"})),
    "shortcut without its batchnorm": (UnnormalizedShortcutV1, "haiku.BlockV1(projection)",
                                       "float32", frozenset({"decomposition", "zero_branch"})),
    "detached skip": (DetachedSkipV1, "haiku.BlockV1", "float32",
                      frozenset({"gradient_skip", "zero_branch"})),
    "scaled skip": (ScaledSkipV2, "haiku.BlockV2", "float32",
                    frozenset({"decomposition", "zero_branch"})),
    "float32 output": (WideOutputV2, "haiku.BlockV2", "bfloat16", frozenset({"stream_dtype"})),
}
"""Bug -> (its class, the recipe it replaces, the dtype it shows in, the laws it fails)."""
