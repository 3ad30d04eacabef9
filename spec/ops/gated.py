"""The base of a gated activation ``a · gate(a)``, ``0 <= gate <= 1``: silu, gelu_erf, gelu_tanh.

Each such op is the argument times a smooth gate (σ(a), Φ(a), σ(2z(a))): its exact value
is ``a`` times the gate's enclosure, its slope ``gate + a · gate'``, its size at most
``|a|``. Libraries compute ``a (1 + erf(a/√2))/2`` or ``a/(1 + exp(-a))``, whose gate
cancels or overflows for ``a < 0``: their error is a few units of ``u|a|``, not of the
result, so each op's allowance (``ulps``) is stated in units of ``u|a|``. A subclass gives
its gate (exact, its derivative, NumPy's), its Lipschitz and curvature bounds and its
allowance; the value's and the slope's rules follow here.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, half_ulp, mul_up, next_up
from resverify.spec.ceiling import up_abs_plus
from resverify.spec.ops.base import Site, cast
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.rational import Arr, fraction, mag, objects, times
from resverify.spec.rounding import Bound, Ctx

__all__ = []

LIBM_UNITS = 40
"""Units of ``2**-53 |a|`` the fast oracle allows the NumPy value it computes midpoints with
(the gate's own ulps, the argument of the gate and the product)."""


class Gated(Elementwise):
    """``a · gate(a)``: a subclass gives the gate, its slope, NumPy's gate and the bounds
    below; every rule of the op follows."""

    lipschitz: ClassVar[Fraction]
    """At least ``sup |f'|``."""
    curvature: ClassVar[Fraction]
    """At least ``sup |f''|``: how far the slope moves with the argument."""
    ulps: ClassVar[int]
    """The library allowance, in units of ``u|a|``."""
    slope_units: ClassVar[int] = 32
    """A backend's slope is off by at most this many ``u`` (times :meth:`slope_growth`)."""

    @abstractmethod
    def gate(self, x: Fraction) -> Fraction:
        """The gate at ``x``, within ``gate · 2**-199 + 2**-700`` of the true one."""

    @abstractmethod
    def gate_slope(self, x: Any, g: Any) -> Any:
        """``gate'(x)`` from ``x`` and ``g = gate(x)``: Fractions, or SymPy expressions."""

    @abstractmethod
    def numpy_gate(self, a: np.ndarray) -> np.ndarray:
        """The gate in ``a``'s dtype (the reference's)."""

    @abstractmethod
    def numpy_gate_slope(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        """``gate'(a)`` in ``a``'s dtype, from NumPy's gate ``g``."""

    def slope_growth(self, size: np.ndarray) -> np.ndarray:
        """How a backend's slope arithmetic grows with ``|a|`` (1: it does not)."""
        return np.ones_like(size)

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        flat = [fraction(v) for v in args[0].reshape(-1).tolist()]
        return objects([x * self.gate(x) for x in flat], args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        """``gate + a gate'``; the gate is the enclosure's for a number, ``out/a`` for a
        SymPy symbol (``out = a gate(a)``)."""
        slope = []
        for x, y in zip(args[0].reshape(-1).tolist(), out.reshape(-1).tolist(), strict=True):
            g = self.gate(x) if isinstance(x, Fraction) else y / x
            slope.append(g + x * self.gate_slope(x, g))
        return objects(slope, args[0].shape)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """Lipschitz in the argument, plus ``|a|`` times the gate's width."""
        return self.lipschitz * errs[0] + mag(out) / 2**199 + mag(args[0]) / 2**700

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """The slope at the carried argument moves by ``curvature · e_a``; the gate's and
        its derivative's widths move it by less than ``(1 + |a|)³ 2**-190``."""
        slope_err = self.curvature * at.errs[0] + (1 + mag(at.args[0])) ** 3 / 2**190
        return (times(mag(g), g_err, self.lipschitz, slope_err),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Lipschitz; a backend's value may be :attr:`ulps` units of ``u|a|`` off, or off by
        twice the smallest normal (``tiny/u``) where it underflows."""
        x = a[0]
        size = np.minimum(x.mag, up_abs_plus(at.out, at.err).reshape(x.mag.shape))
        err = float(self.lipschitz) * x.err + self.ulps * c.u * x.hat + c.tiny / c.u
        return c.done(size, err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ s`` with the slope ``s`` off by ``curvature · e_a`` plus
        :attr:`slope_units` u (times :meth:`slope_growth`), and one rounding of the product."""
        x = a[0]
        slope = float(self.lipschitz)
        slope_err = (float(self.curvature) * x.err
                     + self.slope_units * c.u * self.slope_growth(x.hat))
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.u * g.hat * (slope + slope_err) + c.tiny)
        return [c.done(g.mag * slope, err)]

    def numpy_value(self, a: np.ndarray) -> np.ndarray:
        return a * self.numpy_gate(a)

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        g = self.numpy_gate(a)
        return cast(g + a * self.numpy_gate_slope(a, g), a)

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return Ball.of(*self.wide_value(args[0]))

    def wide_value(self, a: Ball) -> tuple[np.ndarray, np.ndarray]:
        """Lipschitz: NumPy's value at ``v = mid + lo`` ± (the Lipschitz bound times the
        radius and the rounding of v, and :data:`LIBM_UNITS` of ``2**-53 |v|``), as
        ``(mid, radius)``."""
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            value = a.mid + a.lo
            mid = self.numpy_value(value)
        lip = np.full_like(value, float(self.lipschitz))
        own = mul_up(np.abs(value), np.full_like(value, LIBM_UNITS * 2.0**-53))
        spread = add_up(mul_up(lip, add_up(a.rad, half_ulp(value))), own, half_ulp(mid),
                        np.full_like(value, 2.0**-1021))
        return mid, np.where(np.isfinite(mid), spread, np.inf)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (ball.mul(g, Ball.of(*self.wide_slope(args[0]))),)

    def wide_slope(self, a: Ball) -> tuple[np.ndarray, np.ndarray]:
        """NumPy's slope at ``v = mid + lo``, ± the curvature times the radius and
        :attr:`slope_units` float64 units (times :meth:`slope_growth`), as ``(mid,
        radius)``: the gradient is ``g`` times it."""
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            value = a.mid + a.lo
            slope = self.numpy_slope(value, value)
        moved = mul_up(np.full_like(value, float(self.curvature)),
                       add_up(a.rad, half_ulp(value)))
        arithmetic = self.slope_units * 2.0**-53 * self.slope_growth(np.abs(value))
        rad = add_up(moved, next_up(arithmetic))
        return slope, np.where(np.isfinite(slope), rad, np.inf)
