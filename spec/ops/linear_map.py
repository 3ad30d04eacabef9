"""The bases of the linear ops, whose rules follow from one value and one transpose.

An op linear in its arguments together (add, residual_add, scale, sum) is its own
derivative: ``J t`` is the op applied to the tangents, so the JVP, its error bound and its
budget are the forward's run on the tangents, as JAX's ``deflinear`` derives them. An op
linear in each argument apart (mul, linear) is bilinear: ``J t = f(t_a, b) + f(a, t_b)``,
as JAX's ``defbilinear`` has it, and the JVP's error bound is the two forwards' bounds
summed. Either way the VJP is the transpose of that linear map.

The value and the transpose are each written once, over a namespace of array functions
(``+``, ``*`` and ``@`` are operators; ``xp.sum``, ``xp.matmul``): the exact and the
symbolic forms run them on object arrays (Fractions, SymPy expressions: :data:`OBJECTS`),
the reference on NumPy arrays (:data:`NUMPY`), an adapter on its library
(:class:`~resverify.spec.ops.base.ArrayNamespace`). Only the attribute changes form: α is
exact (a Fraction or a symbol) in the spec, rounded once to the arguments' dtype in the
reference, a Python float for an array library (which rounds it to the tensor's dtype).

What stays the op's own is what no linear map decides: the shape rule, the error and
budget of the value and of the transpose (an analysis of the arithmetic, not of the map),
the tangent's budget of a bilinear op, and the enclosure rules on balls.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import rational
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import ArrayNamespace, Op, Pullback, Site, cast
from resverify.spec.rational import Arr, obj
from resverify.spec.rounding import Bound, Ctx

__all__ = []

OBJECTS = ArrayNamespace(np, matmul=rational.matmul)
"""The exact and symbolic forms' functions: NumPy's on object arrays, with the product of
Fraction matrices done on integers (:func:`resverify.spec.rational.matmul`)."""

NUMPY = ArrayNamespace(np)
"""The reference's functions: NumPy's own."""


class LinearMap(Op):
    """An op linear in all its arguments together: a subclass gives :meth:`value` and
    :meth:`transpose`, the error and budget of both, and its enclosure rules; the exact,
    symbolic, reference and array forms, the reference VJP and every forward-mode rule
    follow here."""

    @abstractmethod
    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        """The op's value in any form: ``xp`` the form's functions, ``k`` the attribute in
        the form's terms (None for an op without one)."""

    @abstractmethod
    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """``Jᵀ g``, one gradient per argument, in any form (as :meth:`value`)."""

    @staticmethod
    def numpy_attribute(alpha: Fraction | float | Params | None, like: np.ndarray) -> Any:
        """The attribute in the reference: an exact one rounded once to the dtype of
        ``like``, integer ones as they are."""
        if alpha is None or isinstance(alpha, Params):
            return alpha
        return cast(float(alpha), like)

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(self.value(OBJECTS, args, alpha))

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        """The exact form on SymPy symbols (``+``, ``*`` and ``@`` build SymPy's sums and
        products)."""
        return self.exact(args, alpha)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Any) -> Any:
        """The value in the library: an exact attribute as a Python float (the library
        rounds it to the tensor's dtype), integer ones as they are."""
        if alpha is None or isinstance(alpha, Params):
            return self.value(xp, args, alpha)
        return self.value(xp, args, float(alpha))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return tuple(obj(d) for d in self.transpose(OBJECTS, g, args, alpha))

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        k = self.numpy_attribute(alpha, args[0])

        def vjp(g: np.ndarray) -> tuple[np.ndarray, ...]:
            return tuple(cast(d, a) for d, a in
                         zip(self.transpose(NUMPY, g, args, k), args, strict=True))

        return cast(self.value(NUMPY, args, k), args[0]), vjp

    # forward mode: the op on the tangents

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return self.exact(ts, alpha)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(self.value(NUMPY, ts, self.numpy_attribute(alpha, args[0])), args[0])

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """The forward's bound on the tangents (a linear op's bound reads no output)."""
        return self.error(ts, t_errs, at.out, at.alpha)

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangents go through the same arithmetic as the values."""
        return self.budget(c, at, ts)


class Bilinear(LinearMap):
    """A binary op linear in each argument apart (mul, linear): as :class:`LinearMap`, with
    the JVP ``f(t_a, b) + f(a, t_b)`` and its error bound the two forwards' bounds summed;
    the tangent's budget (:meth:`budget_jvp`) stays the op's own, since how the two
    products are summed is the op's arithmetic."""

    arity = 2

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        """``f(t_a, b) + f(a, t_b)``."""
        (a, b), (ta, tb) = args, ts
        return obj(self.exact((ta, b), alpha) + self.exact((a, tb), alpha))

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        """``f(t_a, b) + f(a, t_b)``, each rounded to the arguments' dtype, then their sum."""
        (a, b), (ta, tb), k = args, ts, self.numpy_attribute(alpha, args[0])
        return cast(cast(self.value(NUMPY, (ta, b), k), a)
                    + cast(self.value(NUMPY, (a, tb), k), a), a)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """Each product's bound as for the forward: ``f(t_a, b)`` and ``f(a, t_b)``."""
        (a, b), (ea, eb) = at.args, at.errs
        return (self.error((ts[0], b), (t_errs[0], eb), at.out, at.alpha)
                + self.error((a, ts[1]), (ea, t_errs[1]), at.out, at.alpha))

    @abstractmethod
    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangent's bound: the two products and their sum, in the op's arithmetic."""
