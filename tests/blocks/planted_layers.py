"""Planted numeric bugs in the kernels of *real* layers (Hugging Face's BertLayer, GPT2Block
and LlamaDecoderLayer, timm's ViT block), each with its correct twin.

Why real layers: the toy block of :mod:`tests.blocks.planted_rows` shows each ATen row's
backward can be caught; these show the exact judgement catching what a library's own kernel
could get wrong inside a shipped layer, where the structural laws (built from the layer's
own autodiff) see a consistent module. Every bug is planted the same way
(:class:`~tests.blocks.planted_kernels.Kernels`): the trace, on fake tensors, is the correct
module's; the eager run, and the judge's run of the graph, call the planted kernel. Its twin
is the same dispatch mode whose kernel runs torch's own body, so the mode itself is shown
harmless.

The bugs, by kind (``Bug.kind``): a backward only (the forward bitwise the library's), a
constant of a forward formula, a normalization, attention, and precision (a reduced-precision
accumulation, a missing upcast) whose error is a few of the library's own bfloat16 roundings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from tests.blocks.planted_kernels import (
    Kernel,
    Kernels,
    chunked_addmm,
    narrow_layer_norm,
    narrow_softmax,
)

aten = torch.ops.aten
OFF = 2.0**-10
"""The relative size of a backward planted as a factor ``1 + OFF``."""
TYPO = 0.7071
"""GELU's ``1/√2`` written with four digits (``M_SQRT1_2`` is 0.70710678...)."""
LOOSE_EPS = 1e-3
"""The layer norm epsilon planted in place of the module's own (BERT's 1e-12)."""

Planting = Callable[[bool], Mapping[Any, Kernel]]
"""A bug's kernels: ``planted=True`` the bug, ``False`` its twin (torch's own body)."""


def _scaled(op: Any, planted: bool, off: float = OFF) -> Kernel:
    """``op`` with its result times ``1 + off`` (each result of a tuple; the twin: ``op``
    itself)."""
    def kernel(*args: Any, **kwargs: Any) -> Any:
        out = op(*args, **kwargs)
        if not planted:
            return out
        if isinstance(out, tuple):
            return tuple(None if t is None else t * (1 + off) for t in out)
        return out * (1 + off)
    return kernel


def scaled(op: Any, off: float = OFF) -> Planting:
    """A backward off by the factor ``1 + off`` (the bug is in the slope alone)."""
    return lambda planted: {op: _scaled(op, planted, off)}


def silu_forward_scaled(planted: bool) -> Mapping[Any, Kernel]:
    """SiLU's result times ``1 + OFF`` (the twin: torch's own), as the eager module calls
    it (``silu``) and as its traced graph runs it (``sigmoid``, then a ``mul``); plant it in
    one layer with :class:`~tests.blocks.planted_kernels.InLayer`."""
    return {op: _scaled(op, planted) for op in (aten.silu.default, aten.sigmoid.default)}


def gelu_typo(planted: bool) -> Mapping[Any, Kernel]:
    """The erf GELU ``x Φ(x)`` with ``1/√2`` written ``TYPO``: torch's ``gelu`` plus the
    change the typo makes, ``x (erf(x·TYPO) − erf(x/√2)) / 2`` (the twin: torch's alone);
    its backward is torch's ``gelu_backward``."""
    def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        out = aten.gelu.default(x, approximate=approximate)
        if not planted:
            return out
        assert approximate == "none", "only the erf form is planted"
        return out + x * (torch.erf(x * TYPO) - torch.erf(x * math.sqrt(0.5))) / 2
    return {aten.gelu.default: gelu}


def gelu_tanh_form(planted: bool) -> Mapping[Any, Kernel]:
    """The erf GELU computed by its tanh approximation (``approximate="tanh"``, the form of
    ``gelu_new``) where the module declares the erf form; its backward torch's erf one."""
    def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        return aten.gelu.default(x, approximate="tanh" if planted else approximate)
    return {aten.gelu.default: gelu}


def loose_eps(planted: bool) -> Mapping[Any, Kernel]:
    """``native_layer_norm`` with ``LOOSE_EPS`` in place of the module's epsilon."""
    def norm(x: torch.Tensor, shape: list[int], weight: torch.Tensor | None,
             bias: torch.Tensor | None, eps: float) -> Any:
        return aten.native_layer_norm.default(x, shape, weight, bias,
                                              LOOSE_EPS if planted else eps)
    return {aten.native_layer_norm.default: norm}


def norm_backward_without_mean(planted: bool) -> Mapping[Any, Kernel]:
    """``native_layer_norm_backward`` whose input gradient drops the mean term:
    ``σ⁻¹ (ĝ − x̂·mean(ĝ x̂))`` for ``σ⁻¹ (ĝ − mean(ĝ) − x̂·mean(ĝ x̂))``, ``ĝ = ȳ·w``; the
    weight's and bias's gradients torch's."""
    def backward(grad: torch.Tensor, x: torch.Tensor, shape: list[int], mean: torch.Tensor,
                 rstd: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 mask: list[bool]) -> Any:
        found = aten.native_layer_norm_backward.default(grad, x, shape, mean, rstd, weight,
                                                        bias, mask)
        if not planted or found[0] is None:
            return found
        assert len(shape) == 1, "only a norm over the last axis is planted"
        scaled_grad = grad if weight is None else grad * weight
        dropped = rstd * scaled_grad.mean(-1, keepdim=True)
        return (found[0] + dropped, *found[1:])
    return {aten.native_layer_norm_backward.default: backward}


def swapped_cat(planted: bool) -> Mapping[Any, Kernel]:
    """``cat`` of two tensors along the last axis in the wrong order: Llama's
    ``rotate_half`` gives ``(x₁, −x₂)`` for ``(−x₂, x₁)``; every other ``cat`` torch's."""
    def cat(tensors: list[torch.Tensor], dim: int = 0) -> torch.Tensor:
        last = dim in (-1, tensors[0].dim() - 1)
        if planted and len(tensors) == 2 and last:
            tensors = tensors[::-1]
        return aten.cat.default(tensors, dim)
    return {aten.cat.default: cat}


def _narrowed(op: Any, planted: bool) -> Kernel:
    """``op`` on float32 tensors with its result rounded to bfloat16 (the twin: ``op``)."""
    def kernel(*args: Any, **kwargs: Any) -> Any:
        out = op(*args, **kwargs)
        return out.to(torch.bfloat16).to(out.dtype) if planted else out
    return kernel


def rms_without_upcast(planted: bool) -> Mapping[Any, Kernel]:
    """Llama's RMSNorm statistics without their float32 upcast: ``x²``, its mean and
    ``rsqrt`` each rounded to bfloat16, as a bfloat16 norm computes them (planted on the
    float32 ops of a bfloat16 layer: the norm's, the only ones there)."""
    ops = (aten.pow.Tensor_Scalar, aten.mean.dim, aten.rsqrt.default)
    return {op: _narrowed(op, planted) for op in ops}


def _or_torch(op: Any, kernel: Kernel, planted: bool) -> Mapping[Any, Kernel]:
    return {op: kernel if planted else op}


def precision(op: Any, kernel: Kernel) -> Planting:
    """A bfloat16 kernel of :mod:`tests.blocks.planted_kernels` behind ``op`` (the twin:
    torch's ``op``)."""
    return lambda planted: _or_torch(op, kernel, planted)


@dataclass(frozen=True)
class Bug:
    """One planted bug: where (``layer``, a catalog recipe; ``dtype``), what (``kind``), and
    the judgement expected to catch it: ``"whole"`` (the whole program's budget),
    ``"local"`` (an op's own), or ``""`` for a bug not caught today, ``why`` saying why."""

    name: str
    layer: str
    dtype: str
    kind: str
    kernels: Planting = field(repr=False)
    caught_by: str
    fires_on: frozenset[torch.dtype] = field(default=frozenset({torch.float64}), repr=False)
    """The dtypes the kernels are planted on (every tensor argument one of them)."""
    why: str = ""

    def mode(self, planted: bool = True) -> Kernels:
        """The dispatch mode running the bug (``planted``) or its twin."""
        return Kernels(self.kernels(planted), self.fires_on)


F32, BF16 = frozenset({torch.float32}), frozenset({torch.bfloat16})
BUGS = {bug.name: bug for bug in (
    Bug("softmax backward ×(1+2⁻¹⁰)", "hf.BertLayer", "float64", "backward only, attention",
        scaled(aten._softmax_backward_data.default), "whole"),
    Bug("GELU 1/√2 written 0.7071", "hf.BertLayer", "float64", "forward constant",
        gelu_typo, "whole"),
    Bug("layer norm eps 1e-3 (module's 1e-12)", "hf.BertLayer", "float32", "normalization",
        loose_eps, "local", F32),
    Bug("layer norm backward without mean(ĝ)", "hf.BertLayer", "float64",
        "backward only, normalization", norm_backward_without_mean, "whole"),
    Bug("softmax sums in bf16", "hf.BertLayer", "bfloat16", "precision: attention",
        precision(aten._softmax.default, narrow_softmax), "local", BF16),
    Bug("layer norm statistics in bf16", "hf.BertLayer", "bfloat16",
        "precision: normalization",
        precision(aten.native_layer_norm.default, narrow_layer_norm), "local", BF16),
    Bug("Conv1D addmm summed in bf16 (4 chunks)", "hf.GPT2Block", "bfloat16",
        "precision: reduced-precision accumulation",
        precision(aten.addmm.default, chunked_addmm(4)), "local", BF16),
    Bug("softmax sums in bf16 (GPT-2)", "hf.GPT2Block", "bfloat16", "precision: attention",
        precision(aten._softmax.default, narrow_softmax), "local", BF16),
    Bug("rotate_half cat swapped", "hf.LlamaDecoderLayer", "float64", "attention (rotary)",
        swapped_cat, "local"),
    Bug("RMSNorm without its float32 upcast", "hf.LlamaDecoderLayer", "bfloat16",
        "precision: missing upcast", rms_without_upcast, "local", F32),
    Bug("SiLU backward ×(1+2⁻¹⁰)", "hf.LlamaDecoderLayer", "float64", "backward only",
        scaled(aten.silu_backward.default), "local"),
    Bug("GELU erf computed in its tanh form", "timm.vit.Block", "float32",
        "forward formula (activation)", gelu_tanh_form, "local", F32),
    Bug("layer norm backward without mean(ĝ) (ViT)", "timm.vit.Block", "float64",
        "backward only, normalization", norm_backward_without_mean, "whole"),
)}
"""Every planted bug by name, in the order of the findings' table."""
