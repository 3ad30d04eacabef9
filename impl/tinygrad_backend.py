"""tinygrad adapter (``--backend tinygrad``): lazy tensors, kernels compiled on demand.

tinygrad builds a lazy graph of the whole computation, fuses it into kernels and compiles
them (with clang on the CPU device) only when a value is read: even "eager" tinygrad is a
compiler, so it is the engine that most freely reorders and fuses. Its ``tanh`` is not a
library call but ``2·sigmoid(2x) - 1`` built from ``exp2``, and its float64 runs through
the same code generator. The program is each op entry's array form from
:mod:`resverify.spec.ops` over ``Tensor.relu``, ``Tensor.tanh``, ``Tensor.sum`` and the
normalizations below; the
VJP is tinygrad's own ``out.gradient(*inputs, gradient=cotangent)`` (what
``out.backward(cotangent)`` fills ``.grad`` with). An input the output does not use gets a
zero gradient, as in every adapter.

Install with ``pip install 'resverify[tinygrad]'``; the CPU device needs ``clang`` on the
``PATH`` (Debian: ``apt-get install clang``), and the adapter says so when it is missing.
bfloat16 is not claimed: tinygrad renders it as C's ``__bf16``, which clang accepts on
x86-64 only from version 15 (Debian 12 ships 14: "__bf16 is not supported on this
target"), so whether it works depends on the compiler, not on tinygrad.

The normalizations are tinygrad's own: ``layer_norm`` is ``Tensor.layernorm(axis=-1,
eps=ε)``; ``rms_norm`` is the formula of the module ``nn.RMSNorm`` (tinygrad has no rms_norm
function), ``x * (x.square().mean(-1, keepdim=True) + ε).rsqrt()``, in the input's dtype.
The module itself is not called: it computes in ``x.float()`` (float32) and casts back, so a
float64 input is normalized in float32 (docs/findings.md; :class:`TinygradNnRMSNorm` is the
adapter with the module, to replay that). The ops' shared composition does not run on
tinygrad, whose ``mean`` spells ``keepdims`` as ``keepdim``. ε is a Python float, which
tinygrad adds in the tensor's dtype.
"""

from __future__ import annotations

import importlib
import shutil
from typing import Any

import numpy as np

from resverify.impl.about import distribution_version
from resverify.impl.backend import Capabilities
from resverify.impl.interpret import array_apply, interpret
from resverify.spec.errors import ShapeMismatch, UsageError
from resverify.spec.ir import Node
from resverify.spec.ops import ArrayNamespace
from resverify.spec.request import Request, Result, ResultError, Value

CLAIMED_OPS = ("add", "residual_add", "mul", "scale", "linear", "relu", "tanh", "sum",
               "layer_norm", "rms_norm", "sigmoid", "silu", "gelu_tanh", "neg")
"""Every op of the IR but the layout ops, exp and gelu_erf (checked in every claimed dtype:
docs/findings.md): tinygrad's ``exp2(x log2 e)`` is off by ``|x|`` ulps, beyond ``EXP_ULPS``
(spec/ops/exp.py), and its float64 ``erf`` by about 100 units of ``u|x|`` in GELU
(``GELU_ERF_ULPS`` is 8)."""


class TinygradBackend:
    """Runs requests on tinygrad's CPU device."""

    name = "tinygrad"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16"), ops=CLAIMED_OPS)

    def __init__(self) -> None:
        try:
            self.tinygrad = importlib.import_module("tinygrad")
        except ImportError:
            raise UsageError(
                "the tinygrad backend needs tinygrad: pip install 'resverify[tinygrad]'"
            ) from None
        if shutil.which("clang") is None:
            raise UsageError("tinygrad's CPU device compiles with clang, which is not on the "
                             "PATH (Debian: apt-get install clang)")
        self.Tensor = self.tinygrad.Tensor
        self.device = "CPU"
        self.xp = ArrayNamespace(self.Tensor, layer_norm=self.layer_norm,
                                 rms_norm=self.rms_norm,
                                 gelu_tanh=lambda a: a.gelu(approximate="tanh"))

    @staticmethod
    def layer_norm(x: Any, eps: float) -> Any:
        """tinygrad's own ``Tensor.layernorm`` over the last axis."""
        return x.layernorm(axis=-1, eps=eps)

    @staticmethod
    def rms_norm(x: Any, eps: float) -> Any:
        """``nn.RMSNorm``'s formula in the input's dtype (see the module docstring)."""
        return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt()

    def about(self) -> dict[str, str]:
        return {"library": "tinygrad", "version": distribution_version("tinygrad"),
                "device": "cpu", "tinygrad_device": self.device, "compiler": "clang"}

    def array(self, values: np.ndarray, dtype: str) -> Any:
        """A tinygrad tensor in ``dtype``."""
        stored = self.Tensor(np.array(values, copy=True), device=self.device)
        return stored.cast(getattr(self.tinygrad.dtypes, dtype))

    @staticmethod
    def numpy(value: Any) -> np.ndarray:
        """A NumPy copy in tinygrad's dtype."""
        return np.array(value.numpy(), copy=True)

    def _apply(self, node: Node, args: list[Any]) -> Any:
        return array_apply(self.xp, node, args)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        names = request.program.input_names
        leaves = [self.array(request.inputs[n], request.dtype) for n in names]
        try:
            out = interpret(request.program, dict(zip(names, leaves, strict=True)), self._apply)
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        pulled = out.gradient(*leaves, gradient=self.array(request.cotangent, request.dtype))
        return Value(self.numpy(out),
                     grads={n: self.numpy(g) for n, g in zip(names, pulled, strict=True)})


class TinygradNnRMSNorm(TinygradBackend):
    """tinygrad with ``rms_norm`` as the module ``nn.RMSNorm(n, eps, elementwise_affine=False)``
    (``--backend resverify.impl.tinygrad_backend:TinygradNnRMSNorm``): it computes in float32
    whatever the input's dtype, so float64 misses its budget (docs/findings.md)."""

    name = "tinygrad-nn-rmsnorm"

    def rms_norm(self, x: Any, eps: float) -> Any:  # type: ignore[override]
        """The module, as a tinygrad user writes it."""
        module = importlib.import_module("tinygrad.nn")
        return module.RMSNorm(x.shape[-1], eps=eps, elementwise_affine=False)(x)
