"""The reference ops on Tensors: each op's NumPy forward, VJP and JVP from its entry.

The rules themselves are in the op's entry in :mod:`resverify.spec.ops` (``numpy``:
the forward value in the arguments' dtype and its local VJP beside it; ``numpy_jvp``: the
output tangent). :func:`apply_op` checks the entry's shape rule first, so a refused op
raises before it builds anything and leaves no trace in any graph; it then links the
result into the Tensor graph of :mod:`resverify.impl.tensor`, with its tangent when an
argument carries one (forward mode; an argument without one counts as a zero tangent).
The named functions below are shortcuts for the ops the seed fixtures and plots use; the
reference backend reaches every op through :func:`apply_op`.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.impl.tensor import Tensor
from resverify.spec.ops import OP_TABLE

__all__ = ["residual_add", "scale"]


def apply_op(name: str, args: Sequence[Tensor],
             alpha: Any = None) -> Tensor:
    """The op ``name`` on tensors: its shape rule, then its reference forward and VJP, and
    its JVP when an argument carries a tangent."""
    op = OP_TABLE[name]
    op.shape([a.shape for a in args], alpha)
    values = [a.value for a in args]
    value, vjp = op.numpy(values, alpha)
    tangent = None
    if any(a.tangent is not None for a in args):
        ts = [np.zeros_like(a.value) if a.tangent is None else a.tangent for a in args]
        tangent = op.numpy_jvp(ts, values, value, alpha)
    return Tensor(value, tuple(args), vjp, name, tangent)


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise sum with NumPy broadcasting; the backward pass un-broadcasts."""
    return apply_op("add", (a, b))


def residual_add(identity: Tensor, branch: Tensor) -> Tensor:
    """``identity + branch`` for exactly equal shapes; any other pair is a ShapeMismatch.

    The check runs before anything is built, so a refused merge changes no graph and
    no gradient. Both edges pass the cotangent through unchanged.
    """
    return apply_op("residual_add", (identity, branch))


def mul(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise product with broadcasting: d(ab) = b·da + a·db."""
    return apply_op("mul", (a, b))


def scale(a: Tensor, alpha: Fraction | float) -> Tensor:
    """Multiply by a constant α (rounded once to the tensor's dtype)."""
    return apply_op("scale", (a,), alpha)


def linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for x of shape (..., d_in), w of shape (d_in, d_out); no bias."""
    return apply_op("linear", (x, w))


def relu(a: Tensor) -> Tensor:
    """max(a, 0) with +0 for every non-positive input; derivative 0 at 0 (declared convention)."""
    return apply_op("relu", (a,))


def tanh(a: Tensor) -> Tensor:
    """tanh, with derivative 1 - tanh²."""
    return apply_op("tanh", (a,))


def sigmoid(a: Tensor) -> Tensor:
    """1/(1 + exp(-a)), with derivative σ(1 - σ)."""
    return apply_op("sigmoid", (a,))


def sum_all(a: Tensor) -> Tensor:
    """Sum of every element, shape (); the cotangent is copied back to every element."""
    return apply_op("sum", (a,))
