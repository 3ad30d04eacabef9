"""Every op of the IR, one entry each: everything resverify knows about an op is here.

An entry is a small class, one instance per op in :data:`OP_TABLE`, holding side by side:

* ``name``, ``arity`` and ``attribute``, the name of the op's one exact rational attribute
  if it takes one (``alpha`` for scale, ``eps`` for the norms; :meth:`Op.refuses` says
  which values it refuses), and :meth:`Op.shape`, the shape rule (raises
  :class:`~resverify.spec.errors.ShapeMismatch`);
* :meth:`Op.exact`, :meth:`Op.exact_vjp` and :meth:`Op.exact_jvp`, the exact forward, VJP
  (reverse mode, ``Jᵀ ȳ``) and JVP (forward mode, ``J t``) on object arrays of Fractions
  (or SymPy symbols), with ``rational`` saying whether they stay rational and ``smooth``
  whether the derivative is one formula everywhere. The JVP uses the same factors as the
  VJP (the carried output, the same enclosed ``1/sqrt``), so ``⟨ȳ, J t⟩ = ⟨Jᵀ ȳ, t⟩``
  holds exactly in the spec even where a value is enclosed;
* :meth:`Op.error`, :meth:`Op.error_vjp` and :meth:`Op.error_jvp`, how the exact
  interpreter's approximation error (non-zero only through tanh and the norms' ``1/sqrt``)
  passes through the op;
* :meth:`Op.budget`, :meth:`Op.budget_vjp` and :meth:`Op.budget_jvp`, the floating-point
  error budget rules (built from :mod:`resverify.spec.rounding`); the tangent's is a
  forward error analysis like the value's, since ``J t`` is computed alongside the value
  from products of values and tangents;
* :meth:`Op.symbolic`, the forward value from SymPy primitives, which
  :mod:`resverify.spec.derive` differentiates to check the hand-written VJP;
* :meth:`Op.numpy`, the reference NumPy forward, returning its local VJP beside it (the
  Tensor graph of :mod:`resverify.impl.ops` calls it), and :meth:`Op.numpy_jvp`, its
  forward-mode rule (the output tangent from the argument tangents, in their dtype);
* :meth:`Op.array`, the op in any array library with NumPy operators (torch, jax, HIPS
  autograd), given the library's few functions as an :class:`ArrayNamespace`;
* ``samples``: argument shapes the generic op tests (``tests/test_ops.py``) run it on.

Every consumer reads these entries: the IR (:mod:`resverify.spec.ir`), the exact
interpreter (:mod:`resverify.spec.exact`), the budget (:mod:`resverify.spec.budget`), the
SymPy derivation (:mod:`resverify.spec.derive`), the reference (:mod:`resverify.impl.ops`)
and the array-library adapters (:mod:`resverify.impl.interpret`). Adding an op is one
class here, its line in :data:`OP_TABLE`, and its tests.

The reference NumPy rule sits here, in ``spec``, beside the exact rule it is checked
against, because ``spec`` may not import ``impl``: an entry can only be whole on this side.
It is plain NumPy on arrays; the autograd graph stays in :mod:`resverify.impl.tensor`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.rational import (
    ZERO,
    ZERO_OBJ,
    Arr,
    exact_rsqrt,
    exact_tanh,
    fraction,
    mag,
    matmul,
    obj,
    objects,
    tanh_error,
    times,
)
from resverify.spec.rounding import (
    INF,
    LARGEST,
    Bound,
    Ctx,
    Parts,
    dot,
    inflate,
    product,
    rows,
    transposed,
    up,
)

__all__ = [
    "OP_TABLE",
    "SQRT_ULPS",
    "TANH_ULPS",
    "ArrayNamespace",
    "Op",
    "Pullback",
    "Site",
    "broadcast_shapes",
    "same_shape",
    "unbroadcast",
]

TANH_ULPS = 4
"""Error allowed for a backend's tanh, in ulps of the result.

glibc lists 2–3 ulps for tanh and CUDA 2 ulps for tanhf; NumPy's tanh measured 1.05 ulp
(float64) and 1.26 ulp (float32) against mpmath. 4 covers these with a small margin and
is still far too tight to hide a wrong formula."""

SQRT_ULPS = 2
"""Error allowed for a backend's square root or reciprocal square root, in ulps.

IEEE 754 sqrt is correctly rounded (half an ulp); CUDA's ``rsqrtf`` is documented at 2 ulps
and vectorised CPU kernels use ``1/sqrt`` (two roundings, within 1 ulp)."""

Pullback = Callable[[np.ndarray], tuple[np.ndarray, ...]]
"""A reference op's local VJP: the output's cotangent to one gradient per argument."""


# ----------------------------------------------------------------------------------------
# shapes: the helpers the shape rules and the VJPs share


def broadcast_shapes(op: str, left: Shape, right: Shape) -> Shape:
    """NumPy broadcasting of two shapes, or ShapeMismatch naming both."""
    out: list[int] = []
    for i in range(1, max(len(left), len(right)) + 1):
        a = left[-i] if i <= len(left) else 1
        b = right[-i] if i <= len(right) else 1
        if a != b and 1 not in (a, b):
            raise ShapeMismatch(op, left, right)
        out.append(b if a == 1 else a)
    return tuple(reversed(out))


def same_shape(op: str, left: Shape, right: Shape) -> Shape:
    """``left`` when it equals ``right`` exactly, else ShapeMismatch naming both."""
    if left != right:
        raise ShapeMismatch(op, left, right)
    return left


def unbroadcast(grad: np.ndarray, shape: Shape) -> np.ndarray:
    """Sum ``grad`` over the axes broadcasting added or stretched to go from ``shape``.

    Keeps the dtype of ``grad``: object arrays of numbers, float bounds, or a reference
    gradient in its own dtype.
    """
    extra = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True)
    return np.asarray(out, dtype=grad.dtype).reshape(shape)


# ----------------------------------------------------------------------------------------
# what an entry is


@dataclass(frozen=True)
class Site:
    """The exact run at one node: α, the arguments' values and error bounds, the output's."""

    alpha: Fraction | None
    args: Sequence[Arr]
    errs: Sequence[Fraction]
    out: Arr
    err: Fraction


@dataclass(frozen=True)
class ArrayNamespace:
    """The functions of an array library that the ops use beyond ``+``, ``*`` and ``@``.

    ``layer_norm`` and ``rms_norm`` (called with the array and ε as a float) are the
    library's own normalization over the last axis where it has one; left at None, the
    op entries compose them from ``.mean(axis=-1, keepdims=True)``, ``-``, ``*``, ``/``
    and ``** 0.5``, which every library here supports.
    """

    relu: Callable[[Any], Any]
    tanh: Callable[[Any], Any]
    sum: Callable[[Any], Any]
    layer_norm: Callable[[Any, float], Any] | None = None
    rms_norm: Callable[[Any, float], Any] | None = None


class Op(ABC):
    """One op. Subclasses define every part; :data:`OP_TABLE` holds one instance of each."""

    name: ClassVar[str]
    arity: ClassVar[int]
    attribute: ClassVar[str | None] = None
    """The name of the op's exact rational attribute (a Node field and a JSON key), if any.

    Every rule below receives its value as ``alpha`` (None for an op without one)."""
    rational: ClassVar[bool] = True
    """Whether the exact rules map rationals to rationals (so SymPy can check the forward)."""
    smooth: ClassVar[bool] = True
    """Whether the exact VJP is one formula everywhere (so SymPy can check it on symbols)."""
    samples: ClassVar[tuple[tuple[Shape, ...], ...]]
    """Argument shapes the generic op tests run the op on."""

    @property
    def takes_alpha(self) -> bool:
        """Whether the op's attribute is ``alpha`` (scale's constant)."""
        return self.attribute == "alpha"

    def refuses(self, value: Fraction) -> str | None:
        """Why the attribute's ``value`` is refused (ends "<op>'s <attribute> ..."), or None."""
        return None

    @abstractmethod
    def shape(self, shapes: Sequence[Shape]) -> Shape:
        """The output shape from the argument shapes, or ShapeMismatch."""

    @abstractmethod
    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        """The exact forward value (object arrays of Fractions or SymPy expressions)."""

    @abstractmethod
    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        """One gradient per argument for the output cotangent ``g``, exactly."""

    @abstractmethod
    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        """The output tangent ``J t`` for one tangent per argument ``ts``, exactly (linear in
        ``ts``, with the factors :meth:`exact_vjp` uses)."""

    @abstractmethod
    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """A bound of the output's approximation error from the arguments' bounds ``errs``."""

    @abstractmethod
    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Bounds of each gradient's approximation error (``g_err`` bounds ``g``'s)."""

    @abstractmethod
    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """A bound of the output tangent's approximation error (``t_errs`` bound ``ts``')."""

    @abstractmethod
    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """The output's floating-point bound from the arguments' bounds ``a``."""

    @abstractmethod
    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Each gradient's bound from the arguments' ``a``, the output's ``y``, the cotangent's
        ``g``."""

    @abstractmethod
    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The output tangent's bound from the arguments' ``a``, the output's ``y`` and the
        argument tangents' ``ts``."""

    @abstractmethod
    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        """The forward value built from SymPy primitives (``sp`` is the sympy module)."""

    @abstractmethod
    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        """The reference forward in the arguments' dtype, and its local VJP."""

    @abstractmethod
    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        """The reference output tangent in the arguments' dtype (``out``: :meth:`numpy`'s
        value), the NumPy form of :meth:`exact_jvp`."""

    @abstractmethod
    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        """The forward in an array library (its autodiff gives the VJP)."""


def _cast(value: object, like: np.ndarray) -> np.ndarray:
    """``value`` in the dtype of ``like`` (reference ops never widen their inputs)."""
    return np.asarray(value, dtype=like.dtype)


def _copies(big: np.ndarray, small: np.ndarray) -> int:
    """How many elements of ``big`` each element of ``small`` was broadcast to (at least 1)."""
    return max(1, big.size // max(1, small.size))


def _symbolic_pairs(sp_op: Callable[[Any, Any], Any], shape: Shape,
                    args: Sequence[np.ndarray]) -> np.ndarray:
    left, right = (np.broadcast_to(a, shape) for a in args)
    return np.array([sp_op(p, q) for p, q in zip(left.flat, right.flat, strict=True)],
                    dtype=object).reshape(shape)


def _elementwise(fn: Callable[[Any], Any], array: np.ndarray) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    for index in np.ndindex(*array.shape):
        out[index] = fn(array[index])
    return out


def _sum_back(c: Ctx, g: Bound, shape: Shape) -> Bound:
    """``g`` un-broadcast to ``shape``: its errors summed plus gamma of the copies' sizes."""
    copies = g.mag.size // max(1, math.prod(shape))
    err = unbroadcast(g.err, shape) + c.gamma(copies - 1) * unbroadcast(g.hat, shape)
    return c.done(unbroadcast(g.mag, shape), err, copies)


# ----------------------------------------------------------------------------------------
# the ops


class Add(Op):
    """``add(a, b)``: elementwise sum, NumPy broadcasting allowed. d(a+b) = da + db."""

    name, arity = "add", 2
    samples: ClassVar[tuple[tuple[Shape, ...], ...]] = (
        ((2, 3), (2, 3)), ((2, 1), (3,)), ((), (2,)), ((1,), (2, 2)), ((0, 2), (2,)))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return broadcast_shapes(self.name, shapes[0], shapes[1])

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0] + args[1])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return unbroadcast(g, args[0].shape), unbroadcast(g, args[1].shape)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] + ts[1])

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + errs[1]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return tuple(g_err * _copies(g, a) for a in at.args)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        return t_errs[0] + t_errs[1]

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``e_a + e_b + u (hat_a + hat_b)``."""
        return c.done(a[0].mag + a[1].mag, a[0].err + a[1].err + c.u * (a[0].hat + a[1].hat))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Un-broadcasting N cotangent copies: gamma_{N-1} times the sum of their sizes."""
        return [_sum_back(c, g, arg.mag.shape) for arg in a]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangents are added as the values are."""
        return self.budget(c, at, ts)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return _symbolic_pairs(sp.Add, self.shape([a.shape for a in args]), args)

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        a, b = args
        return _cast(a + b, a), lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape))

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return _cast(ts[0] + ts[1], args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return args[0] + args[1]


class ResidualAdd(Add):
    """``residual_add(identity, branch)``: the exact-shape merge. Any other shape pair,
    broadcastable or not, is a ShapeMismatch naming both; the cotangent passes unchanged
    to both edges. The forward, its error and its budget are add's (inherited)."""

    name, arity = "residual_add", 2
    samples = (((2,), (2,)), ((), ()), ((2, 2), (2, 2)), ((0, 3), (0, 3)))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return same_shape(self.name, shapes[0], shapes[1])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return g, g

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The cotangent itself, on both edges: no rounding."""
        return [g, g]

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        return _cast(args[0] + args[1], args[0]), lambda g: (g, g)


class Mul(Op):
    """``mul(a, b)``: elementwise product, broadcasting as add. d(ab) = b da + a db."""

    name, arity = "mul", 2
    samples = (((2, 3), (2, 3)), ((2, 1), (1, 3)), ((3,), ()))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return broadcast_shapes(self.name, shapes[0], shapes[1])

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0] * args[1])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (unbroadcast(obj(g * args[1]), args[0].shape),
                unbroadcast(obj(g * args[0]), args[1].shape))

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * args[1] + args[0] * ts[1])

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        return times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        mg, (a, b), (ea, eb) = mag(g), at.args, at.errs
        return (_copies(g, a) * times(mg, g_err, mag(b), eb),
                _copies(g, b) * times(mg, g_err, mag(a), ea))

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """``t_a b + a t_b``, each product's error as for the forward."""
        (a, b), (ea, eb) = at.args, at.errs
        return (times(mag(ts[0]), t_errs[0], mag(b), eb)
                + times(mag(a), ea, mag(ts[1]), t_errs[1]))

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``|a| e_b + |b| e_a + e_a e_b + u hat_a hat_b``."""
        return c.done(*product(c, a[0], a[1]))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """One product per element, then un-broadcast as for add."""
        out = []
        for arg, other in ((a[0], a[1]), (a[1], a[0])):
            size, err = product(c, g, other)
            shape = arg.mag.shape
            copies = size.size // max(1, arg.mag.size)
            summed = unbroadcast(err, shape) + c.gamma(copies - 1) * unbroadcast(
                (1 + c.u) * g.hat * other.hat + c.tiny, shape)
            out.append(c.done(unbroadcast(size, shape), summed, copies))
        return out

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t_a b + a t_b``: two products as for the forward, then their rounded sum."""
        m1, e1 = product(c, ts[0], a[1])
        m2, e2 = product(c, a[0], ts[1])
        return c.done(m1 + m2, e1 + e2 + c.u * (m1 + e1 + m2 + e2))

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return _symbolic_pairs(sp.Mul, self.shape([a.shape for a in args]), args)

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        a, b = args
        return _cast(a * b, a), lambda g: (unbroadcast(g * b, a.shape),
                                           unbroadcast(g * a, b.shape))

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        a, b = args
        return _cast(ts[0] * b + a * ts[1], a)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return args[0] * args[1]


class Scale(Op):
    """``scale(a, alpha)``: multiply by a constant α (exact rational). d(αa) = α da."""

    name, arity, attribute = "scale", 1, "alpha"
    samples = (((2, 2),), ((),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0] * alpha)

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(g * alpha),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * alpha)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        assert alpha is not None
        return abs(alpha) * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        assert at.alpha is not None
        return (abs(at.alpha) * g_err,)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        assert at.alpha is not None
        return abs(at.alpha) * t_errs[0]

    @staticmethod
    def _scaled(c: Ctx, alpha: Fraction | None, x: Bound) -> Bound:
        assert alpha is not None
        size, miss = c.alpha(alpha)
        err = size * x.err + miss * x.hat + c.u * (size + miss) * x.hat + c.tiny
        return c.done(size * x.mag, err)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """α is first rounded to the dtype (``|α̂ - α| <= u|α|``, plus ``2**-53 |α|`` when it
        passes through float64 on the way), then one product as for mul."""
        return self._scaled(c, at.alpha, a[0])

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The same product, on the cotangent."""
        return [self._scaled(c, at.alpha, g)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The same product, on the tangent."""
        return self._scaled(c, at.alpha, ts[0])

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return _elementwise(lambda v: sp.Mul(alpha, v), args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        assert alpha is not None
        (a,) = args
        k = _cast(float(alpha), a)  # α rounded once to the tensor's dtype
        return _cast(a * k, a), lambda g: (_cast(g * k, a),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        assert alpha is not None
        return _cast(ts[0] * _cast(float(alpha), args[0]), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        assert alpha is not None
        return args[0] * float(alpha)


class Linear(Op):
    """``linear(x, w)``: ``x @ w``, x of shape (..., d_in), w of shape (d_in, d_out), no bias.
    VJP: x̄ = ȳ wᵀ, w̄ = Σ over leading axes of xᵀ ȳ."""

    name, arity = "linear", 2
    samples = (((3,), (3, 2)), ((2, 3), (3, 2)), ((2, 1, 2), (2, 3)), ((0, 2), (2, 3)))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        x, w = shapes
        if len(x) < 1 or len(w) != 2 or x[-1] != w[0]:
            raise ShapeMismatch(self.name, x, w)
        return (*x[:-1], w[1])

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return matmul(args[0], args[1]).reshape(args[0].shape[:-1] + args[1].shape[1:])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        x, w = args
        d_in, d_out = w.shape
        count = math.prod(x.shape[:-1])  # not reshape(-1, d_in): d_in may be 0
        gw = matmul(x.reshape(count, d_in).T, g.reshape(count, d_out)).reshape(w.shape)
        return matmul(g, w.T).reshape(x.shape), gw

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        """``t_x w + x t_w``."""
        return obj(self.exact((ts[0], args[1]), alpha) + self.exact((args[0], ts[1]), alpha))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        return args[1].shape[0] * times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        mg, (x, w), (ex, ew) = mag(g), at.args, at.errs
        count = math.prod(x.shape[:-1])
        return (w.shape[1] * times(mg, g_err, mag(w), ew), count * times(mg, g_err, mag(x), ex))

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """Two dot products of length d_in, each term's error as for mul."""
        (x, w), (ex, ew) = at.args, at.errs
        return w.shape[0] * (times(mag(ts[0]), t_errs[0], mag(w), ew)
                             + times(mag(x), ex, mag(ts[1]), t_errs[1]))

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A dot product of length n: the propagated part as for mul summed over n terms,
        plus ``gamma_n (|x̂| @ |ŵ|)`` (any summation order, with or without FMA)."""
        x, w = a
        out = dot(c, rows(x, w.mag.shape[0]), w)
        shape = x.mag.shape[:-1] + w.mag.shape[1:]
        return Bound(out.mag.reshape(shape), out.err.reshape(shape))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Both VJPs are dot products too: ``ḡ wᵀ`` and ``xᵀ ḡ``."""
        x, w = a
        d_in, d_out = w.mag.shape
        gx = dot(c, rows(g, d_out), transposed(w))
        gw = dot(c, transposed(rows(x, d_in)), rows(g, d_out))
        return [Bound(gx.mag.reshape(x.mag.shape), gx.err.reshape(x.mag.shape)), gw]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t_x w + x t_w``: 2n products summed in any order (two dots and an addition, or
        one dot of length 2n), so their propagated errors plus ``gamma_2n`` of both
        magnitude products."""
        (x, w), (tx, tw) = a, ts
        n = w.mag.shape[0]
        pairs = [(rows(tx, n), w), (rows(x, n), tw)]
        mag = sum(p.mag @ q.mag for p, q in pairs)
        err = sum(p.mag @ q.err + p.err @ q.mag + p.err @ q.err for p, q in pairs)
        err = err + c.gamma(2 * n) * sum(p.hat @ q.hat for p, q in pairs) + 2 * n * c.tiny
        shape = x.mag.shape[:-1] + w.mag.shape[1:]
        out = c.done(np.asarray(mag), np.asarray(err), 2 * n)
        return Bound(out.mag.reshape(shape), out.err.reshape(shape))

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        x, w = args
        out = np.empty(x.shape[:-1] + w.shape[1:], dtype=object)
        for index in np.ndindex(*out.shape):
            *lead, j = index
            out[index] = sp.Add(*(x[(*lead, k)] * w[k, j] for k in range(w.shape[0])))
        return out

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        x, w = args

        def vjp(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            d_in, d_out = w.shape
            count = math.prod(x.shape[:-1])
            gw = x.reshape(count, d_in).T @ g.reshape(count, d_out)
            return _cast(g @ w.T, x), _cast(gw, w)

        return _cast(x @ w, x), vjp

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        x, w = args
        return _cast(_cast(ts[0] @ w, x) + _cast(x @ ts[1], x), x)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return args[0] @ args[1]


class Relu(Op):
    """``relu(a)``: ``max(a, 0)``, +0 for every non-positive input; its derivative is 1
    where a > 0, else 0 (0 at 0: the declared convention)."""

    name, arity, smooth = "relu", 1, False
    samples = (((3,),), ((),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(np.where(args[0] > 0, args[0], ZERO_OBJ))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(np.where(args[0] > 0, g, ZERO_OBJ)),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(np.where(args[0] > 0, ts[0], ZERO_OBJ))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0]  # 1-Lipschitz

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Where the input's sign is uncertain, the whole cotangent may be wrong."""
        return (g_err + (mag(g) if self._unsure(at) else ZERO),)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """As the VJP: where the input's sign is uncertain, the whole tangent may be wrong."""
        return t_errs[0] + (mag(ts[0]) if self._unsure(at) else ZERO)

    @staticmethod
    def _unsure(at: Site) -> bool:
        """Whether some carried input is within its error bound of 0 (its sign unknown)."""
        e = at.errs[0]
        return e > 0 and any(abs(v) <= e for v in at.args[0].reshape(-1).tolist())

    @staticmethod
    def _masks(at: Site, x: Bound) -> tuple[np.ndarray, np.ndarray]:
        """(positive, uncertain): where the exact input is > 0, and where its sign may flip."""
        exact, slack = at.args[0], at.errs[0]
        margin = inflate(x.err + up(slack), 0)
        flat = exact.reshape(-1).tolist()
        positive = np.array([v > 0 for v in flat], dtype=bool).reshape(exact.shape)
        uncertain = np.array([m == INF or abs(v) <= Fraction(m)
                              for v, m in zip(flat, margin.reshape(-1).tolist(), strict=True)],
                             dtype=bool).reshape(exact.shape)
        return positive, uncertain & (x.err + slack > 0)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Exact and 1-Lipschitz: the input's bound where it is (or may be) positive."""
        positive, uncertain = self._masks(at, a[0])
        keep = positive | uncertain
        return Bound(np.where(keep, a[0].mag, 0.0), np.where(keep, a[0].err, 0.0))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Where the input's sign is uncertain (``|x| <= e_x``) the gradient may be the
        whole cotangent or nothing, and is charged so."""
        positive, uncertain = self._masks(at, a[0])
        err = np.where(uncertain, g.hat, np.where(positive, g.err, 0.0))
        return [Bound(np.where(positive | uncertain, g.mag, 0.0), err)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """As the VJP: where the input's sign is uncertain the tangent may be whole or 0."""
        return self.budget_vjp(c, at, a, y, ts[0])[0]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return _elementwise(lambda v: sp.Max(v, 0), args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        zero = _cast(0, a)
        positive = a > 0
        return np.where(positive, a, zero), lambda g: (np.where(positive, g, zero),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return np.where(args[0] > 0, ts[0], _cast(0, args[0]))

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return xp.relu(args[0])


class Tanh(Op):
    """``tanh(a)``: a smooth nonlinear branch, tanh' = 1 - tanh². Not rational: the exact
    value is enclosed with mpmath (:func:`resverify.spec.rational.exact_tanh`)."""

    name, arity, rational = "tanh", 1, False
    samples = (((3,),), ((),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_tanh(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(g * (1 - out * out)),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * (1 - out * out))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + tanh_error(out)  # 1-Lipschitz, plus the enclosure's own width

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err + mag(g) * at.err * (2 * mag(at.out) + at.err),)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """The VJP's bound with the tangent for the cotangent (the same slope)."""
        return self.error_vjp(at, ts[0], t_errs[0])[0]

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """1-Lipschitz; a backend's tanh may be :data:`TANH_ULPS` ulps off
        (``ulp(t) <= 2u|t|``)."""
        x = a[0]
        err = x.err + 2 * TANH_ULPS * c.u * np.minimum(x.hat, 1.0) + TANH_ULPS * c.tiny
        return c.done(np.minimum(x.mag, 1.0), err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ (1 - t²)`` gets ``e_t (2|t| + e_t)`` for the error of t and ``5u`` for the
        rounding of ``1 - t²`` (or ``(1 - t)(1 + t)``)."""
        s = at.err
        slope = np.array([min(1.0, up(1 - v * v + s * (2 + s)))
                          for v in at.out.reshape(-1).tolist()],
                         dtype=np.float64).reshape(y.mag.shape)
        slope_err = y.err * (2 * np.minimum(y.mag, 1.0) + y.err) + 5 * c.u
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.u * g.hat * (slope + slope_err) + c.tiny)
        return [c.done(g.mag * slope, err)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t (1 - y²)``: the VJP's arithmetic with the tangent for the cotangent."""
        return self.budget_vjp(c, at, a, y, ts[0])[0]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return _elementwise(sp.tanh, args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        t = _cast(np.tanh(a), a)
        one = _cast(1, a)
        return t, lambda g: (_cast(g * (one - t * t), a),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return _cast(ts[0] * (_cast(1, args[0]) - out * out), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return xp.tanh(args[0])


class Sum(Op):
    """``sum(a)``: the sum of every element, shape (); the cotangent is copied to every
    element."""

    name, arity = "sum", 1
    samples = (((2, 3),), ((),), ((0, 2),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return ()

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0].sum())

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(np.broadcast_to(g, args[0].shape)).copy(),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0].sum())

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return args[0].size * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        return ts[0].size * t_errs[0]

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A sum of N elements: ``gamma_{N-1}`` times the sum of magnitudes."""
        x = a[0]
        n = x.mag.size
        err = x.err.sum() + c.gamma(n - 1) * x.hat.sum()
        return c.done(np.asarray(x.mag.sum()), np.asarray(err), n)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Copies: no rounding."""
        shape = a[0].mag.shape
        return [Bound(np.broadcast_to(g.mag, shape).copy(), np.broadcast_to(g.err, shape).copy())]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangent is summed as the value is."""
        return self.budget(c, at, ts)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        out = np.empty((), dtype=object)
        out[()] = sp.Add(*args[0].flat)
        return out

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        return _cast(a.sum(), a), lambda g: (np.broadcast_to(_cast(g, a), a.shape).copy(),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return _cast(ts[0].sum(), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return xp.sum(args[0])


class LayerNorm(Op):
    """``layer_norm(a, eps)`` over the last axis: ``(a - μ) / sqrt(σ² + ε)`` with μ the mean
    and σ² the (biased) variance of each row; ε > 0 an exact rational. No affine part:
    scale and shift are separate ``mul`` and ``add`` nodes. With ``r = 1/sqrt(σ² + ε)``
    and ``y`` the output, the VJP is ``ā = r (ḡ - mean(ḡ) - y mean(ḡ y))``. Not rational:
    ``r`` is enclosed exactly (:func:`resverify.spec.rational.exact_rsqrt`).

    A rank-0 argument has no axis to normalise and is refused (``[] vs [1]``: at least
    one axis); a last axis of length 0 gives an empty output.
    """

    name, arity, attribute, rational = "layer_norm", 1, "eps", False
    centred: ClassVar[bool] = True
    # Autodiff through the composition delivers the argument's gradient in parts: the
    # centred values (recomputed for the numerator and each factor of the square at worst)
    # each pass a part, and each is split again by the mean (docs/error-budget.md).
    grad_parts: ClassVar[int] = 6
    samples = (((3,),), ((2, 2),), ((1,),), ((2, 0),))

    def refuses(self, value: Fraction) -> str | None:
        return None if value > 0 else f"must be > 0, got {value}"

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        if not shapes[0]:
            raise ShapeMismatch(self.name, shapes[0], (1,))
        return shapes[0]

    # the exact rules, on Fractions (r enclosed) or on SymPy expressions (r symbolic)

    def _centred(self, a: Arr) -> Arr:
        n = a.shape[-1]
        return obj(a - a.sum(axis=-1, keepdims=True) / n) if self.centred and n else a

    def _rsqrt(self, c: Arr, eps: Any) -> tuple[Arr, Fraction]:
        """``r`` per row (shape (..., 1)) and the largest enclosure half-width."""
        n = c.shape[-1]
        if not n or not c.size:
            return np.zeros((*c.shape[:-1], 1), dtype=object), ZERO
        w = obj((c * c).sum(axis=-1, keepdims=True) / n + eps)
        flat = w.reshape(-1).tolist()
        if all(isinstance(v, (Fraction, int)) for v in flat):
            pairs = [exact_rsqrt(Fraction(v)) for v in flat]
            return objects([p[0] for p in pairs], w.shape), max(p[1] for p in pairs)
        import sympy  # the SymPy check of the VJP (spec.derive) passes symbols

        return objects([1 / sympy.sqrt(v) for v in flat], w.shape), ZERO

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        c = self._centred(args[0])
        return obj(c * self._rsqrt(c, alpha)[0])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        n = g.shape[-1]
        if not n:
            return (obj(g).copy(),)
        r = self._rsqrt(self._centred(args[0]), alpha)[0]
        inner = obj(g - out * ((g * out).sum(axis=-1, keepdims=True) / n))
        if self.centred:
            inner = obj(inner - g.sum(axis=-1, keepdims=True) / n)
        return (obj(r * inner),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        """``r (d - y mean(y d))`` with ``d`` the centred tangent (the tangent itself for
        rms_norm): the VJP's matrix ``r (I - y yᵀ/n) P`` applied the other way."""
        t = ts[0]
        n = t.shape[-1]
        if not n:
            return obj(t).copy()
        r = self._rsqrt(self._centred(args[0]), alpha)[0]
        d = self._centred(t)
        return obj(r * (d - out * ((out * d).sum(axis=-1, keepdims=True) / n)))

    # the exact interpreter's error bounds (non-zero only through tanh upstream)

    def _constants(self, a: Arr, alpha: Fraction | None) -> tuple[Fraction, Fraction]:
        """``(1/sqrt(ε), sqrt(n))`` rounded up: ``|y_i| <= sqrt(n)``, ``r <= 1/sqrt(ε)``."""
        assert alpha is not None
        r_eps, half = exact_rsqrt(alpha)
        n = a.shape[-1]
        return r_eps + half, Fraction(math.isqrt(n) + (math.isqrt(n) ** 2 != n))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """Lipschitz: each row of the Jacobian ``r (P - y yᵀ/n)`` has 1-norm at most
        ``(k + sqrt(n))/sqrt(ε)`` (k = 2 centred, 1 not), plus ``|c| ×`` the enclosure."""
        if not args[0].size:
            return ZERO
        c = self._centred(args[0])
        _, half = self._rsqrt(c, alpha)
        r_eps, root_n = self._constants(args[0], alpha)
        k = 2 if self.centred else 1
        return errs[0] * (k + root_n) * r_eps + mag(c) * half

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """``ā = r A``, ``A = ḡ - mean(ḡ) - y m``, ``m = mean(ḡ y)``, every factor bounded
        for both the true and the carried values (``|y_i| <= sqrt(n) + e_y``,
        ``mean|y| <= 1 + e_y``), each difference telescoped."""
        if not g.size:
            return (ZERO,)
        r_eps, root_n = self._constants(at.args[0], at.alpha)
        k = 2 if self.centred else 1
        e_in, e_y = at.errs[0], at.err
        big_g, y_max, y_mean = mag(g) + g_err, root_n + e_y, 1 + e_y
        a_max = big_g * (k + y_max * y_mean)
        d_a = g_err * (k + y_max * y_mean) + e_y * big_g * (y_mean + y_max)
        d_r = self._rsqrt(self._centred(at.args[0]), at.alpha)[1] + e_in * r_eps * r_eps
        return (d_r * a_max + r_eps * d_a,)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """``ṫ = r A``, ``A = d - y m``, ``m = mean(y d)``, ``|d_i| <= k T`` (T bounds the
        tangent, true and carried), bounded as :meth:`error_vjp` bounds its ``A``."""
        if not ts[0].size:
            return ZERO
        r_eps, root_n = self._constants(at.args[0], at.alpha)
        k = 2 if self.centred else 1
        e_in, e_y, e_t = at.errs[0], at.err, t_errs[0]
        big_t, y_max, y_mean = mag(ts[0]) + e_t, root_n + e_y, 1 + e_y
        a_max = k * big_t * (1 + y_max * y_mean)
        d_a = k * (e_t * (1 + y_max * y_mean) + big_t * e_y * (y_mean + y_max))
        d_r = self._rsqrt(self._centred(at.args[0]), at.alpha)[1] + e_in * r_eps * r_eps
        return d_r * a_max + r_eps * d_a

    # the floating-point budget

    def _rows(self, c: Ctx, at: Site) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """From the exact trace, rounded up: ``|c_i|`` (widened by the carried error),
        and per row bounds of the true ``w = σ² + ε`` (low, high) and of ``r``."""
        a, e = at.args[0], 2 * up(at.errs[0])
        cx = self._centred(a)
        c_mag = np.array([up(abs(Fraction(v))) for v in cx.reshape(-1).tolist()],
                         dtype=np.float64).reshape(a.shape) + e
        n = a.shape[-1]
        rms = np.sqrt(np.array([up(Fraction(v) / n) for v in  # inf beyond float64's range
                                (cx * cx).sum(axis=-1, keepdims=True).reshape(-1).tolist()],
                               dtype=np.float64).reshape((*a.shape[:-1], 1)))
        assert at.alpha is not None
        slop = 1 + 2.0**-40  # covers the float64 rounding of these few steps
        eps = float(at.alpha)
        w_low = (np.maximum(rms / slop - e, 0.0) ** 2 + eps) / slop
        w_high = ((rms * slop + e) ** 2 + eps) * slop
        return c_mag, w_low, w_high, slop / np.sqrt(w_low)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Mean, centred values, variance, ``+ ε``, square root and division (or product
        with a reciprocal square root), each step's rounding and propagated error; see
        docs/error-budget.md."""
        x = a[0]
        n = x.mag.shape[-1]
        if not x.mag.size or not n:
            return Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))
        c_mag, w_low, w_high, r_up = self._rows(c, at)
        e_c, c_hat = self._centred_error(c, x, c_mag)
        rho, big_r, r_err = self._rsqrt_error(c, at, n, c_mag, e_c, c_hat, w_low, w_high, r_up)
        err = e_c * big_r + c_mag * r_err + c.u * c_hat * big_r + c.tiny
        overflow = (c_hat * c_hat).sum(axis=-1, keepdims=True) >= LARGEST[c.dtype] / 2
        return c.done(c_mag * r_up, np.where(overflow | np.isinf(rho), INF, err), n)

    def _centred_error(self, c: Ctx, x: Bound, c_mag: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The error of the computed centred values and a bound of their magnitude."""
        if not self.centred:
            return x.err, c_mag + x.err
        n = x.mag.shape[-1]
        e_mu = x.err.mean(axis=-1, keepdims=True) + c.gamma(n + 2) * x.hat.mean(
            axis=-1, keepdims=True) + c.tiny  # the mean may round into the subnormals
        e_c = x.err + e_mu + c.u * (c_mag + x.err + e_mu)
        return e_c, c_mag + e_c

    def _rsqrt_error(self, c: Ctx, at: Site, n: int, c_mag: np.ndarray, e_c: np.ndarray,
                     c_hat: np.ndarray, w_low: np.ndarray, w_high: np.ndarray,
                     r_up: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ρ, R, e_r)``: the relative error of ``1/sqrt(ŵ)`` against ``r`` from ŵ's
        error, an upper bound of the computed reciprocal, and its absolute error."""
        assert at.alpha is not None
        e_v = ((2 * c_mag * e_c + e_c * e_c).mean(axis=-1, keepdims=True)
               + c.gamma(n + 2) * (c_hat * c_hat).mean(axis=-1, keepdims=True)
               + 2 * c.tiny)  # each square, and the mean, may underflow
        eps_size, eps_miss = c.alpha(at.alpha)
        e_w = e_v + eps_miss + c.u * (w_high + e_v + eps_miss)
        w_hat_low = np.maximum(w_low - e_w, eps_size * (1 - 3 * c.u))
        rho = e_w / (np.sqrt(w_hat_low) * (np.sqrt(w_low) + np.sqrt(w_hat_low)))
        own = 2 * SQRT_ULPS * c.u
        big_r = r_up * (1 + rho) * (1 + own)
        return rho, big_r, r_up * (rho + own * (1 + rho))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``r A`` with ``A = ḡ - mean(ḡ) - y mean(ḡ y)`` by any of the usual algorithms
        (the fused formula, or autodiff through the composition, where ``r³`` appears):
        the propagated errors of ḡ, y and r, and ``gamma_{2n+16}`` of the terms' sizes."""
        x = a[0]
        n = x.mag.shape[-1]
        if not x.mag.size or not n:
            return [Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))]
        c_mag, w_low, w_high, r_up = self._rows(c, at)
        e_c, c_hat = self._centred_error(c, x, c_mag)
        rho, big_r, r_err = self._rsqrt_error(c, at, n, c_mag, e_c, c_hat, w_low, w_high, r_up)
        m_hat = (g.hat * y.hat).mean(axis=-1, keepdims=True)
        terms = g.hat + y.hat * m_hat
        size = g.mag + y.mag * (g.mag * y.mag).mean(axis=-1, keepdims=True)
        d_a = g.err + y.err * m_hat + y.hat * (g.err * y.hat + g.hat * y.err).mean(
            axis=-1, keepdims=True)
        if self.centred:
            terms = terms + terms.mean(axis=-1, keepdims=True)
            size = size + g.mag.mean(axis=-1, keepdims=True)
            d_a = d_a + g.err.mean(axis=-1, keepdims=True)
        cubed = 3 * (r_err / np.maximum(r_up, c.tiny)) * (1 + rho) ** 3
        err = big_r * (d_a + c.gamma(2 * n + 16) * terms) + r_up * cubed * terms + n * c.tiny
        overflow = (c_hat * c_hat).sum(axis=-1, keepdims=True) >= LARGEST[c.dtype] / 2
        whole = c.done(r_up * size, np.where(overflow | np.isinf(rho), INF, err), 2 * n + 16)
        # the parts of the composition: each a product of the computed r (r³ with ĉ twice),
        # ḡ- and ŷ-sized factors and means; or the one fused part, whose size is its hat
        split = r_up * (1 + cubed) * (1 + c.gamma(2 * n + 16)) * terms + n * c.tiny
        size_parts = inflate(np.maximum(split, whole.hat), 2 * n + 16)
        return [Parts(whole.mag, whole.err, self.grad_parts, size_parts)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``r A`` with ``A = d - y mean(y d)``, ``d`` the centred tangent, by any of the
        usual algorithms (the fused formula, or forward-mode autodiff through the
        composition, where ``r³`` appears): the propagated errors of t, y and r, and
        ``gamma_{2n+16}`` of the terms' sizes, exactly as :meth:`budget_vjp` charges ``ḡ``."""
        x, t = a[0], ts[0]
        n = x.mag.shape[-1]
        if not x.mag.size or not n:
            return Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))
        c_mag, w_low, w_high, r_up = self._rows(c, at)
        e_c, c_hat = self._centred_error(c, x, c_mag)
        rho, big_r, r_err = self._rsqrt_error(c, at, n, c_mag, e_c, c_hat, w_low, w_high, r_up)
        d_mag, d_hat, e_d = t.mag, t.hat, t.err
        if self.centred:
            d_mag = d_mag + t.mag.mean(axis=-1, keepdims=True)
            d_hat = d_hat + t.hat.mean(axis=-1, keepdims=True)
            e_d = e_d + t.err.mean(axis=-1, keepdims=True)
        m_hat = (y.hat * d_hat).mean(axis=-1, keepdims=True)
        terms = d_hat + y.hat * m_hat
        size = d_mag + y.mag * (y.mag * d_mag).mean(axis=-1, keepdims=True)
        d_a = e_d + y.err * m_hat + y.hat * (y.hat * e_d + y.err * d_hat).mean(
            axis=-1, keepdims=True)
        cubed = 3 * (r_err / np.maximum(r_up, c.tiny)) * (1 + rho) ** 3
        err = big_r * (d_a + c.gamma(2 * n + 16) * terms) + r_up * cubed * terms + n * c.tiny
        overflow = (c_hat * c_hat).sum(axis=-1, keepdims=True) >= LARGEST[c.dtype] / 2
        return c.done(r_up * size, np.where(overflow | np.isinf(rho), INF, err), 2 * n + 16)

    # the other forms

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        a = args[0]
        out = np.empty(a.shape, dtype=object)
        n = a.shape[-1]
        for lead in np.ndindex(*a.shape[:-1]):
            row = [a[(*lead, j)] for j in range(n)]
            mean = sp.Add(*row) / n if self.centred else 0
            centred = [v - mean for v in row]
            root = sp.sqrt(sp.Add(*(v * v for v in centred)) / n + alpha)
            for j, v in enumerate(centred):
                out[(*lead, j)] = v / root
        return out

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        assert alpha is not None
        (a,) = args
        if not a.size:
            return a.copy(), lambda g: (_cast(g, a).copy(),)
        c = a - a.mean(axis=-1, keepdims=True) if self.centred else a
        r = _cast(1, a) / np.sqrt((c * c).mean(axis=-1, keepdims=True) + _cast(float(alpha), a))
        y = _cast(c * r, a)

        def vjp(g: np.ndarray) -> tuple[np.ndarray]:
            inner = g - y * (g * y).mean(axis=-1, keepdims=True)
            if self.centred:
                inner = inner - g.mean(axis=-1, keepdims=True)
            return (_cast(r * inner, a),)

        return y, vjp

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        """``r (d - y mean(y d))``, ``d`` the centred tangent, ``r`` recomputed as
        :meth:`numpy` computes it."""
        assert alpha is not None
        (a,), (t,) = args, ts
        if not a.size:
            return _cast(t, a).copy()
        c = a - a.mean(axis=-1, keepdims=True) if self.centred else a
        r = _cast(1, a) / np.sqrt((c * c).mean(axis=-1, keepdims=True) + _cast(float(alpha), a))
        d = t - t.mean(axis=-1, keepdims=True) if self.centred else t
        return _cast(r * (d - out * (out * d).mean(axis=-1, keepdims=True)), a)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        assert alpha is not None
        x = args[0]
        if not x.shape[-1]:
            return x  # empty rows: nothing to normalise (a mean over none would be NaN)
        own = xp.layer_norm if self.centred else xp.rms_norm
        if own is not None:
            return own(x, float(alpha))
        c = x - x.mean(axis=-1, keepdims=True) if self.centred else x
        return c / ((c * c).mean(axis=-1, keepdims=True) + float(alpha)) ** 0.5


class RmsNorm(LayerNorm):
    """``rms_norm(a, eps)`` over the last axis: ``a / sqrt(mean(a²) + ε)``, no centring
    and no affine part; the VJP is ``ā = r (ḡ - y mean(ḡ y))``. Every rule is layer_norm's
    without the mean (inherited: ``centred`` is False)."""

    name = "rms_norm"
    centred = False
    grad_parts = 3  # the numerator and both factors of the square


OP_TABLE: Mapping[str, Op] = {
    op.name: op for op in (Add(), ResidualAdd(), Mul(), Scale(), Linear(), Relu(), Tanh(), Sum(),
                           LayerNorm(), RmsNorm())
}
"""Every op of the IR by name; the order is the order the IR documents them in."""
