"""PyTorch adapter (``--backend torch`` or ``torch-cuda``): IR requests through torch autograd.

Each IR op maps to the torch op a model author would write; ``residual_add`` adds the
exact-shape check that ``+`` lacks. Values cross from NumPy exactly (bfloat16 requests are
stored in float32 and converted without rounding), and results come back the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from resverify.impl.backend import Capabilities, scale_alpha
from resverify.impl.interpret import interpret
from resverify.spec.errors import ShapeMismatch, UsageError
from resverify.spec.ir import Node, node_shape
from resverify.spec.request import Request, Result, storage_dtype

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None  # type: ignore[assignment, unused-ignore]  # an ignore only when torch is installed


def _residual_add(a: Any, b: Any) -> Any:
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeMismatch("residual_add", tuple(a.shape), tuple(b.shape))
    return a + b


def _checked(op: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(a: Any, b: Any) -> Any:
        node_shape(op, (tuple(a.shape), tuple(b.shape)))
        return fn(a, b)
    return apply


_OPS: dict[str, Callable[..., Any]] = {
    "add": _checked("add", lambda a, b: a + b),
    "mul": _checked("mul", lambda a, b: a * b),
    "linear": _checked("linear", lambda x, w: x @ w),
    "residual_add": _residual_add,
    "relu": lambda a: torch.relu(a),
    "tanh": lambda a: torch.tanh(a),
    "sum": lambda a: a.sum(),
}


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

    def _tensor(self, values: np.ndarray, dtype: str, grad: bool) -> Any:
        t = torch.from_numpy(np.array(values, copy=True)).to(self.device)
        return t.to(getattr(torch, dtype)).requires_grad_(grad)

    @staticmethod
    def _numpy(t: Any) -> np.ndarray:
        """A NumPy copy in torch's own dtype (bfloat16 widened exactly to float32)."""
        t = t.detach().to("cpu")
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy()

    def _apply(self, node: Node, args: list[Any]) -> Any:
        if node.op == "scale":
            return args[0] * float(scale_alpha(node))
        return _OPS[node.op](*args)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        leaves = {k: self._tensor(v, request.dtype, True) for k, v in request.inputs.items()}
        try:
            out = interpret(request.program, leaves, self._apply)
        except ShapeMismatch as exc:
            return Result.mismatch(exc)
        assert request.cotangent is not None
        seed = self._tensor(request.cotangent, request.dtype, False)
        if out.requires_grad:
            out.backward(seed)
        grads = {k: self._numpy(t.grad) if t.grad is not None
                 else np.zeros(t.shape, storage_dtype(request.dtype)) for k, t in leaves.items()}
        return Result(output=self._numpy(out), grads=grads)
