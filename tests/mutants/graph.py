"""Mutants of the graph: how the merge combines shapes, how gradients accumulate, the
identity path, and state kept between calls.

Each class plants one bug, named in the first line of its docstring; the bugs that hide
say where (a depth, a use count, one call in several).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from resverify.impl import ops
from resverify.impl.numpy_backend import apply
from resverify.impl.tensor import Tensor
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.request import Request, Result, Value
from tests.mutants.base import Kill, Mutant, accumulate, all_edges, answer, retarget

__all__ = [
    "BroadcastingMerge", "CotangentScaledInPlace", "DedupedRepeatedOperand",
    "DetachedIdentityPastDepth4", "DoubledIdentityGrad", "DroppedIdentityGrad",
    "FusedScaleOnIdentityGrad", "GradsNotZeroed", "InplaceRelu", "LastBitEveryThirdCall",
    "OverwriteAtThirdUse", "ReshapingMerge", "RunningTotalPropagated", "SharedTanhBuffer",
    "SqueezingMerge", "StickyFallbackAfterRefusal", "TransposingMerge",
]


def _reshaped(t: Tensor, shape: tuple[int, ...], how: Callable[[np.ndarray], np.ndarray],
              back: Callable[[np.ndarray], np.ndarray]) -> Tensor:
    """``t`` seen through ``how`` (a reshape, a transpose), its gradient sent back by ``back``."""
    value = how(t.value)
    assert value.shape == shape
    return Tensor(value, (t,), lambda g: (back(g),), "view")


class _MergeHook(Mutant):
    """Mutants that change what residual_add accepts: ``coerce`` gives the branch in the
    identity's shape, or None to refuse as the spec does."""

    bug_class = "merge semantics"

    def coerce(self, identity: Tensor, branch: Tensor) -> Tensor | None:
        raise NotImplementedError

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape != args[1].shape:
            branch = self.coerce(args[0], args[1])
            if branch is not None:
                return ops.residual_add(args[0], branch)
        return apply(node, args)


class BroadcastingMerge(_MergeHook):
    """residual_add broadcasts like add: a [2] branch merges into a [2, 2] identity."""

    name = "mutant-broadcasting-merge"
    kills = (Kill("residual_add_rejects_every_shape_mismatch"),
             Kill("residual_add_rejects_equal_size_shape_pairs"),
             Kill("residual_add_refuses_a_width_change_even_where_add_broadcasts"))

    def coerce(self, identity: Tensor, branch: Tensor) -> Tensor | None:
        try:
            shape = np.broadcast_shapes(identity.shape, branch.shape)
        except ValueError:
            return None
        zeros = Tensor(np.zeros(identity.shape, identity.dtype))
        return ops.add(zeros, branch) if shape == identity.shape else None


class ReshapingMerge(_MergeHook):
    """residual_add reshapes a branch of the same size: [2, 3] + [3, 2] and [] + [1] merge."""

    name = "mutant-reshaping-merge"
    kills = (Kill("residual_add_rejects_equal_size_shape_pairs", generated=True),)

    def coerce(self, identity: Tensor, branch: Tensor) -> Tensor | None:
        if identity.value.size != branch.value.size:
            return None
        shape = identity.shape
        return _reshaped(branch, shape, lambda v: v.reshape(shape),
                         lambda g: g.reshape(branch.shape))


class SqueezingMerge(_MergeHook):
    """residual_add squeezes a trailing axis of size 1 first: [2, 1] + [2] merges."""

    name = "mutant-squeezing-merge"
    kills = (Kill("residual_add_rejects_equal_size_shape_pairs", generated=True),)

    def coerce(self, identity: Tensor, branch: Tensor) -> Tensor | None:
        def squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
            return shape[:-1] if shape[-1:] == (1,) else shape

        if squeeze(identity.shape) != squeeze(branch.shape):
            return None
        shape = identity.shape
        return _reshaped(branch, shape, lambda v: v.reshape(shape),
                         lambda g: g.reshape(branch.shape))


class TransposingMerge(_MergeHook):
    """residual_add transposes a branch whose shape is the identity's reversed (a layout
    mix-up, NCHW against NHWC): only pairs like [2, 3] and [3, 2] hide it."""

    name = "mutant-transposing-merge"
    kills = (Kill("residual_add_rejects_equal_size_shape_pairs", generated=True),)

    def coerce(self, identity: Tensor, branch: Tensor) -> Tensor | None:
        if len(identity.shape) < 2 or identity.shape != branch.shape[::-1]:
            return None
        return _reshaped(branch, identity.shape, lambda v: v.T, lambda g: g.T)


class OverwriteAtThirdUse(Mutant):
    """A tensor's third gradient contribution overwrites the sum of the first two (a buffer
    reused once it holds two): right for tensors used once or twice."""

    name = "mutant-overwrite-third-use"
    bug_class = "gradient accumulation"
    kills = (Kill("shared_operand_receives_k_times_the_cotangent", generated=True),)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        accumulate(out, seed, lambda old, new, n: new if n == 3 else old + new, all_edges)


class DedupedRepeatedOperand(Mutant):
    """An op given one tensor twice (``residual_add(x, x)``) sends it one contribution, not
    two (edges kept in a set keyed by the parent)."""

    name = "mutant-deduped-operand"
    bug_class = "gradient accumulation"
    kills = (Kill("shared_operand_receives_k_times_the_cotangent", generated=True),)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        def once(node: Tensor, g: np.ndarray) -> list[tuple[Tensor, np.ndarray]]:
            edges = {id(p): (p, part) for p, part in all_edges(node, g)}
            return list(edges.values())

        accumulate(out, seed, lambda old, new, n: old + new, once)


class RunningTotalPropagated(Mutant):
    """Backward recurses along every path and passes on a tensor's running total instead
    of the new contribution: a tensor reached twice counts the first path twice."""

    name = "mutant-running-total"
    bug_class = "gradient accumulation"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        def visit(t: Tensor, g: np.ndarray) -> None:
            t.grad = np.array(g, t.dtype) if t.grad is None else np.asarray(t.grad + g, t.dtype)
            if t.vjp is not None:
                for parent, part in zip(t.parents, t.vjp(t.grad), strict=True):
                    visit(parent, np.asarray(part, parent.dtype))

        visit(out, np.asarray(seed, out.dtype))


class _IdentityHook(Mutant):
    """Mutants of the merge's backward: ``edges(g)`` gives (identity, branch) cotangents."""

    bug_class = "identity path"

    def edges(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        return retarget(out, self.edges) if node.op == "residual_add" else out


class DroppedIdentityGrad(_IdentityHook):
    """The merge's backward drops the identity edge: x̄ = J_Fᵀȳ instead of ȳ + J_Fᵀȳ."""

    name = "mutant-dropped-identity"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", "float32"),
             Kill("zero_branch_is_identity_and_still_learns", "float32"),
             Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),
             Kill("stack_of_one_branch_family_matches_spec"),
             Kill("tangent_and_gradients_satisfy_duality"))

    def edges(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros_like(g), g


class DoubledIdentityGrad(_IdentityHook):
    """The identity edge gets the cotangent twice (the merge and a skip hook both add it)."""

    name = "mutant-doubled-identity"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def edges(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return g + g, g


class FusedScaleOnIdentityGrad(Mutant):
    """A fused scale-and-merge kernel scales the identity's gradient by α too (the forward
    is right): right only when α = 1."""

    name = "mutant-fused-scale-identity"
    bug_class = "identity path"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def run(self, request: Request) -> Result:
        self.alphas: dict[int, np.ndarray] = {}
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "scale":
            assert node.alpha is not None
            self.alphas[id(out)] = np.asarray(float(node.alpha), out.dtype)
        elif node.op == "residual_add" and id(args[1]) in self.alphas:
            k = self.alphas[id(args[1])]
            retarget(out, lambda g: (g * k, g))
        return out


class DetachedIdentityPastDepth4(Mutant):
    """Past the fourth merge of a program the identity edge is detached (a checkpoint
    segment boundary): only stacks deeper than four blocks lose gradient."""

    name = "mutant-detached-identity-depth"
    bug_class = "identity path"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def run(self, request: Request) -> Result:
        self.merges = 0
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "residual_add":
            self.merges += 1
            if self.merges > 4:
                retarget(out, lambda g: (np.zeros_like(g), g))
        return out


class GradsNotZeroed(Mutant):
    """Gradient buffers are kept per input and never zeroed between calls (a missing
    ``zero_grad``): every call after the first returns accumulated gradients."""

    name = "mutant-grads-not-zeroed"
    bug_class = "state"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, tuple[int, ...], str], np.ndarray] = {}

    def finish(self, request: Request, result: Value) -> Result:
        grads = {}
        for name, grad in result.grads.items():
            key = (name, grad.shape, request.dtype)
            total = grad if key not in self.buffers else np.asarray(
                self.buffers[key] + grad, grad.dtype)
            self.buffers[key] = grads[name] = total
        return answer(result.output, grads, result.tangent)


class InplaceRelu(Mutant):
    """relu runs in place (``inplace=True``) on arrays that alias the caller's inputs: the
    inputs change, and so does anything else that reads the same tensor."""

    name = "mutant-inplace-relu"
    bug_class = "state"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def leaf(self, name: str, value: np.ndarray) -> Tensor:
        value.flags.writeable = True  # the backend's own copy, but not copied again
        return Tensor(value)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != "relu":
            return apply(node, args)
        (a,) = args
        positive = a.value > 0
        a.value[~positive] = 0  # writes into the argument's own array
        return Tensor(a.value, (a,), lambda g: (np.where(positive, g, 0).astype(g.dtype),),
                      "relu")


class CotangentScaledInPlace(Mutant):
    """scale's backward multiplies the incoming cotangent in place (``g *= α``): the
    caller's cotangent and every other edge sharing that array change."""

    name = "mutant-cotangent-in-place"
    bug_class = "state"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth", generated=True),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op != "scale":
            return out
        assert node.alpha is not None
        k = np.asarray(float(node.alpha), out.dtype)

        def vjp(g: np.ndarray) -> tuple[np.ndarray]:
            if g.flags.writeable:  # the caller's cotangent is writable when it was copied
                g *= k
                return (g,)
            return (g * k,)

        return retarget(out, vjp)


class SharedTanhBuffer(Mutant):
    """tanh outputs of one shape share one pooled buffer: the backward of an earlier tanh
    reads the output of the last one (right with a single tanh per shape)."""

    name = "mutant-shared-tanh-buffer"
    bug_class = "state"
    kills = (Kill("stack_of_one_branch_family_matches_spec", generated=True),)

    def run(self, request: Request) -> Result:
        self.pool: dict[tuple[tuple[int, ...], str], np.ndarray] = {}
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != "tanh":
            return apply(node, args)
        (a,) = args
        key = (a.shape, str(a.dtype))
        buf = self.pool.setdefault(key, np.empty_like(a.value))
        np.copyto(buf, np.tanh(a.value))
        one = np.asarray(1, a.dtype)
        return Tensor(buf.copy(), (a,), lambda g: (np.asarray(g * (one - buf * buf), a.dtype),),
                      "tanh")


class StickyFallbackAfterRefusal(Mutant):
    """After refusing a shape pair the engine stays in a float32 'safe mode' for merges."""

    name = "mutant-sticky-fallback"
    bug_class = "state"

    def __init__(self) -> None:
        self.safe_mode = False

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        self.safe_mode = True
        return super().refuse(request, exc)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "residual_add" and self.safe_mode:
            out.value = out.value.astype(np.float32).astype(out.dtype)
        return out


class LastBitEveryThirdCall(Mutant):
    """Every third call, the last bit of the first output element flips (a racy
    reduction that loses only now and then)."""

    name = "mutant-last-bit-every-third-call"
    bug_class = "state"
    kills = (Kill("same_request_gives_bitwise_identical_results"),)

    def __init__(self) -> None:
        self.calls = 0

    def finish(self, request: Request, result: Value) -> Result:
        self.calls += 1
        out = np.array(result.output, copy=True)
        if self.calls % 3 == 0 and out.size:
            flat = out.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf, dtype=out.dtype)
        return answer(out, result.grads, result.tangent)
