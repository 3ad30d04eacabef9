"""The reference ops: each computes its forward value and returns its local VJP beside it.

Every op keeps the dtype of its inputs (a float32 program never widens to float64),
and constants are cast to that dtype before use.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from resverify.impl.tensor import Tensor
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import broadcast_shapes, node_shape


def _arr(value: object, dtype: np.dtype) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched to reach its shape."""
    extra = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True)
    return _arr(out, grad.dtype)


def add(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise sum with NumPy broadcasting; the backward pass un-broadcasts."""
    broadcast_shapes("add", a.shape, b.shape)
    return Tensor(_arr(a.value + b.value, a.dtype), (a, b),
                  lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape)), "add")


def residual_add(identity: Tensor, branch: Tensor) -> Tensor:
    """``identity + branch`` for exactly equal shapes; any other pair is a ShapeMismatch.

    The check runs before anything is built, so a refused merge changes no graph and
    no gradient. Both edges pass the cotangent through unchanged.
    """
    if identity.shape != branch.shape:
        raise ShapeMismatch("residual_add", identity.shape, branch.shape)
    return Tensor(_arr(identity.value + branch.value, identity.dtype), (identity, branch),
                  lambda g: (g, g), "residual_add")


def mul(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise product with broadcasting: d(ab) = b·da + a·db."""
    broadcast_shapes("mul", a.shape, b.shape)
    return Tensor(_arr(a.value * b.value, a.dtype), (a, b),
                  lambda g: (unbroadcast(g * b.value, a.shape),
                             unbroadcast(g * a.value, b.shape)), "mul")


def scale(a: Tensor, alpha: Fraction | float) -> Tensor:
    """Multiply by a constant α (rounded once to the tensor's dtype)."""
    k = _arr(float(alpha), a.dtype)
    return Tensor(_arr(a.value * k, a.dtype), (a,), lambda g: (_arr(g * k, a.dtype),), "scale")


def linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w`` for x of shape (..., d_in), w of shape (d_in, d_out); no bias.

    VJP: x̄ = ȳ wᵀ, w̄ = Σ over leading axes of xᵀ ȳ.
    """
    node_shape("linear", (x.shape, w.shape))

    def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d_in, d_out = w.shape
        rows = math.prod(x.shape[:-1])
        gw = x.value.reshape(rows, d_in).T @ g.reshape(rows, d_out)
        return _arr(g @ w.value.T, x.dtype), _arr(gw, w.dtype)

    return Tensor(_arr(x.value @ w.value, x.dtype), (x, w), vjp, "linear")


def relu(a: Tensor) -> Tensor:
    """max(a, 0) with +0 for every non-positive input; derivative 0 at 0 (declared convention)."""
    zero = _arr(0, a.dtype)
    positive = a.value > 0
    return Tensor(np.where(positive, a.value, zero), (a,),
                  lambda g: (np.where(positive, g, zero),), "relu")


def tanh(a: Tensor) -> Tensor:
    """tanh, with derivative 1 - tanh²."""
    t = _arr(np.tanh(a.value), a.dtype)
    one = _arr(1, a.dtype)
    return Tensor(t, (a,), lambda g: (_arr(g * (one - t * t), a.dtype),), "tanh")


def sum_all(a: Tensor) -> Tensor:
    """Sum of every element, shape (); the cotangent is copied back to every element."""
    return Tensor(_arr(a.value.sum(), a.dtype), (a,),
                  lambda g: (np.broadcast_to(_arr(g, a.dtype), a.shape).copy(),), "sum")
