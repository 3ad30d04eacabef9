"""PyTorch adapter (``--backend torch`` or ``torch-cuda``): IR requests through torch autograd.

Each IR op is written once for every array library in its entry in
:mod:`resverify.spec.ops` (``array``: the operators and :class:`ArrayNamespace` functions a
model author would write); torch supplies its namespace (``layer_norm`` and ``rms_norm``
are ``torch.nn.functional``'s own, which compute half-precision statistics in float32),
and the entry's shape rule adds the exact-shape check of ``residual_add`` that ``+`` lacks.
Values cross from NumPy exactly (bfloat16 requests are stored in float32 and converted
without rounding), and results come back the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.interpret import array_apply, interpret
from resverify.spec.errors import ShapeMismatch, UsageError
from resverify.spec.ir import Node
from resverify.spec.ops import ArrayNamespace
from resverify.spec.request import Request, Result, ResultError, Value, storage_dtype

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None  # type: ignore[assignment, unused-ignore]  # an ignore only when torch is installed


class TorchBackend:
    """Runs requests with ``torch.autograd`` on the CPU or on a CUDA device."""

    def __init__(self, device: str = "cpu") -> None:
        if torch is None:
            raise UsageError("the torch backend needs PyTorch: pip install 'resverify[torch]'")
        if device == "cuda" and not torch.cuda.is_available():
            raise UsageError("torch-cuda: no CUDA device is available on this machine")
        self.device = device
        self.name = "torch" if device == "cpu" else f"torch-{device}"
        self.capabilities = Capabilities(
            dtypes=("float64", "float32", "float16", "bfloat16"), device=device)
        self.xp = ArrayNamespace(
            relu=torch.relu, tanh=torch.tanh, sum=torch.sum,
            layer_norm=lambda x, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps),
            rms_norm=lambda x, eps: torch.nn.functional.rms_norm(x, x.shape[-1:], eps=eps))

    def _tensor(self, values: np.ndarray, dtype: str, grad: bool) -> Any:
        t = torch.from_numpy(np.array(values, copy=True)).to(self.device)
        return t.to(getattr(torch, dtype)).requires_grad_(grad)

    @staticmethod
    def _numpy(t: Any) -> np.ndarray:
        """A NumPy copy in torch's own dtype (bfloat16 widened exactly to float32)."""
        t = t.detach().to("cpu")
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy()

    def _apply(self, node: Node, args: list[Any]) -> Any:
        return array_apply(self.xp, node, args)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        leaves = {k: self._tensor(v, request.dtype, True) for k, v in request.inputs.items()}
        try:
            out = interpret(request.program, leaves, self._apply)
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        seed = self._tensor(request.cotangent, request.dtype, False)
        if out.requires_grad:
            out.backward(seed)
        grads = {k: self._numpy(t.grad) if t.grad is not None
                 else np.zeros(t.shape, storage_dtype(request.dtype)) for k, t in leaves.items()}
        return Value(self._numpy(out), grads=grads)
