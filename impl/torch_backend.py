"""PyTorch adapter (``--backend torch`` or ``torch-cuda``): IR requests through torch autograd.

Each IR op is written once for every array library in its entry in
:mod:`resverify.spec.ops` (``array``: the operators and :class:`ArrayNamespace` functions a
model author would write); torch supplies its namespace (``layer_norm`` and ``rms_norm``
are ``torch.nn.functional``'s own, which compute half-precision statistics in float32),
and the entry's shape rule adds the exact-shape check of ``residual_add`` that ``+`` lacks.
Values cross from NumPy exactly (bfloat16 requests are stored in float32 and converted
without rounding), and results come back the same way.

Forward mode (a request with tangents) is ``torch.func.jvp`` over the program as a pure
function of its inputs, as a functorch user writes it; the output and the gradients come
from the same eager ``backward`` as a reverse-mode request's.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def torch_deprecations_ignored() -> Iterator[None]:
    """Inductor calls ``torch.jit.script_method`` and the first ``torch.func.jvp`` loads
    decompositions through ``torch.jit.script``, both deprecated in torch itself; a run
    whose warnings are errors (pytest's ``-W error``) must not fail on torch's own."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning,
                                message=".*torch.jit.script.* is deprecated")
        yield


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
            dtypes=("float64", "float32", "float16", "bfloat16"), device=device,
            modes=("vjp", "jvp"))
        self.xp = ArrayNamespace(
            torch, torch.nn.functional, permute_dims=torch.permute,
            cast=lambda x, dtype: x.to(getattr(torch, dtype)),
            take=lambda x, i, axis: torch.index_select(x, axis, torch.as_tensor(i)),
            layer_norm=lambda x, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps),
            rms_norm=lambda x, eps: torch.nn.functional.rms_norm(x, x.shape[-1:], eps=eps),
            gelu_erf=torch.nn.functional.gelu,
            gelu_tanh=lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
            conv2d=lambda x, w, *geometry: torch.nn.functional.conv2d(x, w, None, *geometry))

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
        return Value(self._numpy(out), grads=grads, tangent=self._jvp(request))

    def _jvp(self, request: Request) -> np.ndarray | None:
        """``J·t`` by ``torch.func.jvp``, or None for a reverse-mode request."""
        if request.tangents is None:
            return None
        names = request.program.input_names
        primals = tuple(self._tensor(request.inputs[n], request.dtype, False) for n in names)
        tangents = tuple(self._tensor(request.tangents[n], request.dtype, False) for n in names)

        def program(*values: Any) -> Any:
            return interpret(request.program, dict(zip(names, values, strict=True)), self._apply)

        with torch_deprecations_ignored():
            tangent = torch.func.jvp(program, primals, tangents)[1]
        # torch.func.jvp promotes a rank-0 tangent times a Python float to float64 while the
        # primal stays in its dtype (docs/findings.md); the cast back is one rounding of a
        # more accurate value, which the request dtype's budget covers.
        return self._numpy(tangent.to(getattr(torch, request.dtype)))
