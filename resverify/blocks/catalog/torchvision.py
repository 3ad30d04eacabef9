"""torchvision's ResNet ``BasicBlock`` and ``Bottleneck`` as block recipes: post-activation.

Why ResNet blocks: they are the post-activation case. The sum goes through a ReLU, so a
zeroed branch leaves ``relu(x)``, not ``x`` (the identity only for x >= 0), and the sum is
written in place (``out += identity``), the spot where an in-place op can alias the skip.
The branch ends in a BatchNorm, whose weight *and* bias must be 0 for F to be 0:
``zero_init_residual`` zeroes only the weight, which is the whole branch at the library's
initialisation (bias 0) and not after training. Each recipe's ``zero_init`` builds the block
the way the library's own option leaves it, inside a ``ResNet(..., zero_init_residual=True)``,
for the zero-branch law to compare.

Sizes: 64 and 256 channels, because the blocks that ``ResNet`` itself builds with the zero
init start there (``layer1``); the maps are 4 x 4 so that a BatchNorm in train mode always
sees more than one value per channel. The downsampling Bottleneck (stride 2, a 1x1 conv + BN
projection, as ``ResNet._make_layer`` builds it) changes the stream's shape: its zero branch
is ``relu(downsample(x))``.

Why this module may be absent: the torchvision wheel the package index serves for x86_64 is
a CUDA build; beside the CPU torch wheel its extension does not load and ``import
torchvision`` raises (``operator torchvision::nms does not exist``). This module then raises
ImportError saying so, which the catalog reports as its skip. docs/blocks-install.md gives
the pairing that imports (torch 2.14.1 with torchvision 0.29.1, in a venv of its own).
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from resverify.blocks.recipe import Recipe, Site

if TYPE_CHECKING:
    from torch import nn

__all__ = []

SPATIAL = 4


def import_problem() -> str | None:
    """Why torchvision cannot be used here, or None when it imports."""
    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed (see docs/blocks-install.md for one that imports)"
    try:
        import torchvision.models.resnet  # noqa: F401
    except Exception as exc:  # the CUDA build beside CPU torch raises RuntimeError
        first = (str(exc).strip().splitlines() or [""])[0]
        tv = importlib.metadata.version("torchvision")
        return (f"torchvision {tv} does not import: {type(exc).__name__}: {first} (a CUDA "
                "build beside a CPU torch?)")
    return None


_PROBLEM = import_problem()
if _PROBLEM is not None:
    raise ImportError(_PROBLEM)
VERSION = importlib.metadata.version("torchvision")
"""The installed torchvision version."""


def _basic(dtype: torch.dtype) -> nn.Module:
    from torchvision.models.resnet import BasicBlock

    block: nn.Module = BasicBlock(64, 64)
    return block.to(dtype)


def _bottleneck(dtype: torch.dtype) -> nn.Module:
    from torchvision.models.resnet import Bottleneck

    block: nn.Module = Bottleneck(256, 64)
    return block.to(dtype)


def _downsampling(dtype: torch.dtype) -> nn.Module:
    """A stride-2 Bottleneck with the projection ``ResNet._make_layer`` gives it."""
    from torch import nn
    from torchvision.models.resnet import Bottleneck, conv1x1

    projection = nn.Sequential(conv1x1(64, 128, 2), nn.BatchNorm2d(128))
    block: nn.Module = Bottleneck(64, 32, stride=2, downsample=projection)
    return block.to(dtype)


def _from_resnet(block: str, layers: list[int], index: int) -> Callable[[torch.dtype],
                                                                           nn.Module]:
    """The ``index``-th block of ``layer1`` of a ResNet built with ``zero_init_residual``.

    The whole network (millions of parameters, most of the time of an example) is built once
    per dtype and the block copied out of it: what the zero-branch law asks of it, that it is
    ``relu(x)`` as built, does not depend on its random convolution weights."""
    @functools.cache
    def built(dtype: torch.dtype) -> nn.Module:
        from torchvision.models import resnet

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            net = resnet.ResNet(getattr(resnet, block), layers, zero_init_residual=True)
        module: nn.Module = net.get_submodule(f"layer1.{index}")
        return module.to(dtype)

    def factory(dtype: torch.dtype) -> nn.Module:
        return copy.deepcopy(built(dtype))
    return factory


def _site(last: int, branch: tuple[str, ...], shortcut: str = "identity") -> Site:
    return Site("residual", branch, zero=(f"bn{last}.weight", f"bn{last}.bias"), norm="none",
                activation="relu", shortcut=shortcut)


_BASIC_BRANCH = ("conv1", "bn1", "relu", "conv2", "bn2")
_BOTTLENECK_BRANCH = ("conv1", "bn1", "relu", "conv2", "bn2", "relu", "conv3", "bn3")

BASIC = Recipe(
    name="torchvision.BasicBlock",
    factory=_basic,
    sites=(_site(2, _BASIC_BRANCH),),
    shape=("batch", 64, SPATIAL, SPATIAL),
    zero_init=_from_resnet("BasicBlock", [1, 1, 1, 1], 0),
    notes="relu(bn2(conv2(relu(bn1(conv1(x))))) + x), the sum in place; zero branch: relu(x)",
)

BOTTLENECK = Recipe(
    name="torchvision.Bottleneck",
    factory=_bottleneck,
    sites=(_site(3, _BOTTLENECK_BRANCH),),
    shape=("batch", 256, SPATIAL, SPATIAL),
    zero_init=_from_resnet("Bottleneck", [2, 1, 1, 1], 1),
    notes="1x1, 3x3, 1x1 convolutions (64 wide inside, 256 outside); zero branch: relu(x)",
)

DOWNSAMPLING = Recipe(
    name="torchvision.Bottleneck(downsample)",
    factory=_downsampling,
    sites=(_site(3, _BOTTLENECK_BRANCH, shortcut="downsample"),),
    shape=("batch", 64, SPATIAL, SPATIAL),
    notes=("stride 2, 64 -> 128 channels; the shortcut is downsample (1x1 conv, stride 2, "
           "then BN); zero branch: relu(downsample(x)), with bn3's weight and bias both 0"),
)

RECIPES: tuple[Recipe, ...] = (BASIC, BOTTLENECK, DOWNSAMPLING)
"""Every torchvision recipe, in the order the catalog lists them."""
