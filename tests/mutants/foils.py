"""Foils: broken backends that exist to pin one law each, where no scored mutant does.

A law of the suite is only trusted once a bug it alone is written for fails it. The
scored mutants (``make mutants``) are bugs engines are known to ship; a foil is the
nearest bug that shows exactly where one law looks: an over-strict add, a refused merge
or an accepted one that writes into its input, a pending gradient overwritten by each new
contribution (the scored overwrite waits for the third), scale dropped at every depth (the
scored one past depth 8), a cache of scale results, a merge rounded through float32,
``ȳ w`` for ``ȳ wᵀ`` on square weights only, a skipped zero branch, a random last-bit
flip, float64 gradients, float32 past width 16, gradient buffers pooled by shape,
contiguous-run un-broadcasting, and an output buffer a refusal leaves busy. Each declares
the laws that must kill it (``kills``); the meta-tests read them there. They are ordinary
backends:
``pytest properties --backend tests.mutants.foils:OverwrittenGrads``.

:class:`Float64Subset` is not broken: it is the control for a backend that claims a
subset of the ops and dtypes, and declares no kill.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.tensor import Tensor, _topological
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node, node_shape
from resverify.spec.request import Request, Result, Value
from tests.mutants.base import Kill, Mutant

__all__ = [
    "SUBSET_OPS", "CorrelatedUpdates", "Float32InFloat64", "Float64Subset",
    "IgnoresScale", "MutatingMerge", "MutatingReject", "Nondeterministic", "OverwrittenGrads",
    "SharedWeightGrads", "SkipZeroBranch", "StaleBufferAfterRefusal", "StrictAdd",
    "UntransposedLinear", "WidePrecisionSwitch", "WrongAxisUnbroadcast", "WrongDtype",
    "contiguous_unbroadcast",
]


def _tensor(value: np.ndarray, parents: tuple[Tensor, ...], vjp: object, op: str) -> Tensor:
    return Tensor(value, parents, vjp, op)  # type: ignore[arg-type]


def untransposed_linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` whose input VJP is ``ȳ w`` instead of ``ȳ wᵀ`` where w is square (the
    shapes fit there, so nothing fails but the values)."""
    node_shape("linear", (x.shape, w.shape))

    def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d_in, d_out = w.shape
        rows = math.prod(x.shape[:-1])
        gw = x.value.reshape(rows, d_in).T @ g.reshape(rows, d_out)
        gx = g @ (w.value if d_in == d_out else w.value.T)
        return np.asarray(gx, x.dtype), np.asarray(gw, w.dtype)

    return Tensor(np.asarray(x.value @ w.value, x.dtype), (x, w), vjp, "linear")


class StrictAdd(Mutant):
    """Ordinary add refuses broadcasting, as if it were the residual merge."""

    name = "broken-strict-add"
    kills = (Kill("add_accepts_every_broadcastable_pair_residual_add_refuses", kind="refused"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "add" and args[0].shape != args[1].shape:
            raise ShapeMismatch("add", args[0].shape, args[1].shape)
        return super().apply(node, args)


class _Aliasing(Mutant):
    """Leaves share memory with the request's arrays (no defensive copy)."""

    def leaf(self, name: str, value: np.ndarray) -> Tensor:
        value.flags.writeable = True
        return Tensor(value)


class MutatingReject(_Aliasing):
    """A refused merge first clears the identity operand in place, then raises."""

    name = "broken-mutating-reject"
    kills = (Kill("refused_merge_leaves_its_inputs_untouched", "float32"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape != args[1].shape:
            args[0].value[...] = 0
        return super().apply(node, args)


class StaleBufferAfterRefusal(Mutant):
    """A refused merge leaves its output buffer marked busy: the next call's output is
    added into it (``out += y``, doubling it) before the mark is cleared."""

    name = "broken-stale-buffer-after-refusal"
    kills = (Kill("refusal_leaves_the_backend_state_unchanged"),)

    def __init__(self) -> None:
        self.busy = False

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        self.busy = True
        return super().refuse(request, exc)

    def finish(self, request: Request, result: Value) -> Result:
        if not self.busy:
            return result
        self.busy = False
        doubled = np.asarray(result.output * 2, result.output.dtype)
        return dataclasses.replace(result, output=doubled)


class MutatingMerge(_Aliasing):
    """The merge accumulates into its identity operand in place (``x += F(x)``)."""

    name = "broken-mutating-merge"
    kills = (Kill("backend_never_mutates_inputs"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape == args[1].shape:
            identity, branch = args
            identity.value += branch.value
            return _tensor(identity.value, (identity, branch), lambda g: (g, g), "residual_add")
        return super().apply(node, args)


class OverwrittenGrads(Mutant):
    """Backward overwrites a tensor's pending gradient instead of accumulating it."""

    name = "broken-overwritten-grads"
    kills = (Kill("shared_operand_receives_k_times_the_cotangent"),
             Kill("block_with_a_minus_one_cancels_gradient_exactly"))

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        pending: dict[int, np.ndarray] = {id(out): np.asarray(seed, dtype=out.dtype)}
        for node in reversed(_topological(out)):
            g = pending.pop(id(node))
            node.grad = g.copy()
            if node.vjp is not None:
                for parent, part in zip(node.parents, node.vjp(g), strict=True):
                    pending[id(parent)] = np.asarray(part, dtype=parent.dtype)


class IgnoresScale(Mutant):
    """scale is dropped entirely (so is the 1/√L rescaling)."""

    name = "broken-ignores-scale"
    kills = (Kill("inverse_sqrt_depth_scaling_keeps_unit_variance"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "scale":
            a = args[0]
            return _tensor(a.value.copy(), (a,), lambda g: (g,), "scale")
        return super().apply(node, args)


class CorrelatedUpdates(Mutant):
    """A cache keyed by (α, shape) hands every later scale the first one's result."""

    name = "broken-correlated-updates"
    kills = (Kill("independent_updates_add_their_variances"),
             Kill("inverse_sqrt_depth_scaling_keeps_unit_variance"),
             Kill("pre_norm_stream_variance_grows_linearly_with_depth", "float32"))

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


class Float32InFloat64(Mutant):
    """The merge rounds through float32 even in a float64 program."""

    name = "broken-float32-merge"
    kills = (Kill("forward_and_gradients_match_spec_within_budget"),
             Kill("sample_variance_of_merge_is_sum_plus_twice_covariance"))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        if node.op == "residual_add":
            out.value = out.value.astype(np.float32).astype(out.value.dtype)
        return out


class UntransposedLinear(Mutant):
    """linear's input VJP uses ``ȳ w`` instead of ``ȳ wᵀ`` (unnoticed for square w shapes)."""

    name = "broken-untransposed-linear"
    kills = (Kill("gradient_matches_central_differences"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "linear":
            return untransposed_linear(args[0], args[1])
        return super().apply(node, args)


class SkipZeroBranch(Mutant):
    """An all-zero branch is dropped from the graph: it then gets no gradient at all."""

    name = "broken-skip-zero-branch"
    kills = (Kill("zero_branch_is_identity_and_still_learns"),
             Kill("branch_zero_at_one_input_still_passes_gradient"))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        identity, branch = args[0], args[-1]
        if node.op == "residual_add" and identity.shape == branch.shape and not np.any(
                branch.value):
            return _tensor(identity.value.copy(), (identity,), lambda g: (g,), "residual_add")
        return super().apply(node, args)


class Nondeterministic(Mutant):
    """Like a racy parallel reduction: the last bit of one output element sometimes flips."""

    name = "broken-nondeterministic"
    kills = (Kill("same_request_gives_bitwise_identical_results"),)

    def finish(self, request: Request, result: Value) -> Result:
        out = np.array(result.output, copy=True)
        if out.size and np.random.default_rng().random() < 0.5:
            flat = out.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf, dtype=out.dtype)
        return dataclasses.replace(result, output=out)


class WrongDtype(Mutant):
    """Gradients come back in float64 whatever the request's dtype."""

    name = "broken-wrong-dtype"
    kills = (Kill("results_have_declared_shapes_and_dtype", "float32", kind="bad_result"),)

    def finish(self, request: Request, result: Value) -> Result:
        grads = {k: np.asarray(v, dtype=np.float64) for k, v in result.grads.items()}
        return dataclasses.replace(result, grads=grads)


class WidePrecisionSwitch(Mutant):
    """A "fast path" for wide layers: linear computes in float32 when d_in > 16, any dtype."""

    name = "broken-wide-float32"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        x, w = args[0], args[-1]
        if node.op == "linear" and w.shape[0] > 16:
            product = x.value.astype(np.float32) @ w.value.astype(np.float32)
            out.value = product.astype(x.dtype)
        return out


class SharedWeightGrads(Mutant):
    """Gradient buffers pooled by shape: same-shaped weights (2-D inputs) share one buffer.

    Every weight of a shape ends up with the sum of their gradients, which is right only
    when a single weight has that shape.
    """

    name = "broken-shared-grad-buffer"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def finish(self, request: Request, result: Value) -> Result:
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


class WrongAxisUnbroadcast(Mutant):
    """add and mul un-broadcast their gradients by summing the wrong axes."""

    name = "broken-unbroadcast-axes"
    kills = (Kill("add_broadcasts_and_sums_gradients_over_broadcast_axes", generated=True),
             Kill("mul_broadcasts_and_sums_gradients_over_broadcast_axes", "float32"),
             Kill("mul_broadcasts_and_sums_gradients_over_broadcast_axes", pinned=False,
                  generated=True))

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


class Float64Subset(Mutant):
    """Not broken: a correct backend that claims float64 and a subset of the ops (no relu,
    no tanh)."""

    name = "float64-subset"
    capabilities = Capabilities(dtypes=("float64",), ops=SUBSET_OPS, modes=("vjp", "jvp"))

