"""The base of a smooth unary elementwise op, whose derivative is one local slope.

For ``y = f(a)`` elementwise, the VJP is ``ḡ · f'(a)`` and the JVP ``t · f'(a)``: the same
product with the cotangent or with the tangent. So an entry gives the slope once (exact and
in NumPy, written from the output where it can be: tanh's ``1 - y²``, sigmoid's
``y (1 - y)``), and the reverse and forward rules, their error bounds and budgets and the
reference VJP and JVP follow; the forward and reverse budgets are the same arithmetic, so
the tangent's rules are the cotangent's.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.errors import Shape
from resverify.spec.ops.base import Op, Pullback, Site, cast, elementwise
from resverify.spec.rational import Arr, obj
from resverify.spec.rounding import Bound, Ctx

__all__ = []


class Elementwise(Op):
    """A smooth unary elementwise op: a subclass gives its exact value, its slope (exact
    and NumPy), and the error and budget rules of the value and of the VJP; the rest is
    derived here. The SymPy, NumPy and array-library values are each library's function
    named after the op (``sympy.tanh``, ``np.tanh``, ``xp.tanh``): an op overrides
    :meth:`symbolic` or :meth:`numpy_value` only where its library has no such function
    (sigmoid), and an adapter names the function only where its library differs."""

    arity = 1
    samples = (((3,),), ((),))

    @abstractmethod
    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        """``f'(a)`` exactly, from the argument or the carried output ``out``."""

    def numpy_value(self, a: np.ndarray) -> np.ndarray:
        """The reference value ``f(a)`` (cast to ``a``'s dtype by the caller): by default
        NumPy's function named after the op (``np.tanh``)."""
        return getattr(np, self.name)(a)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        """By default SymPy's function named after the op (``sympy.tanh``), elementwise."""
        return elementwise(getattr(sp, self.name), args[0])

    @abstractmethod
    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The reference slope in ``a``'s dtype, from the reference value ``out``."""

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return shapes[0]

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(g * self.exact_slope(args, out)),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * self.exact_slope(args, out))

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """The VJP's bound with the tangent for the cotangent (the same slope)."""
        return self.error_vjp(at, ts[0], t_errs[0])[0]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t · slope``: the VJP's arithmetic with the tangent for the cotangent."""
        return self.budget_vjp(c, at, a, y, ts[0])[0]

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        y = cast(self.numpy_value(a), a)
        slope = self.numpy_slope(a, y)
        return y, lambda g: (cast(g * slope, a),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(ts[0] * self.numpy_slope(args[0], out), args[0])
