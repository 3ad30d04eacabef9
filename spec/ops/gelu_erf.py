"""``gelu_erf``: ``a Φ(a)``, GELU as ``torch.nn.functional.gelu(approximate='none')`` computes
it (BERT, ViT); Φ enclosed with mpmath's ``erfc``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ops.base import cast, elementwise
from resverify.spec.ops.gated import Gated
from resverify.spec.rational import INV_SQRT_2PI, exact_exp, exact_normal_cdf

GELU_ERF_ULPS = 8
"""Error allowed for a backend's erf-form GELU, in units of ``u|a|``, plus twice the
smallest normal where it underflows: ``a (1 + erf(a/√2))/2`` cancels for ``a < 0``.

Measured against mpmath on 6,300 points a dtype (±8, the range where GELU is not flushed,
near 0), the largest error in units of ``u|a|``: torch 1.64 (float64), 4.94 (float32, at
a = 3.31), 1.00 (float16); jax 1.54, 1.90, 1.23; TensorFlow 1.59 (float32), 1.23
(float16), but 3.7·10⁷ in float64 (its ``erfc`` is float32-accurate there: refused).
8 covers the others with a margin."""


def _normal_cdf(a: np.ndarray) -> np.ndarray:
    """Φ with ``math.erfc`` in float64, rounded once to ``a``'s dtype (NumPy has no erf)."""
    wide = np.asarray(a, dtype=np.float64)
    erfc = np.frompyfunc(lambda v: math.erfc(-v / math.sqrt(2)) / 2, 1, 1)
    return cast(np.asarray(erfc(wide), dtype=np.float64), a)


class GeluErf(Gated):
    """``gelu_erf(a) = a Φ(a)``, slope ``Φ + aφ`` in [-0.13, 1.129], ``|f''| = φ|2 - a²| <=
    0.8``. Not rational: Φ is enclosed with mpmath
    (:func:`resverify.spec.rational.exact_normal_cdf`)."""

    name, rational = "gelu_erf", False
    lipschitz, curvature, ulps = Fraction(6, 5), Fraction(1), GELU_ERF_ULPS

    def gate(self, x: Fraction) -> Fraction:
        return exact_normal_cdf(x)

    def gate_slope(self, x: Any, g: Any) -> Any:
        """The normal density ``φ(x) = exp(-x²/2)/√(2π)``."""
        if isinstance(x, Fraction):
            return exact_exp(-x * x / 2)[0] * INV_SQRT_2PI
        import sympy

        return sympy.exp(-x * x / 2) / sympy.sqrt(2 * sympy.pi)

    def numpy_gate(self, a: np.ndarray) -> np.ndarray:
        return _normal_cdf(a)

    def numpy_gate_slope(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        return np.exp(-a * a / cast(2, a)) * cast(1 / math.sqrt(2 * math.pi), a)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: v * (1 + sp.erf(v / sp.sqrt(2))) / 2, args[0])
