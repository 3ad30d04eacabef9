"""The reference backend: interprets IR requests with the NumPy autograd of this package.

Each node runs its op's reference rule from :mod:`resverify.spec.ops` through
:func:`resverify.impl.ops.apply_op`. Forward mode (``jvp``) is claimed: a request's input
tangents ride on the leaf tensors, each op's ``numpy_jvp`` carries them along with the
values, and the same run then pulls the cotangent back for the gradients.
"""

from __future__ import annotations

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.interpret import interpret, node_alpha
from resverify.impl.ops import apply_op
from resverify.impl.tensor import Tensor
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.request import Request, Result, ResultError, Value


def apply(node: Node, args: list[Tensor]) -> Tensor:
    """Apply one IR node to tensors."""
    return apply_op(node.op, args, node_alpha(node))


class NumpyBackend:
    """The NumPy reference implementation (``--backend numpy``, the default)."""

    name = "numpy"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16"), device="cpu",
                                modes=("vjp", "jvp"))

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        tangents = request.tangents or {}
        leaves = {name: Tensor(np.array(v, copy=True), tangent=tangents.get(name))
                  for name, v in request.inputs.items()}
        try:
            out = interpret(request.program, leaves, apply)
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        out.backward(request.cotangent)
        grads = {
            name: t.grad if t.grad is not None else np.zeros_like(t.value)
            for name, t in leaves.items()
        }
        tangent = None if out.tangent is None else np.array(out.tangent, copy=True)
        return Value(np.array(out.value, copy=True), grads=grads, tangent=tangent)


