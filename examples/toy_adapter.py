"""A toy float64 NumPy engine (five ops, gradients by hand) as a complete resverify adapter."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from resverify.impl import Capabilities
from resverify.spec import Node, Request, Result, ResultError, ShapeMismatch, Value, infer_shapes

Arrays = list[np.ndarray]
Forward = Callable[[Node, Arrays], np.ndarray]  # (node, argument values) -> value y
Backward = Callable[[Node, Arrays, np.ndarray, np.ndarray], Arrays]  # (node, args, y, ȳ) -> āᵢ
OPS: dict[str, tuple[Forward, Backward]] = {
    "residual_add": (lambda n, a: a[0] + a[1], lambda n, a, y, g: [g, g]),
    "scale": (lambda n, a: np.float64(n.alpha) * a[0],  # α: an exact Fraction, rounded once
              lambda n, a, y, g: [np.float64(n.alpha) * g]),
    "linear": (lambda n, a: a[0] @ a[1], lambda n, a, y, g: [g @ a[1].T, np.tensordot(
        a[0], g, (list(range(a[0].ndim - 1)), list(range(g.ndim - 1))))]),
    "relu": (lambda n, a: np.where(a[0] > 0, a[0], 0.0),
             lambda n, a, y, g: [np.where(a[0] > 0, g, 0.0)]),
    "sum": (lambda n, a: a[0].sum(), lambda n, a, y, g: [np.broadcast_to(g, a[0].shape)]),
}


class ToyBackend:
    name = "toy"
    capabilities = Capabilities(dtypes=("float64",), ops=tuple(OPS))

    def run(self, request: Request) -> Result:
        if (refused := self.capabilities.unclaimed(request, self.name)) is not None:
            return refused  # an `unsupported` result: a dtype or op this engine does not claim
        try:
            infer_shapes(request.program)
        except ShapeMismatch as exc:  # e.g. residual_add of [2, 2] and [2]
            return ResultError.mismatch(exc)
        program, env = request.program, dict(request.inputs)
        for node in program.order:  # every argument before its use
            env[node.name] = np.asarray(OPS[node.op][0](node, [env[a] for a in node.args]))
        grads = {name: np.zeros_like(value) for name, value in env.items()}
        grads[program.output] += request.cotangent  # present whenever the shapes fit
        for node in reversed(program.order):
            args, y, g = [env[a] for a in node.args], env[node.name], grads[node.name]
            for name, grad in zip(node.args, OPS[node.op][1](node, args, y, g), strict=True):
                grads[name] = grads[name] + grad
        return Value(env[program.output],
                     grads={i.name: np.asarray(grads[i.name]) for i in program.inputs})
