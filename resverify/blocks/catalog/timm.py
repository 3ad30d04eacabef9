"""timm's ViT ``Block`` and ``ConvNeXtBlock`` as block recipes: LayerScale and drop path.

Why timm: its blocks carry the two parts the torch and Hugging Face layers lack. A LayerScale
γ multiplies each branch (so the affine-in-γ law has something to judge, and zeroing γ
alone zeroes the branch), and a per-sample drop path sits between the branch and the sum
(so the drop-path law reads a real mask). ConvNeXt's block runs on ``(N, C, H, W)`` maps,
its γ is a bare parameter of the block that scales dimension 1, the channels (the recipe
says so: ``scale_axis=1``), and with a width change its shortcut projects.

Why this module may be absent: timm imports torchvision when it is imported
(``timm.layers`` and ``timm.data`` both do, unguarded), and the torchvision wheel the package
index serves for x86_64 is a CUDA build whose extension links torch's CUDA libraries; beside
the CPU torch wheel it fails at import (``operator torchvision::nms does not exist``). Then
this module raises ImportError saying so, and the catalog lists it as skipped. The sound
pairing measured here (docs/blocks-install.md) is torch 2.14.1 with torchvision 0.29.1, in a
virtual environment of its own.

timm's attention takes the fused ``scaled_dot_product_attention`` path when timm enables it
(the default on CPU); the recipes leave that as a user would get it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = []

DIM = 16
"""The ViT block's width; ConvNeXt's maps have ``DIM // 2`` channels."""
LAYER_SCALE = 1e-5
"""The ``init_values`` / ``ls_init_value`` given to the constructors (timm's ViT default)."""
DROP_PATH = 0.25


def import_problem() -> str | None:
    """Why timm cannot be used here, or None when it imports."""
    if importlib.util.find_spec("timm") is None:
        return ("timm is not installed (it needs a torchvision that imports; see "
                "docs/blocks-install.md)")
    if importlib.util.find_spec("torchvision") is None:
        return ("timm is installed but torchvision is not: timm imports torchvision when it "
                "is imported, so no timm block can be built")
    try:
        import timm.models.convnext
        import timm.models.vision_transformer  # noqa: F401
    except Exception as exc:  # torchvision's CUDA build beside CPU torch raises RuntimeError
        first = (str(exc).strip().splitlines() or [""])[0]
        tv = importlib.metadata.version("torchvision")
        return (f"timm does not import: torchvision {tv} fails with {type(exc).__name__}: "
                f"{first} (a CUDA build of torchvision beside a CPU torch?)")
    return None


_PROBLEM = import_problem()
if _PROBLEM is not None:
    raise ImportError(_PROBLEM)
VERSION = importlib.metadata.version("timm")
"""The installed timm version."""


def _vit(dtype: torch.dtype, init_values: float | None, drop_path: float) -> nn.Module:
    from timm.models.vision_transformer import Block

    block: nn.Module = Block(DIM, num_heads=2, mlp_ratio=2.0, qkv_bias=True,
                             init_values=init_values, drop_path=drop_path, dtype=dtype)
    return block


def _vit_site(label: str, k: int) -> Site:
    gamma = f"ls{k}.gamma"
    return Site(label, (f"norm{k}", "attn" if k == 1 else "mlp", f"ls{k}"), zero=(gamma,),
                norms=(f"norm{k}",), scale=gamma, scale_init=LAYER_SCALE,
                drop_path=(f"drop_path{k}",))


VIT = Recipe(
    name="timm.vit.Block",
    factory=lambda dtype: _vit(dtype, LAYER_SCALE, DROP_PATH),
    sites=(_vit_site("attn", 1), _vit_site("mlp", 2)),
    shape=("batch", "seq", DIM),
    notes=(f"x + drop_path(ls(attn(norm1(x)))), then the same with the MLP; LayerScale "
           f"{LAYER_SCALE}, drop path {DROP_PATH}, per sample, divided by the keep rate"),
)

VIT_PLAIN = Recipe(
    name="timm.vit.Block(no LayerScale)",
    factory=lambda dtype: _vit(dtype, None, 0.0),
    sites=(Site("attn", ("norm1", "attn"), zero=("attn.proj.weight", "attn.proj.bias"),
                norms=("norm1",)),
           Site("mlp", ("norm2", "mlp"), zero=("mlp.fc2.weight", "mlp.fc2.bias"),
                norms=("norm2",))),
    shape=("batch", "seq", DIM),
    notes=("init_values None: ls1, ls2 are Identity (so is init_values=0.0, which is falsy); "
           "drop path 0: drop_path1, drop_path2 are Identity"),
)


def _convnext(dtype: torch.dtype, in_chs: int, out_chs: int) -> nn.Module:
    from timm.models.convnext import ConvNeXtBlock

    block: nn.Module = ConvNeXtBlock(in_chs, out_chs, kernel_size=3, mlp_ratio=2,
                                     ls_init_value=LAYER_SCALE, drop_path=DROP_PATH,
                                     dtype=dtype)
    return block


def _convnext_branch(module: nn.Module, s: torch.Tensor, _ctx: Mapping[str, torch.Tensor]
                     ) -> torch.Tensor:
    """Depthwise conv, then LayerNorm and MLP over channels last, then γ per channel."""
    h = module.get_submodule("conv_dw")(s).permute(0, 2, 3, 1)
    h = module.get_submodule("mlp")(module.get_submodule("norm")(h)).permute(0, 3, 1, 2)
    return h.mul(module.get_parameter("gamma").reshape(1, -1, 1, 1))


def _convnext_recipe(in_chs: int, out_chs: int) -> Recipe:
    projects = in_chs != out_chs
    return Recipe(
        name="timm.ConvNeXtBlock" + (f"({in_chs}->{out_chs})" if projects else ""),
        factory=lambda dtype: _convnext(dtype, in_chs, out_chs),
        sites=(Site("block", _convnext_branch, zero=("gamma",), norm="none", scale="gamma",
                    scale_init=LAYER_SCALE, scale_axis=1, drop_path=("drop_path",),
                    shortcut="shortcut" if projects else "identity"),),
        shape=("batch", in_chs, "seq", "seq"),
        notes=("drop_path(F(x)·γ) + shortcut(x) on (N, C, H, W); the LayerNorm is inside F, "
               "after the depthwise conv" + ("; the shortcut is a 1x1 conv" if projects else "")),
    )


RECIPES: tuple[Recipe, ...] = (VIT, VIT_PLAIN, _convnext_recipe(DIM // 2, DIM // 2),
                               _convnext_recipe(DIM // 2, DIM))
"""Every timm recipe, in the order the catalog lists them."""
