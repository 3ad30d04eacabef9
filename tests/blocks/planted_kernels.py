"""Planted precision bugs in the *kernels* a traced graph names: a library whose bfloat16
``mm``/``addmm`` accumulate in bfloat16, or whose ``native_layer_norm`` keeps its
intermediates in bfloat16, where float32 is declared (:data:`resverify.blocks.exact.ACCUMULATE`).

Why in the kernels: a module that writes its product as a Python loop of bfloat16 partial
sums is traced as that loop (slices, ``mm`` s and ``add`` s), each op of which is right; the
program as written is what ran. The bug the local judgement is for is one the graph does
not show: the graph says ``aten.mm`` and the kernel behind it rounds more often than the
library declares (as cuBLAS may with ``allow_bf16_reduced_precision_reduction``). A
:class:`Kernels` dispatch mode puts such a kernel behind an ATen overload, on real tensors
only (the trace, on fake tensors, is untouched), for the module's eager run and for the
judge's run of its graph alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
Kernel = Callable[..., Any]


class Kernels(TorchDispatchMode):
    """ATen overloads run by substitute kernels where every tensor argument (a list's
    included) is a real tensor of one of ``dtypes`` (bfloat16 unless told); every other
    call runs torch's own kernel."""

    def __init__(self, kernels: Mapping[Any, Kernel],
                 dtypes: frozenset[torch.dtype] = frozenset({torch.bfloat16})) -> None:
        super().__init__()
        self.kernels = dict(kernels)
        self.dtypes = dtypes
        self.calls = 0
        """Calls the substitute kernels took (0: nothing planted ran)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        kernel = self.kernels.get(func)
        tensors = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor)]
        if kernel is None or not all(t.dtype in self.dtypes and not is_fake(t)
                                     for t in tensors):
            return func(*args, **kwargs)
        self.calls += 1
        return kernel(*args, **kwargs)


def chunked_mm(chunks: int) -> Kernel:
    """``a @ b`` as ``chunks`` products over slices of the inner axis, each accumulated in
    float32 and rounded to bfloat16 (torch's own ``mm``), summed in bfloat16."""

    def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        bounds = torch.linspace(0, a.shape[1], chunks + 1).round().long().tolist()
        partials = [torch.mm(a[:, start:stop], b[start:stop])
                    for start, stop in itertools.pairwise(bounds)]
        acc = partials[0]
        for partial in partials[1:]:
            acc = acc + partial
        return acc

    return mm


def chunked_addmm(chunks: int) -> Kernel:
    """``bias + a @ b``, the product by :func:`chunked_mm`, the bias added in bfloat16."""
    mm = chunked_mm(chunks)

    def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *,
              beta: float = 1, alpha: float = 1) -> torch.Tensor:
        assert beta == 1 and alpha == 1, "only the plain addmm of nn.Linear is planted"
        return bias + mm(a, b)

    return addmm


def narrow_layer_norm(x: torch.Tensor, shape: list[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``native_layer_norm`` over the last axis computed in bfloat16: the mean, the centred
    row, the variance and ``1/σ`` each rounded to bfloat16 (each reduction itself in
    float32, as torch's are), then normalised and scaled in float32 and rounded once: the
    statistics without their float32 upcast."""
    assert len(shape) == 1, "only a norm over the last axis is planted"
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    rstd = torch.rsqrt((centred * centred).mean(-1, keepdim=True) + eps)
    y = centred.float() * rstd.float()
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype), mean, rstd


def narrow_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """``_softmax`` with its exponentials rounded to bfloat16 and summed in bfloat16 (one
    rounding per addition) before the division: the float32 intermediates lost."""
    assert not half_to_float, "only the softmax that keeps its dtype is planted"
    exps = torch.exp(x - x.amax(dim, keepdim=True))
    total = exps.narrow(dim, 0, 1)
    for k in range(1, exps.shape[dim]):
        total = total + exps.narrow(dim, k, 1)
    return exps / total


NARROW_MM = {aten.mm.default: chunked_mm(4), aten.addmm.default: chunked_addmm(4)}
"""The matmul bug: products over four slices of the inner axis summed in bfloat16."""

NARROW_NORM = {aten.native_layer_norm.default: narrow_layer_norm}
"""The norm bug: the mean and the centred row kept in bfloat16."""

NARROW_SOFTMAX = {aten._softmax.default: narrow_softmax}
"""The softmax bug: its exponentials and their sum kept in bfloat16."""


class InLayer(Kernels):
    """:class:`Kernels` planted in one layer of a stack: the substitute kernel runs on the
    calls of its overload numbered ``layer`` modulo ``layers`` (counted per overload, real
    tensors of ``dtypes`` only), torch's own on the others. Why by count: a dispatch mode
    sees kernels, not modules, and a model whose every layer calls an overload once per run
    calls it in layer order, in its eager forward and in the judge's run of its traced
    graph alike (:func:`resverify.blocks.local.record`)."""

    def __init__(self, kernels: Mapping[Any, Kernel], layer: int, layers: int,
                 dtypes: frozenset[torch.dtype] = frozenset({torch.bfloat16})) -> None:
        super().__init__(kernels, dtypes)
        self.layer, self.layers = layer, layers
        self.seen: dict[Any, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        tensors = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor)]
        if func not in self.kernels or not all(t.dtype in self.dtypes and not is_fake(t)
                                               for t in tensors):
            return func(*args, **kwargs)
        count = self.seen.get(func, 0)
        self.seen[func] = count + 1
        if count % self.layers != self.layer:
            return func(*args, **kwargs)
        self.calls += 1
        return self.kernels[func](*args, **kwargs)
