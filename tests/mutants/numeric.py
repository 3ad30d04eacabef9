"""Mutants of the arithmetic: α, linear, the activations, reductions and dtypes.

Each class plants one bug, named in the first line of its docstring; several hide
(only wide layers, only rank-3 inputs, only values near 0, only empty arrays).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from resverify.impl.numpy_backend import apply
from resverify.impl.ops import apply_op
from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node
from resverify.spec.ops import unbroadcast
from resverify.spec.request import Request, Result, Value
from tests.mutants.base import Kill, Mutant, accumulate, all_edges, answer, retarget

__all__ = [
    "AccumulatesInFloat32", "AlphaRoundedViaFloat32", "AlphaSignLost", "AlphaSquared",
    "FalsyAlpha", "GradsThroughFloat16", "LeakyRelu", "LinearFirstAxisRows",
    "LinearWeightGradReshaped", "MulProductOfSums", "OutputUpcast", "ReluGradOneAtZero",
    "ReluGradThreshold", "ReshapedWeightTranspose", "ScalarOperandGradRank1",
    "ScaleBackwardForgetsAlpha", "SumEmptyIsNan", "SumInFloat32Above64", "SumKeepsRank1",
    "TanhDerivFromInput", "TanhInFloat32", "Tf32AboveWidth32", "UnbroadcastSlicesSizeOneAxes",
]

Pullback = Callable[[np.ndarray], tuple[np.ndarray, ...]]
Forward = tuple[np.ndarray, Pullback]


class _ScaleHook(Mutant):
    """Mutants of ``scale`` that only change the α it uses: ``alpha(exact)``."""

    bug_class = "alpha"

    def alpha(self, exact: Fraction) -> Fraction | float:
        raise NotImplementedError

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "scale":
            assert node.alpha is not None
            return apply_op("scale", args, self.alpha(node.alpha))
        return apply(node, args)


class AlphaSquared(_ScaleHook):
    """scale multiplies by α² (α applied in the block and again in the kernel)."""

    name = "mutant-alpha-squared"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", "float16"),
             Kill("output_and_gradients_are_affine_in_alpha"),
             Kill("plain_stack_gradient_is_a_to_the_depth"),
             Kill("stack_output_is_input_plus_sum_of_branches"),
             Kill("branch_depending_on_input_breaks_naive_variance_sum"))

    def alpha(self, exact: Fraction) -> Fraction | float:
        return exact * exact


class AlphaRoundedViaFloat32(_ScaleHook):
    """α is stored as a float32 parameter: rounded twice in a float64 program."""

    name = "mutant-alpha-float32"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def alpha(self, exact: Fraction) -> Fraction | float:
        return float(np.float32(float(exact)))


class AlphaSignLost(_ScaleHook):
    """α is kept as log|α|: a negative α comes back positive."""

    name = "mutant-alpha-sign-lost"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def alpha(self, exact: Fraction) -> Fraction | float:
        return abs(exact)


class FalsyAlpha(_ScaleHook):
    """``alpha or 1``: α = 0 silently becomes 1."""

    name = "mutant-falsy-alpha"
    kills = (Kill("alpha_zero_is_identity_and_branch_gets_no_gradient"),)

    def alpha(self, exact: Fraction) -> Fraction | float:
        return exact or Fraction(1)


class ScaleBackwardForgetsAlpha(Mutant):
    """scale's backward passes the cotangent unscaled (a custom op without the chain rule)."""

    name = "mutant-scale-backward-unscaled"
    bug_class = "alpha"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        return retarget(out, lambda g: (g,)) if node.op == "scale" else out


def _linear_vjp(x: np.ndarray, w: np.ndarray, input_grad: str = "transpose",
                rows: int | None = None, weight_grad: str = "product") -> Pullback:
    """linear's VJP with one of its parts done a wrong way (the defaults are right)."""
    d_in, d_out = w.shape

    def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lead = math.prod(x.shape[:-1])  # not -1: an empty axis leaves -1 undefined
        count = lead if rows is None else rows
        xs, gs = x.reshape(lead, d_in)[:count], g.reshape(lead, d_out)[:count]
        wt = w.T if input_grad == "transpose" else w.reshape(d_out, d_in)
        gw = xs.T @ gs if weight_grad == "product" else (gs.T @ xs).reshape(d_in, d_out)
        return np.asarray(g @ wt, x.dtype), np.asarray(gw, w.dtype)

    return vjp


class _LinearHook(Mutant):
    bug_class = "linear"

    def vjp(self, x: np.ndarray, w: np.ndarray) -> Pullback:
        raise NotImplementedError

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "linear":
            retarget(out, self.vjp(args[0].value, args[1].value))
        return out


class ReshapedWeightTranspose(_LinearHook):
    """linear's input gradient uses ``w.reshape(d_out, d_in)`` for wᵀ: the right shape,
    the wrong values (right only when a side is 1)."""

    name = "mutant-reshape-for-transpose"
    kills = (Kill("forward_and_gradients_match_spec_within_budget"),)

    def vjp(self, x: np.ndarray, w: np.ndarray) -> Pullback:
        return _linear_vjp(x, w, input_grad="reshape")


class LinearWeightGradReshaped(_LinearHook):
    """linear's weight gradient is ``(ȳᵀx).reshape(d_in, d_out)``, not ``xᵀȳ``."""

    name = "mutant-weight-grad-reshaped"
    kills = (Kill("forward_and_gradients_match_spec_within_budget"),)

    def vjp(self, x: np.ndarray, w: np.ndarray) -> Pullback:
        return _linear_vjp(x, w, weight_grad="reshape")


class LinearFirstAxisRows(_LinearHook):
    """linear's weight gradient counts rows as ``x.shape[0]``, not the product of the
    leading axes: only inputs of rank 3 or more lose rows."""

    name = "mutant-linear-first-axis-rows"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def vjp(self, x: np.ndarray, w: np.ndarray) -> Pullback:
        return _linear_vjp(x, w, rows=x.shape[0] if x.ndim > 1 else 1)


def _tf32(a: np.ndarray) -> np.ndarray:
    """``a`` with its mantissa cut to TF32's 10 bits (round to nearest, in float32)."""
    bits = np.asarray(a, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


class Tf32AboveWidth32(_LinearHook):
    """linear multiplies in TF32 (10-bit mantissas) when d_in >= 32, whatever the dtype:
    narrow layers are exact."""

    name = "mutant-tf32-wide-linear"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        x, w = args[0].value, args[-1].value
        if node.op == "linear" and w.shape[0] >= 32:
            out.value = np.asarray(_tf32(x).astype(np.float64) @ _tf32(w).astype(np.float64),
                                   x.dtype)
        return out


class _ElementwiseHook(Mutant):
    """Mutants of one elementwise op: ``forward(a)`` gives its value and local VJP."""

    bug_class = "activations"
    op = ""

    def forward(self, a: np.ndarray) -> Forward:
        raise NotImplementedError

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != self.op:
            return apply(node, args)
        value, vjp = self.forward(args[0].value)
        return Tensor(np.asarray(value, args[0].dtype), (args[0],), vjp, node.op)


def _relu(a: np.ndarray, slope: np.ndarray) -> Forward:
    return np.where(a > 0, a, 0 * a), lambda g: (np.asarray(g * slope, a.dtype),)


class ReluGradOneAtZero(_ElementwiseHook):
    """relu's derivative is 1 at 0 (``x >= 0``), not the declared 0."""

    name = "mutant-relu-grad-at-zero"
    op = "relu"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),
             Kill("relu_gradient_is_exact_near_zero"))

    def forward(self, a: np.ndarray) -> Forward:
        return _relu(a, (a >= 0).astype(a.dtype))


class ReluGradThreshold(_ElementwiseHook):
    """relu's derivative is 0 below 1/64 (a guard meant for a division): wrong only near 0."""

    name = "mutant-relu-grad-threshold"
    op = "relu"
    kills = (Kill("relu_gradient_is_exact_near_zero"),)

    def forward(self, a: np.ndarray) -> Forward:
        return _relu(a, (a > 1 / 64).astype(a.dtype))


class LeakyRelu(_ElementwiseHook):
    """relu is leaky: 0.01·x for negative x, with slope 0.01 there."""

    name = "mutant-leaky-relu"
    op = "relu"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def forward(self, a: np.ndarray) -> Forward:
        slope = np.where(a > 0, 1, 0.01).astype(a.dtype)
        return np.where(a > 0, a, a * slope), lambda g: (np.asarray(g * slope, a.dtype),)


class TanhDerivFromInput(_ElementwiseHook):
    """tanh's derivative is computed from the input, 1 - x², not from the output, 1 - t²."""

    name = "mutant-tanh-derivative-from-input"
    op = "tanh"
    kills = (Kill("stack_of_one_branch_family_matches_spec", generated=True),)

    def forward(self, a: np.ndarray) -> Forward:
        return np.tanh(a), lambda g: (np.asarray(g * (1 - a * a), a.dtype),)


class TanhInFloat32(_ElementwiseHook):
    """tanh is a float32 kernel: a float64 program gets float32 accuracy from it."""

    name = "mutant-tanh-float32"
    op = "tanh"
    bug_class = "dtypes"
    kills = (Kill("stack_of_one_branch_family_matches_spec", generated=True),)

    def forward(self, a: np.ndarray) -> Forward:
        t = np.tanh(a.astype(np.float32)).astype(a.dtype)
        return t, lambda g: (np.asarray(g * (1 - t * t), a.dtype),)


class SumKeepsRank1(Mutant):
    """sum returns shape [1] (``keepdims`` of a flattened array), not a rank-0 value."""

    name = "mutant-sum-rank1"
    bug_class = "reductions"
    kills = (Kill("results_have_declared_shapes_and_dtype", kind="bad_result"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != "sum":
            return apply(node, args)
        (a,) = args
        value = a.value.reshape(-1).sum(keepdims=True)
        return Tensor(value, (a,), lambda g: (np.broadcast_to(g.reshape(()), a.shape).copy(),),
                      "sum")


class SumEmptyIsNan(Mutant):
    """sum is ``mean · size``: NaN for an empty array, whose sum is 0."""

    name = "mutant-sum-empty-nan"
    bug_class = "reductions"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "sum" and args[0].value.size == 0:
            out.value = np.asarray(np.nan, out.dtype)
        return out


class SumInFloat32Above64(Mutant):
    """sum accumulates in float32 over more than 64 elements (a reduction kernel's wide
    path), whatever the dtype: a float64 sum of a wide array loses precision, a narrow one
    is exact."""

    name = "mutant-sum-float32-above-64"
    bug_class = "reductions"
    kills = (Kill("forward_and_gradients_match_spec_within_budget", generated=True),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "sum" and args[0].value.size > 64:
            wide = args[0].value.astype(np.float32).sum(dtype=np.float32)
            out.value = np.asarray(wide, out.dtype)
        return out


def _slice_unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Un-broadcast that sums the added leading axes but takes the first slice of each
    stretched size-1 axis instead of summing it."""
    out = unbroadcast(g, g.shape[g.ndim - len(shape):]) if g.ndim > len(shape) else g
    index = tuple(slice(0, 1) if n == 1 else slice(None) for n in shape)
    return np.asarray(out[index], g.dtype).reshape(shape)


class UnbroadcastSlicesSizeOneAxes(Mutant):
    """add's gradient for a stretched size-1 axis is the first slice, not the sum:
    right when broadcasting only adds leading axes."""

    name = "mutant-unbroadcast-slices"
    bug_class = "reductions"
    kills = (Kill("add_broadcasts_and_sums_gradients_over_broadcast_axes"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "add":
            a, b = args
            retarget(out, lambda g: (_slice_unbroadcast(g, a.shape),
                                     _slice_unbroadcast(g, b.shape)))
        return out


class MulProductOfSums(Mutant):
    """mul's gradient of a broadcast operand is the product of the un-broadcast sums,
    ``Σȳ · Σa``, not ``Σ(ȳ·a)``: right when nothing broadcasts."""

    name = "mutant-mul-product-of-sums"
    bug_class = "reductions"
    kills = (Kill("mul_broadcasts_and_sums_gradients_over_broadcast_axes"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "mul":
            a, b = args[0].value, args[1].value

            def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                return (np.asarray(unbroadcast(g, a.shape) * unbroadcast(b * np.ones_like(g),
                                                                          a.shape), a.dtype)
                        if a.shape != g.shape else np.asarray(g * b, a.dtype),
                        np.asarray(unbroadcast(g, b.shape) * unbroadcast(a * np.ones_like(g),
                                                                          b.shape), b.dtype)
                        if b.shape != g.shape else np.asarray(g * a, b.dtype))

            retarget(out, vjp)
        return out


class ScalarOperandGradRank1(Mutant):
    """add's gradient for a rank-0 operand comes back with shape [1]."""

    name = "mutant-scalar-grad-rank1"
    bug_class = "reductions"
    kills = (Kill("add_broadcasts_and_sums_gradients_over_broadcast_axes", kind="bad_result"),)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = apply(node, args)
        if node.op == "add":
            shapes = [t.shape for t in args]
            retarget(out, lambda g: tuple(unbroadcast(g, s).reshape(s or (1,)) for s in shapes))
        return out


class OutputUpcast(Mutant):
    """The output comes back in float64 whatever the request's dtype (a silent upcast)."""

    name = "mutant-output-upcast"
    bug_class = "dtypes"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth", "float32",
                  kind="bad_result"),)

    def finish(self, request: Request, result: Value) -> Result:
        return answer(np.asarray(result.output, np.float64), result.grads, result.tangent)


class GradsThroughFloat16(Mutant):
    """Gradients are stored in a float16 buffer, then returned in the request's dtype."""

    name = "mutant-grads-float16"
    bug_class = "dtypes"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def finish(self, request: Request, result: Value) -> Result:
        grads = {k: v.astype(np.float16).astype(v.dtype) for k, v in result.grads.items()}
        return answer(result.output, grads, result.tangent)


class AccumulatesInFloat32(Mutant):
    """Gradient contributions reaching one tensor are summed in float32: only tensors with
    two or more uses lose precision, only in float64."""

    name = "mutant-accumulates-float32"
    bug_class = "dtypes"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        def add(old: np.ndarray, new: np.ndarray, uses: int) -> np.ndarray:
            return np.asarray(old.astype(np.float32) + new.astype(np.float32), old.dtype)

        accumulate(out, seed, add, all_edges)
