"""``layer_norm``: normalisation over the last axis, exact ε, no affine part."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.ball import INF as BALL_INF
from resverify.spec.ball import (
    Ball,
    NotEnclosed,
    add_up,
    clean,
    matmul_up,
    mul_up,
    next_up,
    ratios_of,
)
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.norm_rows import (
    Row,
    centre,
    centre_vjp,
    row_moments,
    rows_of,
    spread_statistics,
)
from resverify.spec.ops.attributes import EXACT, Kind
from resverify.spec.ops.base import ArrayNamespace, Op, Pullback, Site, cast
from resverify.spec.rational import TANH_PRECISION_BITS, ZERO, Arr, exact_rsqrt, mag, obj, objects
from resverify.spec.rounding import INF, LARGEST, Bound, Ctx, Parts, inflate, up

SQRT_ULPS = 2
"""Error allowed for a backend's square root or reciprocal square root, in ulps.

IEEE 754 sqrt is correctly rounded (half an ulp); CUDA's ``rsqrtf`` is documented at 2 ulps
and vectorised CPU kernels use ``1/sqrt`` (two roundings, within 1 ulp)."""


class LayerNorm(Op):
    """``layer_norm(a, eps)`` over the last axis: ``(a - μ) / sqrt(σ² + ε)`` with μ the mean
    and σ² the (biased) variance of each row; ε > 0 an exact rational. No affine part:
    scale and shift are separate ``mul`` and ``add`` nodes. With ``r = 1/sqrt(σ² + ε)``
    and ``y`` the output, the VJP is ``ā = r (ḡ - mean(ḡ) - y mean(ḡ y))``. Not rational:
    ``r`` is enclosed exactly (:func:`resverify.spec.rational.exact_rsqrt`).

    A rank-0 argument has no axis to normalise and is refused (``[] vs [1]``: at least
    one axis); a last axis of length 0 gives an empty output.
    """

    name, arity, rational = "layer_norm", 1, False
    attributes: ClassVar[Mapping[str, Kind]] = {"eps": EXACT}
    norm = True
    centred: ClassVar[bool] = True
    fused: ClassVar[bool] = True
    """A backend runs it as one kernel, which may compute in a wider dtype (:meth:`inner`)."""
    # Autodiff through the composition delivers the argument's gradient in parts: the
    # centred values (recomputed for the numerator and each factor of the square at worst)
    # each pass a part, and each is split again by the mean (docs/error-budget.md).
    grad_parts: ClassVar[int] = 6
    samples = (((3,),), ((2, 2),), ((1,),), ((2, 0),))

    def refuses(self, value: Fraction) -> str | None:
        return None if value > 0 else f"must be > 0, got {value}"

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
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
        mags, squares = row_moments(a, self.centred)  # up(|c_i|), up(Σ c²/n): inf past range
        c_mag = mags + e
        rms = np.sqrt(squares)
        assert at.alpha is not None
        slop = 1 + 2.0**-40  # covers the float64 rounding of these few steps
        eps = float(at.alpha)
        w_low = (np.maximum(rms / slop - e, 0.0) ** 2 + eps) / slop
        w_high = ((rms * slop + e) ** 2 + eps) * slop
        return c_mag, w_low, w_high, slop / np.sqrt(w_low)

    def inner(self, c: Ctx) -> Ctx:
        """The context the statistics and the normalisation are computed in: ``c`` itself,
        or, where ``c`` declares a wider accumulation dtype and this norm is one fused
        kernel (:attr:`fused`), that dtype's, the result rounded once to ``c``'s dtype.

        torch's CPU ``native_layer_norm`` for bfloat16 and float16 computes the mean, the
        variance, ``1/sqrt`` and ``(x r + b) γ + β`` in float32 (``at::opmath_type``) and
        rounds once; its backward reads the mean and ``1/sqrt`` saved in the dtype and
        computes ``dX`` in float32, rounded once (docs/error-budget.md)."""
        return c.opmath if self.fused else c

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Mean, centred values, variance, ``+ ε``, square root and division (or product
        with a reciprocal square root), each step's rounding and propagated error; see
        docs/error-budget.md. Under a declared wider accumulation (:meth:`inner`, context
        ``s``) those steps are charged ``s``'s roundings, the kernel's uncentred form
        ``x r + b`` (``b = -r μ``) ``u_s (|x̂| + 2 |μ̂|) R`` more, and the one rounding to
        the dtype ``u`` of the computed value's size: never above the rule in the dtype
        (the terms are those of the dtype's rule with ``u_s <= u/2**16`` in place of ``u``;
        the extra ``u_s |x̂_i| R <= n u_s mean(x̂) R`` and ``u`` of the value are inside
        the ``gamma_{n+2} mean(x̂) R`` of the dtype's mean, docs/error-budget.md)."""
        x = a[0]
        n = x.mag.shape[-1]
        if not x.mag.size or not n:
            return Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))
        s = self.inner(c)
        c_mag, w_low, w_high, r_up = self._rows(c, at)
        e_c, c_hat = self._centred_error(s, x, c_mag)
        rho, big_r, r_err = self._rsqrt_error(s, at, n, c_mag, e_c, c_hat, w_low, w_high, r_up)
        err = e_c * big_r + c_mag * r_err + s.u * c_hat * big_r + s.tiny
        if s is c and not self.centred:
            err = np.fmin(err, self._normalised_cap(c, at, n, c_mag * r_up))
        if s is not c:
            err = err + s.u * (x.hat + 2 * self._mean_top(s, x)) * big_r
            err = err + c.u * (c_mag * r_up + err) + c.tiny
        if self.centred:
            err = np.fmin(err, self._centred_cap(c, s, at, x, big_r, c_mag * r_up))
        overflow = (c_hat * c_hat).sum(axis=-1, keepdims=True) >= LARGEST[c.dtype] / 2
        return c.done(c_mag * r_up, np.where(overflow | np.isinf(rho), INF, err), n)

    def _normalised_cap(self, c: Ctx, at: Site, n: int, y_top: np.ndarray) -> np.ndarray:
        """A bound of ``|ŷ_i - y_i|`` whatever the argument's error, for the uncentred
        norm computed step by step in ``c``: ``|ŷ_i| + min(sqrt(n), y_top)``. The true
        ``|y_i| <= sqrt(n)``; the computed ``ŷ_i = fl(x̂_i R̂)`` (or ``x̂_i / fl(sqrt(ŵ))``)
        reads ``x̂`` both in its numerator and in ``ŵ = fl(fl(mean fl(x̂_j²)) + ε̂)``, and
        ``x̂_i² <= Σ x̂_j²``, ``ŵ >= (1 - u)(1 - gamma_{n+2}) mean(x̂²)`` (each square
        ``>= (1 - u) x̂_j² -`` one subnormal, a sum of non-negative terms ``>= (1 -
        gamma_{n-1})`` of theirs, the division one rounding and one subnormal more, those
        ``2 tiny`` at most ``ε̂``), so ``|ŷ_i| <= sqrt(n) (1 + u) / ((1 - η) sqrt((1 -
        u)(1 - gamma_{n+2})))``, ``η = 2 SQRT_ULPS u`` the reciprocal square root's (or the
        square root's) relative error. Infinite where ``ε̂`` may be below ``2 tiny``."""
        assert at.alpha is not None
        eps_size, eps_miss = c.alpha(at.alpha)
        if not (eps_size - eps_miss >= 2 * c.tiny and c.gamma(n + 2) < 1):
            return np.full_like(y_top, INF)
        gam = Fraction(c.gamma(n + 2))
        u, eta = Fraction(c.u), 2 * SQRT_ULPS * Fraction(c.u)
        root_n = math.isqrt(n) + (math.isqrt(n) ** 2 != n)
        grown = up(Fraction(root_n) * (1 + u) / (1 - eta))
        top = inflate(np.asarray(grown * math.sqrt(up(1 / ((1 - u) * (1 - gam))))), 4)
        return inflate(top + np.fmin(float(root_n), y_top), 2)

    def _centred_cap(self, c: Ctx, s: Ctx, at: Site, x: Bound, big_r: np.ndarray,
                     y_top: np.ndarray) -> np.ndarray:
        """A bound of ``|ŷ_i - y_i|`` whatever the argument's error, for the centred norm
        computed step by step in ``c`` (``s`` is ``c``) or by the fused kernel in ``s``
        rounded once to ``c``: ``|ŷ_i| + min(sqrt(n), y_top)``; docs/error-budget.md, "The
        output's own size caps layer_norm's". The true ``|y_i| <= sqrt(n)``. The computed
        variance is never negative (:meth:`_centred_vjp_cap`), so ``ŵ >= ε̂`` and the computed
        reciprocal square root ``â <= A = min(R, 1/((1 - η) sqrt(ε̂)))`` (``η = 2 SQRT_ULPS
        u_s``; a division by the computed ``sqrt(ŵ)`` likewise); the computed mean ``|μ̂| <=
        M`` (:meth:`_mean_top`). The output ``fl(fl(x̂_i - μ̂) â)`` (or ``/ fl(sqrt(ŵ))``),
        or the kernel's ``fl(fl(x̂_i â) + fl(-â μ̂))`` rounded to ``c``, is at most ``(1 +
        u)(1 + u_s)² (X_i + M) A + 4 (A + 1) tiny`` (each rounding ``|fl(z)| <= (1 + u)|z| +
        tiny``). No variance enters, so it holds for any algorithm of it (Welford's); it
        is about ``(X_i + M)/sqrt(ε)`` once the argument's error reaches the row's spread,
        far above the uncentred norm's ``sqrt(n)`` (:meth:`_normalised_cap`), yet finite.
        ``INF`` where ``ε̂`` may be 0 or that size may reach the dtype's largest value."""
        assert at.alpha is not None
        n = x.mag.shape[-1]
        eps_size, eps_miss = s.alpha(at.alpha)
        eps_low = Fraction(eps_size) - Fraction(eps_miss)
        if not eps_low > 0:
            return np.full_like(y_top, INF)
        eta = 2 * SQRT_ULPS * Fraction(s.u)
        by_eps = inflate(np.asarray(1 / math.sqrt(float(eps_low)) * up(1 / (1 - eta))), 4)
        a_top = np.fmin(big_r, by_eps)
        grown = (1 + c.u) * (1 + s.u) ** 2
        size = inflate(grown * (x.hat + self._mean_top(s, x)) * a_top
                       + 4 * (a_top + 1) * max(c.tiny, s.tiny), 4)
        root_n = float(math.isqrt(n) + (math.isqrt(n) ** 2 != n))
        top = inflate(size + np.fmin(root_n, y_top), 2)
        return np.where(size < LARGEST[c.dtype] / 2, top, INF)

    def _mean_top(self, s: Ctx, x: Bound) -> np.ndarray:
        """An upper bound of the computed mean's magnitude (0 when not centred)."""
        if not self.centred:
            return np.zeros((*x.mag.shape[:-1], 1))
        n = x.mag.shape[-1]
        return x.hat.mean(axis=-1, keepdims=True) * (1 + s.gamma(n + 2)) + s.tiny

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

    def _saved(self, c: Ctx, s: Ctx, x: Bound, at: Site,
               rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(ĉ, ρ, R, e_r, e_c)`` as the backward reads them: computed in ``s`` and, where
        ``s`` is wider (the fused kernel), the mean and ``1/sqrt`` saved rounded to the
        dtype: ``u |μ̂|`` more on every centred value, ``u R`` more on ``r``; ``rows`` the
        site's :meth:`_rows` (read once per rule)."""
        n = x.mag.shape[-1]
        c_mag, w_low, w_high, r_up = rows
        e_c, c_hat = self._centred_error(s, x, c_mag)
        rho, big_r, r_err = self._rsqrt_error(s, at, n, c_mag, e_c, c_hat, w_low, w_high, r_up)
        if s is not c:
            shift = c.u * self._mean_top(s, x)
            e_c, c_hat = e_c + shift, c_hat + shift
            r_err, big_r = r_err + c.u * big_r, big_r * (1 + c.u)
        return c_hat, rho, big_r, r_err, e_c

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``r A`` with ``A = ḡ - mean(ḡ) - y mean(ḡ y)`` by any of the usual algorithms
        (the fused formula, or autodiff through the composition, where ``r³`` appears):
        the propagated errors of ḡ, y and r, and ``gamma_{2n+16}`` of the terms' sizes.
        Under a declared wider accumulation (:meth:`inner`): torch's fused kernel, ``a ḡ +
        b x + c`` from the saved mean ``μ̂`` and ``a = 1/sqrt`` (:meth:`_saved`), which is
        the formula with ``r = a`` and ``y = (x - μ̂) a`` (its error ``|ĉ| e_r + R e_c``
        in place of the forward's), its sums ``Σ ḡ x`` and ``Σ ḡ`` uncentred
        (:meth:`_uncentred`), in the wider dtype, rounded once to the dtype. The uncentred
        norm in its own dtype is capped by what its parts and the true gradient can be
        (:meth:`_vjp_parts_cap`), finite where the argument's error reaches the row's size."""
        x = a[0]
        n = x.mag.shape[-1]
        if not x.mag.size or not n:
            return [Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))]
        s = self.inner(c)
        rows = self._rows(c, at)
        r_up = rows[3]
        c_hat, rho, big_r, r_err, e_c = self._saved(c, s, x, at, rows)
        if s is not c:  # the kernel's y is (x - μ̂) â, from the saved statistics
            y = Bound(y.mag, c_hat * r_err + big_r * e_c)
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
        err = big_r * (d_a + s.gamma(2 * n + 16) * terms) + r_up * cubed * terms + n * s.tiny
        # the parts of the composition: each a product of the computed r (r³ with ĉ twice),
        # ḡ- and ŷ-sized factors and means; or the one fused part, whose size is its hat
        split = r_up * (1 + cubed) * (1 + c.gamma(2 * n + 16)) * terms + n * c.tiny
        if s is not c:
            err = err + self._uncentred(s, x, g, c_hat, big_r)
            err = err + c.u * (r_up * size + err) + c.tiny
        if self.centred:  # the one fused part (s wider) or the composition's parts
            parts_top = self._centred_vjp_cap(c, s, at, n, x, g, big_r)
            split = np.fmin(split, parts_top)
            many = 1 + (c.gamma(self.grad_parts - 1) if s is c else 0.0)
            err = np.fmin(err, many * parts_top + r_up * size)
        elif s is c:
            parts_top = self._vjp_parts_cap(c, at, n, g, c_hat, big_r)
            split = np.fmin(split, parts_top)
            err = np.fmin(err, (1 + c.gamma(self.grad_parts - 1)) * parts_top + r_up * size)
        overflow = (c_hat * c_hat).sum(axis=-1, keepdims=True) >= LARGEST[c.dtype] / 2
        whole = c.done(r_up * size, np.where(overflow | np.isinf(rho), INF, err), 2 * n + 16)
        size_parts = inflate(np.maximum(split, whole.hat), 2 * n + 16)
        return [Parts(whole.mag, whole.err, self.grad_parts, size_parts)]

    def _vjp_parts_cap(self, c: Ctx, at: Site, n: int, g: Bound, c_hat: np.ndarray,
                       big_r: np.ndarray) -> np.ndarray:
        """A bound of the computed parts' summed sizes ``Σ_k |p̂_k|`` of the uncentred norm's
        VJP computed step by step in ``c``, whatever the argument's error (``INF`` where it
        does not hold); docs/error-budget.md, "The VJP's own size caps rms_norm's".

        Every usual algorithm reads one computed row ``x̂`` (``|x̂_i| <= ĉ_i``), its
        ``ŵ = fl(fl(mean fl(x̂_j²)) + ε̂)`` and ``R̂``, the computed ``1/sqrt(ŵ)`` (or the
        reciprocal of the computed ``sqrt(ŵ)``), and the computed cotangent ``ĝ``
        (``|ĝ_j| <= G_j``, ``g.hat``). Its parts are the direct ``ĝ_i R̂`` and the
        statistics term ``x̂_i R̂³ Σ_j ĝ_j x̂_j / n`` (autodiff through ``x rsqrt(mean(x²) +
        ε)`` splits it in two halves, one per factor of the square; the fused formula
        ``R̂ (ĝ - ŷ mean(ĝ ŷ))`` with ``ŷ = x̂ R̂`` recomputed is the same product), each
        rounded at most ``2n + 16`` times, a sum of n terms among them (``gamma_{2n+16}``).
        ``ŵ >= ε̂`` (the rounded sum of non-negative terms, rounding is monotone) and
        ``R̂ <= 1/((1 - η) sqrt(ŵ))`` (``η = 2 SQRT_ULPS u``), so ``R̂ <= R_top = min(R,
        1/((1 - η) sqrt(ε̂)))``; with ``ε̂ >= 2 tiny``, ``ŵ >= (1 - u)(1 - gamma_{n+2})
        mean(x̂²)`` (the forward cap's argument), so ``R̂² <= K² / mean(x̂²)``, ``K = 1/((1 -
        η) sqrt((1 - u)(1 - gamma_{n+2})))``, and by Cauchy-Schwarz (``Σ |ĝ_j x̂_j| <=
        ‖ĝ‖ ‖x̂‖``, ``|x̂_i| <= ‖x̂‖``) ``|x̂_i| R̂³ Σ_j |ĝ_j x̂_j| / n <= R̂ K² |x̂_i| ‖ĝ‖ ‖x̂‖
        / ‖x̂‖² <= R_top K² ‖G‖``. So ``Σ_k |p̂_k| <= (1 + gamma_{2n+16}) (R_top (G_i + K²
        ‖G‖) + (2n + 16)(R_top³ + 1)(2 ĉ_i + 1) tiny)``, the last term every rounding into
        the subnormals (at most ``tiny``) times the largest product of the factors after
        it. Where no intermediate may overflow: every one is bounded by a part, by the
        forward's (checked by the caller), or by ``(R_top³ + 1)(Σ_j G_j ĉ_j + 1)`` twice
        and a little, kept below the dtype's largest value here."""
        assert at.alpha is not None
        eps_size, eps_miss = c.alpha(at.alpha)
        if not (eps_size - eps_miss >= 2 * c.tiny and c.gamma(2 * n + 16) < 1):
            return np.full_like(c_hat, INF)
        u, eta = Fraction(c.u), 2 * SQRT_ULPS * Fraction(c.u)
        gam = Fraction(c.gamma(n + 2))
        k_sq = up(1 / ((1 - eta) ** 2 * (1 - u) * (1 - gam)))
        eps_low = Fraction(eps_size) - Fraction(eps_miss)
        by_eps = inflate(np.asarray(1 / math.sqrt(float(eps_low)) * up(1 / (1 - eta))), 4)
        r_top = np.fmin(big_r, by_eps)
        g_norm = inflate(np.sqrt((g.hat * g.hat).sum(axis=-1, keepdims=True)), n + 2)
        cubed = r_top ** 3 + 1
        tiny = (2 * n + 16) * cubed * (2 * c_hat + 1) * c.tiny
        top = (1 + c.gamma(2 * n + 16)) * (r_top * (g.hat + k_sq * g_norm) + tiny)
        through = 4 * (1 + c.gamma(2 * n + 16)) * cubed * (
            (g.hat * c_hat).sum(axis=-1, keepdims=True) + 1)
        return np.where(inflate(through, n) < LARGEST[c.dtype], inflate(top, n), INF)

    def _centred_vjp_cap(self, c: Ctx, s: Ctx, at: Site, n: int, x: Bound, g: Bound,
                         big_r: np.ndarray) -> np.ndarray:
        """A bound of the computed parts' summed sizes ``Σ_k |p̂_k|`` of the centred norm's
        VJP, whatever the argument's error (``INF`` where it does not hold); computed step
        by step in ``c`` (``s`` is ``c``), or by the fused kernel in ``s`` from the mean and
        ``1/sqrt`` saved in ``c``, rounded once to ``c``; docs/error-budget.md, "The VJP's
        own size caps layer_norm's".

        Every usual algorithm reads the computed row ``x̂`` (``|x̂_j| <= X_j``, ``x.hat``),
        its computed mean ``μ̂`` (``|μ̂| <= M``, :meth:`_mean_top`, ``(1 + u) M + tiny``
        saved in ``c``), the computed reciprocal square root ``â`` of ``ŵ = fl(v̂ + ε̂)``
        and the computed cotangent ``ĝ`` (``|ĝ_j| <= G_j``). The computed variance is never
        negative (a rounded sum of non-negative terms; Welford's updates add products of two
        factors of one sign, ``x - m_old`` and ``x - m_new`` with ``m_new`` rounded between
        ``m_old`` and ``x``, and the merges add non-negative terms), so, rounding being
        monotone, ``ŵ >= ε̂`` and ``â <= A = min(R, (1 + u)/((1 - η) sqrt(ε̂)))`` (``η = 2
        SQRT_ULPS u_s``, the factor ``1 + u`` only where ``â`` is saved in ``c``). Each
        centred value the algorithm forms, ``fl(x̂_j - μ̂)`` or the fused ``x̂_j`` and ``μ̂``
        apart, is at most ``C_j = (1 + u_s)(X_j + M)``. The parts: the direct ``â ĝ_i``
        and ``-â mean(ĝ)`` (the centring's share), and the statistics term ``ĉ_i â³ Σ_j ĝ_j
        ĉ_j / n`` with its centring share (autodiff: in halves, one per factor of the
        square; the fused ``b' x + c'``, ``|b'| <= â³ mean(ĝ (X + M))``, its ``b' x̂_i`` and
        ``b' μ̂`` apart), each rounded at most ``2n + 16`` times, one sum of n terms among
        them: ``Σ_k |p̂_k| <= (1 + gamma_s(2n+16)) (A (G_i + mean G) + A³ mean(G C) (C_i +
        mean C) + (2n + 16)(A³ + 1)(2 C_i + 2 mean C + 1) tiny_s)``, the last every
        rounding into the subnormals times the largest product after it; the fused kernel's
        one part rounded to ``c``: ``(1 + u)`` that ``+ tiny``. No variance enters: unlike
        rms_norm's cap (:meth:`_vjp_parts_cap`) it holds for any algorithm of the
        variance, and it is ``1/ε`` larger (``A`` about ``1/sqrt(ε)`` once the argument's
        error reaches the row's spread). Where no intermediate may overflow in ``s``: each
        is a part's factor or below ``4 (1 + gamma_s(2n+16))(A³ + 1)(Σ_j G_j C_j + 1)``,
        kept below the dtype's largest value here."""
        assert at.alpha is not None
        eps_size, eps_miss = s.alpha(at.alpha)
        eps_low = Fraction(eps_size) - Fraction(eps_miss)
        if not (eps_low > 0 and s.gamma(2 * n + 16) < 1):
            return np.full_like(g.hat, INF)
        saved = Fraction(1) if s is c else 1 + Fraction(c.u)
        eta = 2 * SQRT_ULPS * Fraction(s.u)
        by_eps = inflate(np.asarray(1 / math.sqrt(float(eps_low)) * up(saved / (1 - eta))), 4)
        a_top = np.fmin(big_r, by_eps)
        m_top = self._mean_top(s, x)
        if s is not c:
            m_top = inflate(m_top * (1 + c.u) + c.tiny, 2)
        c_top = inflate((x.hat + m_top) * (1 + s.u), 2)
        c_mean = c_top.mean(axis=-1, keepdims=True)
        cubed = a_top ** 3 + 1
        gc = inflate((g.hat * c_top).mean(axis=-1, keepdims=True), n + 2)
        tiny = (2 * n + 16) * cubed * (2 * c_top + 2 * c_mean + 1) * s.tiny
        top = (1 + s.gamma(2 * n + 16)) * (
            a_top * (g.hat + g.hat.mean(axis=-1, keepdims=True)) + cubed * gc * (c_top + c_mean)
            + tiny)
        if s is not c:
            top = top * (1 + c.u) + c.tiny
        through = 4 * (1 + s.gamma(2 * n + 16)) * cubed * (n * gc + 1)
        return np.where(inflate(through, n) < LARGEST[s.dtype], inflate(top, n + 2), INF)

    def _uncentred(self, s: Ctx, x: Bound, g: Bound, c_hat: np.ndarray, big_r: np.ndarray
                   ) -> np.ndarray:
        """What the fused kernel's uncentred sums and products add in ``s``: ``Σ ḡ x`` and
        ``Σ ḡ μ̂`` each ``gamma_{n+1}`` of its terms' sizes, so ``b = (Σ ḡ μ̂ - Σ ḡ x) r³/n``
        moves by ``gamma_{n+1} R³ mean(ḡ̂ (x̂ + |μ̂|))``, which multiplies the centred
        ``x_i - μ̂``; and ``b x_i``, ``b μ̂`` each rounded, ``|b| <= R³ mean(ḡ̂ ĉ)``."""
        n = x.mag.shape[-1]
        m_top = self._mean_top(s, x)
        moved = s.gamma(n + 1) * (g.hat * (x.hat + m_top)).mean(axis=-1, keepdims=True)
        b_top = (g.hat * c_hat).mean(axis=-1, keepdims=True)
        return big_r ** 3 * (moved * c_hat + s.u * b_top * (x.hat + 2 * m_top))

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
            return a.copy(), lambda g: (cast(g, a).copy(),)
        c = a - a.mean(axis=-1, keepdims=True) if self.centred else a
        r = cast(1, a) / np.sqrt((c * c).mean(axis=-1, keepdims=True) + cast(float(alpha), a))
        y = cast(c * r, a)

        def vjp(g: np.ndarray) -> tuple[np.ndarray]:
            inner = g - y * (g * y).mean(axis=-1, keepdims=True)
            if self.centred:
                inner = inner - g.mean(axis=-1, keepdims=True)
            return (cast(r * inner, a),)

        return y, vjp

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        """``r (d - y mean(y d))``, ``d`` the centred tangent, ``r`` recomputed as
        :meth:`numpy` computes it."""
        assert alpha is not None
        (a,), (t,) = args, ts
        if not a.size:
            return cast(t, a).copy()
        c = a - a.mean(axis=-1, keepdims=True) if self.centred else a
        r = cast(1, a) / np.sqrt((c * c).mean(axis=-1, keepdims=True) + cast(float(alpha), a))
        d = t - t.mean(axis=-1, keepdims=True) if self.centred else t
        return cast(r * (d - out * (out * d).mean(axis=-1, keepdims=True)), a)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        assert alpha is not None
        x = args[0]
        if not x.shape[-1]:
            return x  # empty rows: nothing to normalise (a mean over none would be NaN)
        own = xp.own_norm(self.name)
        if own is not None:
            return own(x, float(alpha))
        c = x - x.mean(axis=-1, keepdims=True) if self.centred else x
        return c / ((c * c).mean(axis=-1, keepdims=True) + float(alpha)) ** 0.5

    # the fast oracle's rules on balls: the spec's own rules at the midpoint, a proven
    # spread around it

    exact_args_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """The centre is the spec's own rule (:meth:`exact`, :meth:`exact_vjp`) on the exact
        midpoints ``mid + lo`` (dyadic Fractions: a row costs a few Fraction operations per
        element and one integer square root), rounded to a double-double. The radius adds,
        rounded up, with ``s`` the spec's relative error of ``1/sqrt`` (:class:`NormSpread`
        for ``r_max``, ``y_top`` and ``through``): ``through(R)``, and twice ``y_top s``
        (the spec's value against the true one, ``|c_i| |r_spec - r| <= |y_i| s``, at both
        ends)."""
        x = args[0]
        if not x.mid.size:
            return Ball.exact(np.zeros(x.mid.shape))
        rows = rows_of(ratios_of(x), x.mid.shape[-1], self.centred)  # the exact mid + lo
        mid, rad, lo = centre(rows, alpha, x.mid.shape)  # as from_fractions(self.exact(...))
        spread = norm_spread(self, rows, x, alpha)
        spec = mul_up(spread.y_top, np.array(2 * _SPEC_R))
        return Ball(mid, add_up(rad, spread.through(x.rad), spec), lo)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``ā = r (P ḡ - y m)``, ``m = mean(ḡ y)``, centred as :meth:`enclose` is; with
        ``G`` bounding ``|ḡ|`` in the row, the radius adds: the cotangent's radius,
        ``through(rad_ḡ)``; the argument's, ``|Δr| |Pḡ - y m| + r |Δy_i| |m| + r |y_i| |Δm|``
        with ``|Δr| <= r_max² rms(R)`` (``|dr/dσ| <= r²``), ``|Pḡ| <= k G`` (k 2 centred,
        1 not), ``|m| <= G``, ``|Δy| <= dy = through(R)``, ``|Δm| <= G mean(dy)``; and the
        spec against the true value at both ends, ``2 r_max G (k + 4 y_top) s``
        (``r_spec = r (1 + ρ)``, ``|ρ| <= s``, carries ``(1 + ρ)³`` into ``y m``)."""
        x = args[0]
        if not x.mid.size:
            return (Ball.exact(np.zeros(x.mid.shape)),)
        k = 2.0 if self.centred else 1.0
        rows = rows_of(ratios_of(x), x.mid.shape[-1], self.centred)  # the exact mid + lo
        # as from_fractions(self.exact_vjp(g, [a], self.exact([a]), alpha)[0])
        mid, rad0, lo = centre_vjp(rows, ratios_of(g), alpha, self.centred, x.mid.shape)
        s = norm_spread(self, rows, x, alpha)
        size = clean(g.size.max(axis=-1, keepdims=True))
        dy = s.through(x.rad)
        d_r = mul_up(mul_up(s.r_max, s.r_max), rms_up(clean(x.rad)))
        moved = add_up(mul_up(d_r, mul_up(size, add_up(np.array(k), s.y_top))),
                       mul_up(s.r_max, mul_up(size, add_up(
                           dy, mul_up(s.y_top, mean_up(dy))))))
        spec = mul_up(mul_up(s.r_max, size),
                      mul_up(add_up(np.array(k), 4 * s.y_top), np.array(2 * _SPEC_R)))
        rad = add_up(rad0, s.through(g.rad), moved, spec)
        return (Ball(mid, rad, lo),)

    def slack_rules(self) -> Op:
        return StandInLayerNorm()


class StandInLayerNorm(LayerNorm):
    """layer_norm's error rules read the centred row and the ``1/sqrt`` enclosure's
    half-width, which a stand-in (every element the largest magnitude) does not have:
    here ``|c_i| <= k max a`` (the stand-ins are sizes, never negative) and the half-width
    ``<= r 2**-200 <= 2**-199/sqrt(ε)`` (:meth:`Op.slack_rules`)."""

    def _centred(self, a: np.ndarray) -> np.ndarray:
        top = Fraction(float(np.max(a))) if a.size else Fraction(0)
        return np.array([(2 if self.centred else 1) * top], dtype=object)

    def _rsqrt(self, c: np.ndarray, eps: Any) -> tuple[np.ndarray, Fraction]:
        r_eps, half = exact_rsqrt(eps)
        return c, (r_eps + half) / 2**(TANH_PRECISION_BITS - 1)


_SPEC_R = 2.0 ** (10 - TANH_PRECISION_BITS)
"""Above the spec's relative error of ``1/sqrt`` (``2**-199``; :func:`exact_rsqrt`)."""


def rms_up(v: np.ndarray) -> np.ndarray:
    """Upper bounds of the root mean square of each row of non-negative ``v`` (``(..., 1)``)."""
    n = v.shape[-1]
    total = matmul_up(mul_up(v, v), np.ones((n, 1)))
    return next_up(np.sqrt(next_up(total / n)))


def mean_up(v: np.ndarray) -> np.ndarray:
    """Upper bounds of the mean of each row of non-negative ``v`` (``(..., 1)``)."""
    return next_up(matmul_up(v, np.ones((v.shape[-1], 1))) / v.shape[-1])


@dataclass(frozen=True)
class NormSpread:
    """What bounds a norm over its argument's ball ``|a - m| <= R`` (``m = mid + lo``).

    ``r_max`` (per row) bounds ``r = 1/sqrt(σ² + ε)`` anywhere in the ball: σ, the rms of
    the centred row, moves by at most ``rms(R)`` (centring is an orthogonal projection),
    so ``r <= min(1/sqrt(ε), 1/(σ(m) - rms(R)))``. ``y_top`` bounds ``|y_i|`` there:
    ``r_max (|c_i(m)| + R_i + mean R)`` (the mean only when centred), at most ``sqrt(n)``
    rounded up to an integer.
    """

    r_max: np.ndarray
    y_top: np.ndarray
    centred: bool

    def through(self, rad: np.ndarray) -> np.ndarray:
        """A bound of ``|J(ξ) δ|_i`` for ``|δ| <= rad`` and any ξ in the ball, with
        ``J = r (I - y yᵀ/n) P`` (or its transpose: ``P`` commutes, ``P y = y``):
        ``r_max (rad_i + mean rad + y_top_i rms(rad))``. By the mean value theorem per
        component this bounds how far each output moves over the ball (``rad = R``)."""
        rad = clean(rad)
        own = add_up(rad, mean_up(rad)) if self.centred else rad
        return mul_up(self.r_max, add_up(own, mul_up(self.y_top, rms_up(rad))))


def norm_spread(op: LayerNorm, rows: Sequence[Row], x: Ball, eps: Fraction) -> NormSpread:
    """The bounds of :class:`NormSpread` for the norm ``op`` over the ball ``x`` (``rows``:
    its exact ``mid + lo``, centred where ``op`` is)."""
    a = x.mid
    n = a.shape[-1]
    sigma, c_abs = spread_statistics(rows, a.shape)  # σ rounded down, |c| to nearest
    r_eps, half = exact_rsqrt(eps)
    try:
        r_top = math.nextafter(float(r_eps + half), BALL_INF)
    except OverflowError:
        raise NotEnclosed("a norm's variance, centred value or 1/sqrt(ε) beyond float64"
                          ) from None
    rad = clean(x.rad)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = np.nextafter(sigma - rms_up(rad), -BALL_INF)
        r_max = np.where(gap > 0, np.minimum(r_top, next_up(1 / np.where(gap > 0, gap, 1.0))),
                         r_top)
    c_top = next_up(c_abs.reshape(a.shape))
    spread = add_up(c_top, rad, mean_up(rad)) if op.centred else add_up(c_top, rad)
    root_n = float(math.isqrt(n) + (math.isqrt(n) ** 2 != n))
    y_top = np.minimum(mul_up(r_max, spread), root_n)
    return NormSpread(r_max, y_top, op.centred)
