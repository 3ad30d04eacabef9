"""Deliberately broken backends the mutant catalog lacks: each plants a single, realistic
bug in the reference, as the foil of one property.

The meta-tests prove that every property of the suite catches a bug (and that the
unbroken bases pass); they draw it from the mutant catalog (:mod:`tests.mutants`)
wherever the catalog plants it, and from here otherwise. What is here differs from its
nearest catalog mutant in where the bug shows, and the property that catches it is there
to pin that place: an over-strict add, a refused merge or an accepted one that writes
into its input, a pending gradient overwritten by each new contribution (the catalog's
overwrite waits for the third), scale dropped at every depth (the catalog's past depth
8), a cache of scale results, a merge rounded through float32, ``ȳ w`` for ``ȳ wᵀ`` on
square weights only, a skipped zero branch, a random last-bit flip, float64 gradients,
float32 past width 16, gradient buffers pooled by shape, and contiguous-run
un-broadcasting. They are ordinary backends, so they also work from the command line:
``pytest --backend tests.broken_backends:OverwrittenGrads``.

The base re-runs the reference ops through overridable hooks (``leaf``, ``apply``,
``backward``, ``finish``, and ``tangent`` for forward mode: each node's tangent from its
op's ``numpy_jvp``); its ``linear`` reshapes by the product of the leading axes so
that an empty inner axis works (the reference's ``reshape(-1, 0)`` does not), keeping the
base itself free of failures. It claims forward mode (``jvp``) as the reference does;
:mod:`tests.broken_jvp_backends` plants the forward-mode bugs the catalog lacks.
:mod:`tests.broken_norm_backends` builds on the same base.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.interpret import node_alpha
from resverify.impl.numpy_backend import NumpyBackend, apply
from resverify.impl.tensor import Tensor, _topological
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node, node_shape
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request, Result, ResultError, Value


def linear(x: Tensor, w: Tensor, transpose: bool = True) -> Tensor:
    """``x @ w`` with VJP ``x̄ = ȳ wᵀ`` (or ``ȳ w`` when ``transpose`` is False: a bug)."""
    node_shape("linear", (x.shape, w.shape))

    def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d_in, d_out = w.shape
        rows = math.prod(x.shape[:-1])
        gw = x.value.reshape(rows, d_in).T @ g.reshape(rows, d_out)
        square = w.shape[0] == w.shape[1]
        gx = g @ (w.value.T if transpose or not square else w.value)
        return np.asarray(gx, x.dtype), np.asarray(gw, w.dtype)

    return Tensor(np.asarray(x.value @ w.value, x.dtype), (x, w), vjp, "linear")


MODES = ("vjp", "jvp")


class Reference(NumpyBackend):
    """The unbroken base: the reference ops behind overridable hooks, in both modes."""

    name = "reference-base"
    capabilities = dataclasses.replace(NumpyBackend.capabilities, modes=MODES)

    def leaf(self, value: np.ndarray) -> Tensor:
        return Tensor(np.array(value, copy=True))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "linear":
            return linear(args[0], args[1])
        return apply(node, args)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        out.backward(seed)

    def finish(self, result: Value) -> Value:
        return result

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The input tangents the forward pass starts from (private copies)."""
        return {name: np.array(t, copy=True) for name, t in tangents.items()}

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        """The node's output tangent from its arguments' tangents ``ts`` (forward mode)."""
        jvp = OP_TABLE[node.op].numpy_jvp(ts, [a.value for a in args], out.value,
                                          node_alpha(node))
        return np.asarray(jvp, dtype=out.dtype)

    def run(self, request: Request) -> Result:
        leaves = {name: self.leaf(v) for name, v in request.inputs.items()}
        env: dict[str, Tensor] = dict(leaves)
        tangents = None if request.tangents is None else self.seed_tangents(request.tangents)
        try:
            for node in request.program.order:
                args = [env[a] for a in node.args]
                env[node.name] = self.apply(node, args)
                if tangents is not None:
                    tangents[node.name] = self.tangent(
                        node, args, [tangents[a] for a in node.args], env[node.name])
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        out = env[request.program.output]
        self.backward(out, request.cotangent)
        grads = {n: t.grad if t.grad is not None else np.zeros_like(t.value)
                 for n, t in leaves.items()}
        tangent = None if tangents is None else tangents[request.program.output]
        return self.finish(Value(np.array(out.value, copy=True), grads, tangent))


def _tensor(value: np.ndarray, parents: tuple[Tensor, ...], vjp: object, op: str) -> Tensor:
    return Tensor(value, parents, vjp, op)  # type: ignore[arg-type]


class StrictAdd(Reference):
    """Ordinary add refuses broadcasting, as if it were the residual merge."""

    name = "broken-strict-add"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "add" and args[0].shape != args[1].shape:
            raise ShapeMismatch("add", args[0].shape, args[1].shape)
        return super().apply(node, args)


class _Aliasing(Reference):
    """Leaves share memory with the request's arrays (no defensive copy)."""

    def leaf(self, value: np.ndarray) -> Tensor:
        value.flags.writeable = True
        return Tensor(value)


class MutatingReject(_Aliasing):
    """A refused merge first clears the identity operand in place, then raises."""

    name = "broken-mutating-reject"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape != args[1].shape:
            args[0].value[...] = 0
        return super().apply(node, args)


class MutatingMerge(_Aliasing):
    """The merge accumulates into its identity operand in place (``x += F(x)``)."""

    name = "broken-mutating-merge"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape == args[1].shape:
            identity, branch = args
            identity.value += branch.value
            return _tensor(identity.value, (identity, branch), lambda g: (g, g), "residual_add")
        return super().apply(node, args)


class OverwrittenGrads(Reference):
    """Backward overwrites a tensor's pending gradient instead of accumulating it."""

    name = "broken-overwritten-grads"

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        pending: dict[int, np.ndarray] = {id(out): np.asarray(seed, dtype=out.dtype)}
        for node in reversed(_topological(out)):
            g = pending.pop(id(node))
            node.grad = g.copy()
            if node.vjp is not None:
                for parent, part in zip(node.parents, node.vjp(g), strict=True):
                    pending[id(parent)] = np.asarray(part, dtype=parent.dtype)


class IgnoresScale(Reference):
    """scale is dropped entirely (so is the 1/√L rescaling)."""

    name = "broken-ignores-scale"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "scale":
            a = args[0]
            return _tensor(a.value.copy(), (a,), lambda g: (g,), "scale")
        return super().apply(node, args)


class CorrelatedUpdates(Reference):
    """A cache keyed by (α, shape) hands every later scale the first one's result."""

    name = "broken-correlated-updates"

    def run(self, request: Request) -> Result:
        self._cache: dict[tuple[object, tuple[int, ...]], Tensor] = {}
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "scale":
            key = (node.alpha, args[0].shape)
            if key not in self._cache:
                self._cache[key] = super().apply(node, args)
            return self._cache[key]
        return super().apply(node, args)


class Float32InFloat64(Reference):
    """The merge rounds through float32 even in a float64 program."""

    name = "broken-float32-merge"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        if node.op == "residual_add":
            out.value = out.value.astype(np.float32).astype(out.value.dtype)
        return out


class UntransposedLinear(Reference):
    """linear's input VJP uses ``ȳ w`` instead of ``ȳ wᵀ`` (unnoticed for square w shapes)."""

    name = "broken-untransposed-linear"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "linear":
            return linear(args[0], args[1], transpose=False)
        return super().apply(node, args)


class SkipZeroBranch(Reference):
    """An all-zero branch is dropped from the graph: it then gets no gradient at all."""

    name = "broken-skip-zero-branch"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        identity, branch = args[0], args[-1]
        if node.op == "residual_add" and identity.shape == branch.shape and not np.any(
                branch.value):
            return _tensor(identity.value.copy(), (identity,), lambda g: (g,), "residual_add")
        return super().apply(node, args)


class Nondeterministic(Reference):
    """Like a racy parallel reduction: the last bit of one output element sometimes flips."""

    name = "broken-nondeterministic"

    def finish(self, result: Value) -> Value:
        out = np.array(result.output, copy=True)
        if out.size and np.random.default_rng().random() < 0.5:
            flat = out.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf, dtype=out.dtype)
        return dataclasses.replace(result, output=out)


class WrongDtype(Reference):
    """Gradients come back in float64 whatever the request's dtype."""

    name = "broken-wrong-dtype"

    def finish(self, result: Value) -> Value:
        grads = {k: np.asarray(v, dtype=np.float64) for k, v in result.grads.items()}
        return dataclasses.replace(result, grads=grads)


class WidePrecisionSwitch(Reference):
    """A "fast path" for wide layers: linear computes in float32 when d_in > 16, any dtype."""

    name = "broken-wide-float32"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        x, w = args[0], args[-1]
        if node.op == "linear" and w.shape[0] > 16:
            product = x.value.astype(np.float32) @ w.value.astype(np.float32)
            out.value = product.astype(x.dtype)
        return out


class SharedWeightGrads(Reference):
    """Gradient buffers pooled by shape: same-shaped weights (2-D inputs) share one buffer.

    Every weight of a shape ends up with the sum of their gradients, which is right only
    when a single weight has that shape.
    """

    name = "broken-shared-grad-buffer"

    def finish(self, result: Value) -> Value:
        pools: dict[tuple[int, ...], np.ndarray] = {}
        for grad in result.grads.values():
            if grad.ndim == 2:
                pools[grad.shape] = pools.get(grad.shape, np.zeros_like(grad)) + grad
        grads = {k: pools[v.shape] if v.ndim == 2 else v for k, v in result.grads.items()}
        return dataclasses.replace(result, grads=grads)


def contiguous_unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sums contiguous runs of ``grad`` down to ``shape``: right only for trailing broadcasts.

    The shape and, under an all-ones cotangent, every value come out right.
    """
    size = math.prod(shape)
    if size == 0 or grad.size == 0:
        return np.zeros(shape, grad.dtype)
    return np.asarray(grad.reshape(size, -1).sum(axis=1).reshape(shape), grad.dtype)


class WrongAxisUnbroadcast(Reference):
    """add and mul un-broadcast their gradients by summing the wrong axes."""

    name = "broken-unbroadcast-axes"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        a, b = args[0], args[-1]
        if node.op == "add":
            out.vjp = lambda g: (contiguous_unbroadcast(g, a.shape),
                                 contiguous_unbroadcast(g, b.shape))
        elif node.op == "mul":
            out.vjp = lambda g: (contiguous_unbroadcast(g * b.value, a.shape),
                                 contiguous_unbroadcast(g * a.value, b.shape))
        return out


SUBSET_OPS = ("add", "layer_norm", "linear", "mul", "residual_add", "rms_norm", "scale", "sum")


class Float64Subset(Reference):
    """Not broken: a correct backend that claims float64 and a subset of the ops (no relu,
    no tanh)."""

    name = "float64-subset"
    capabilities = Capabilities(dtypes=("float64",), ops=SUBSET_OPS, modes=MODES)


BROKEN: tuple[type[Reference], ...] = (
    CorrelatedUpdates, Float32InFloat64, IgnoresScale, MutatingMerge, MutatingReject,
    Nondeterministic, OverwrittenGrads, SharedWeightGrads, SkipZeroBranch, StrictAdd,
    UntransposedLinear, WidePrecisionSwitch, WrongAxisUnbroadcast, WrongDtype,
)
