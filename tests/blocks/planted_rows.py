"""A planted backward bug for each kind of ATen row, beside its correct twin.

Each kind is one op of the table wrapped in a custom ``torch.autograd.Function`` whose
forward is torch's own op (``torch.export`` inlines it, so the trace and the forward are
right) and whose hand-written backward is either right or wrong the way hand-written kernels
go wrong: a layout moved back through the wrong permutation or offset, a split handed back
in the wrong order, a transposed weight not transposed back, a sign dropped, a slope off by
a small factor. :class:`Planted` puts the op inside a residual block
``y = x + ½·op(x W1) W2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

Tensors = tuple[torch.Tensor, ...]
Backward = Callable[[Tensors, Tensors, bool, float], Tensors]
"""``backward(saved inputs, cotangents, right, off)``: the gradients, planted unless right."""


@dataclass(frozen=True)
class Kind:
    """One row's kind: its op on the block's hidden ``h`` (4, 8) through the wrapped
    function ``f``, the forward of ``f``, and ``f``'s backward (``right`` False: the bug)."""

    use: Callable[[Callable[..., Any], torch.Tensor, nn.Module], torch.Tensor]
    forward: Callable[..., Any]
    backward: Backward
    ir_op: str = ""
    """The IR op the row emits for the wrapped op (the kind's name where empty)."""


def wrapped(kind: Kind, right: bool, off: float) -> Callable[..., Any]:
    """``kind``'s op as a custom autograd Function with the right or the planted backward."""

    class Wrapped(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *xs: torch.Tensor) -> Any:
            ctx.save_for_backward(*xs)
            return kind.forward(*xs)

        @staticmethod
        def backward(ctx: Any, *gs: torch.Tensor) -> Any:
            return kind.backward(ctx.saved_tensors, gs, right, off)

    return Wrapped.apply


def _placed(shape: torch.Size, g: torch.Tensor, index: tuple[Any, ...]) -> torch.Tensor:
    out = g.new_zeros(shape)
    out[index] = g
    return out


def _held(m: nn.Module, name: str) -> torch.Tensor:
    """The tensor ``m`` holds as ``name``: its parameter, or what ``torch.func.functional_call``
    put in its place (``get_parameter`` refuses that)."""
    value = getattr(m, name)
    assert isinstance(value, torch.Tensor), (name, type(value))
    return value


def _factor(right: bool, off: float) -> float:
    return 1.0 if right else 1 + off


def _gelu_erf_slope(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(t / math.sqrt(2))) + t * torch.exp(-t * t / 2) / math.sqrt(
        2 * math.pi)


def _gelu_tanh_slope(t: torch.Tensor) -> torch.Tensor:
    k = math.sqrt(2 / math.pi)
    u = torch.tanh(k * (t + 0.044715 * t ** 3))
    return 0.5 * (1 + u) + 0.5 * t * (1 - u * u) * k * (1 + 3 * 0.044715 * t * t)


def _smooth(forward: Callable[[torch.Tensor], torch.Tensor],
            slope: Callable[[torch.Tensor], torch.Tensor], ir_op: str = "") -> Kind:
    """An elementwise op whose planted backward is its slope off by a factor ``1 + off``."""
    return Kind(lambda f, h, m: f(h), forward,
                lambda xs, gs, right, off: (gs[0] * slope(xs[0]) * _factor(right, off),),
                ir_op)


KINDS: dict[str, Kind] = {
    "permute": Kind(
        lambda f, h, m: f(h.reshape(4, 2, 2, 2)).reshape(4, 8),
        lambda t: t.permute(0, 2, 3, 1),
        lambda xs, gs, right, off: (gs[0].permute(*((0, 3, 1, 2) if right else (0, 2, 3, 1))),)),
    "reshape": Kind(
        lambda f, h, m: f(h).reshape(4, 8),
        lambda t: t.reshape(4, 2, 4),
        lambda xs, gs, right, off: (
            (gs[0] if right else gs[0].transpose(1, 2)).reshape(4, 8),)),
    "expand": Kind(
        lambda f, h, m: h * f(h[:, :1]),
        lambda t: t.expand(4, 8),
        lambda xs, gs, right, off: (
            gs[0].sum(1, keepdim=True) if right else gs[0][:, :1],)),
    "slice": Kind(
        lambda f, h, m: torch.cat([f(h), h[:, :4]], 1),
        lambda t: t[:, 4:],
        lambda xs, gs, right, off: (
            _placed(xs[0].shape, gs[0], (slice(None), slice(4, 8) if right else slice(3, 7))),)),
    "select": Kind(
        lambda f, h, m: h * f(h)[:, None],
        lambda t: t[:, 0],
        lambda xs, gs, right, off: (_placed(xs[0].shape, gs[0], (slice(None), 0 if right else 1)),),
        "slice"),
    "cat": Kind(
        lambda f, h, m: f(h[:, 4:], h[:, :4]),
        lambda a, b: torch.cat([a, b], 1),
        lambda xs, gs, right, off: (
            (gs[0][:, :4], gs[0][:, 4:]) if right else (gs[0][:, 4:], gs[0][:, :4]))),
    "split": Kind(
        lambda f, h, m: torch.cat(f(h)[::-1], 1),
        lambda t: tuple(p.clone() for p in torch.split(t, [4, 4], 1)),
        lambda xs, gs, right, off: (torch.cat(gs if right else gs[::-1], 1),), "slice"),
    "addmm": Kind(
        lambda f, h, m: f(_held(m, "b"), h, _held(m, "w3").t()),
        lambda b, x, wt: torch.addmm(b, x, wt),
        lambda xs, gs, right, off: (
            gs[0].sum(0), gs[0] @ (xs[2].t() if right else xs[2]), xs[1].t() @ gs[0]),
        "linear"),
    "neg": Kind(
        lambda f, h, m: f(h),
        lambda t: -t,
        lambda xs, gs, right, off: (-gs[0] if right else gs[0],)),
    "sub": Kind(
        lambda f, h, m: f(h, torch.tanh(h)),
        lambda a, b: a - b,
        lambda xs, gs, right, off: (gs[0], -gs[0] if right else gs[0]), "neg"),
    "square": _smooth(lambda t: t ** 2, lambda t: 2 * t, "mul"),
    "mean": Kind(
        lambda f, h, m: h * f(h),
        lambda t: t.mean(),
        lambda xs, gs, right, off: (
            gs[0].expand(xs[0].shape) / (xs[0].numel() if right else xs[0].numel() - 1),),
        "sum"),
    "exp": _smooth(torch.exp, torch.exp),
    "silu": _smooth(nn.functional.silu,
                    lambda t: torch.sigmoid(t) * (1 + t * (1 - torch.sigmoid(t)))),
    "gelu_erf": _smooth(nn.functional.gelu, _gelu_erf_slope),
    "gelu_tanh": _smooth(lambda t: nn.functional.gelu(t, approximate="tanh"), _gelu_tanh_slope),
}


class Planted(nn.Module):
    """``y = x + ½·op(x W1) W2`` on ``x`` of shape (4, 8), ``op`` one kind's op with its right
    (``right``) or planted backward; ``w3`` and ``b`` are the weight and bias of addmm's."""

    def __init__(self, kind: str, right: bool, off: float = 0.0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.w1, self.w2, self.w3 = (nn.Parameter(torch.randn(8, 8, generator=generator) / 3)
                                     for _ in range(3))
        self.b = nn.Parameter(torch.randn(8, generator=generator))
        self.kind = KINDS[kind]
        self.op = wrapped(self.kind, right, off)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * (self.kind.use(self.op, x @ self.w1, self) @ self.w2)
