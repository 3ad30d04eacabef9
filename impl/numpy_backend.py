"""The reference backend: interprets IR requests with the NumPy autograd of this package."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from resverify.impl import ops
from resverify.impl.backend import Capabilities, scale_alpha
from resverify.impl.interpret import interpret
from resverify.impl.tensor import Tensor
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.request import Request, Result

_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "add": ops.add, "mul": ops.mul, "residual_add": ops.residual_add, "linear": ops.linear,
}
_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": ops.relu, "tanh": ops.tanh, "sum": ops.sum_all,
}


def apply(node: Node, args: list[Tensor]) -> Tensor:
    """Apply one IR node to tensors."""
    if node.op == "scale":
        return ops.scale(args[0], scale_alpha(node))
    if node.op in _BINARY:
        return _BINARY[node.op](args[0], args[1])
    return _UNARY[node.op](args[0])


class NumpyBackend:
    """The NumPy reference implementation (``--backend numpy``, the default)."""

    name = "numpy"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16"), device="cpu")

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        leaves = {name: Tensor(np.array(v, copy=True)) for name, v in request.inputs.items()}
        try:
            out = interpret(request.program, leaves, apply)
        except ShapeMismatch as exc:
            return Result.mismatch(exc)
        assert request.cotangent is not None
        out.backward(request.cotangent)
        grads = {
            name: t.grad if t.grad is not None else np.zeros_like(t.value)
            for name, t in leaves.items()
        }
        return Result(output=np.array(out.value, copy=True), grads=grads)


