"""Convolutional modules the exact judgement is proved on: convolutions of every geometry
(stride, padding, dilation, groups, depthwise), a ResNet-style residual block (conv, eval
batch norm, ReLU), and planted bugs in hand-written backwards of each new op kind.

The bugs live in custom ``torch.autograd.Function`` s, as hand-written kernels do: the
trace reads their forward (``torch.export`` inlines it), the eager backward runs their own
``backward``, so the forward is bitwise torch's own.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.grad
from torch import nn


def randomised(bn: nn.BatchNorm2d, seed: int) -> nn.BatchNorm2d:
    """``bn`` with drawn running statistics, weight and bias (a fresh one is the identity
    map: mean 0, variance 1, weight 1, bias 0)."""
    generator = torch.Generator().manual_seed(seed)
    channels = bn.num_features
    assert bn.running_mean is not None and bn.running_var is not None
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels, generator=generator))
        bn.running_var.copy_(torch.rand(channels, generator=generator) * 1.5 + 0.25)
        bn.weight.copy_(torch.randn(channels, generator=generator))
        bn.bias.copy_(torch.randn(channels, generator=generator))
    return bn


class ResidualConv(nn.Module):
    """``y = x + conv(x)`` with a convolution that keeps the shape (its own geometry)."""

    def __init__(self, channels: int, kernel: int, padding: int, dilation: int = 1,
                 groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel, padding=padding, dilation=dilation,
                              groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


class GroupNormBranch(nn.Module):
    """``y = x + conv(silu(gn(x)))``: diffusers' ResnetBlock2D branch at small size (an
    affine ``nn.GroupNorm`` with drawn weight and bias, SiLU, a 3x3 convolution)."""

    def __init__(self, channels: int, groups: int = 2, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.copy_(torch.randn(channels, generator=generator))
            self.norm.bias.copy_(torch.randn(channels, generator=generator))
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(nn.functional.silu(self.norm(x)))


class Downsample(nn.Module):
    """A strided, grouped convolution that changes the shape (a ResNet downsampling path)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, groups=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class ConvBnBlock(nn.Module):
    """ResNet's BasicBlock at small size: ``relu(x + bn2(conv2(relu(bn1(conv1(x))))))``,
    bias-free convolutions, eval-mode batch norms with drawn statistics; ``conv`` the
    convolution function the first layer runs (torch's by default)."""

    def __init__(self, channels: int, seed: int = 0, bn: type[nn.BatchNorm2d] = nn.BatchNorm2d
                 ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = randomised(bn(channels), seed)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = randomised(bn(channels), seed + 1)
        self.conv: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.conv1(x) if self.conv is None else self.conv(x, self.conv1.weight)
        h = torch.relu(self.bn1(first))
        return torch.relu(x + self.bn2(self.conv2(h)))


class _FlippedBackward(torch.autograd.Function):
    """``conv2d(x, w, padding=1)`` whose hand-written ``x̄`` convolves with the filters
    unflipped (a transposed convolution written as a correlation); ``w̄`` is torch's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return torch.nn.functional.conv2d(x, w, padding=1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        gx = torch.nn.functional.conv2d(g, w.transpose(0, 1), padding=1)  # not flipped
        gw = torch.nn.grad.conv2d_weight(x, w.shape, g, padding=1)
        return gx, gw


def conv_with_flipped_backward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _FlippedBackward.apply(x, w)
    return out


class EpsInBackward(nn.BatchNorm2d):
    """An eval-mode batch norm whose hand-written backward uses ``eps_backward`` where the
    forward uses ``eps`` (a kernel that reads the wrong constant in one pass); ``x̄``,
    ``γ̄`` and ``β̄`` are written out, the forward is torch's."""

    eps_backward = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _EpsBatchNorm.apply(x, self.weight, self.bias, self.running_mean,
                                                self.running_var, self.eps, self.eps_backward)
        return out


class _EpsBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                mean: torch.Tensor, var: torch.Tensor, eps: float, eps_backward: float
                ) -> torch.Tensor:
        ctx.save_for_backward(x, w, mean, var)
        ctx.eps_backward = eps_backward
        return torch.nn.functional.batch_norm(x, mean, var, w, b, training=False, eps=eps)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        x, w, mean, var = ctx.saved_tensors
        shape = (1, -1, 1, 1)
        r = torch.rsqrt(var + ctx.eps_backward).reshape(shape)
        gx = g * w.reshape(shape) * r
        gw = (g * (x - mean.reshape(shape)) * r).sum(dim=(0, 2, 3))
        return gx, gw, g.sum(dim=(0, 2, 3)), None, None, None, None


def eps_batch_norm(eps_backward: float) -> type[nn.BatchNorm2d]:
    """:class:`EpsInBackward` with the backward's ε (the module's own ``eps``, 1e-5: right)."""
    return type("EpsBackward", (EpsInBackward,), {"eps_backward": eps_backward})
