"""``gelu_tanh``: ``a (1 + tanh(√(2/π)(a + 0.044715 a³)))/2``, GELU as
``torch.nn.functional.gelu(approximate='tanh')`` and Hugging Face's ``gelu_new`` compute it
(GPT-2); enclosed as ``a σ(2z)`` through sigmoid's enclosure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ops.base import cast, elementwise
from resverify.spec.ops.gated import Gated
from resverify.spec.ops.sigmoid import stable_sigmoid
from resverify.spec.rational import SQRT_2_OVER_PI, exact_sigmoid

GELU_TANH_ULPS = 8
"""Error allowed for a backend's tanh-form GELU, in units of ``u|a|``, plus twice the
smallest normal where it underflows: ``a (1 + tanh(z))/2`` cancels for ``a < 0``.

Measured against mpmath on 6,300 points a dtype (±8, the range where GELU is not flushed,
near 0), the largest error in units of ``u|a|``: torch 1.56 (float64), 1.57 (float32), 1.00
(float16); jax 4.32, 2.56, 1.55; TensorFlow 2.83 (float32), 1.55 (float16) but 4.7·10⁶ in
float64 (refused); tinygrad (``Tensor.gelu``) 1.76, 1.79, 1.02. 8 covers the others."""

CUBIC = Fraction(44715, 10**6)
"""The constant 0.044715 of the cubic term, exactly as written."""


def _inner(a: Any) -> Any:
    """``2z = 2√(2/π)(a + 0.044715 a³)``, σ's argument (``1 + tanh(z) = 2σ(2z)``)."""
    return 2 * SQRT_2_OVER_PI * (a + CUBIC * a**3)


class GeluTanh(Gated):
    """``gelu_tanh(a) = a σ(2z)``, ``z = √(2/π)(a + 0.044715 a³)``; slope in [-0.17, 1.13],
    ``|f''| <= 0.8``. Not rational: σ and √(2/π) are enclosed with mpmath."""

    name, rational = "gelu_tanh", False
    lipschitz, curvature, ulps = Fraction(6, 5), Fraction(1), GELU_TANH_ULPS

    def gate(self, x: Fraction) -> Fraction:
        return exact_sigmoid(_inner(x))[0]

    def gate_slope(self, x: Any, g: Any) -> Any:
        """``2σ'(2z) z' = 2g(1 - g) √(2/π)(1 + 3 · 0.044715 x²)``."""
        if isinstance(x, Fraction):
            root: Any = SQRT_2_OVER_PI
        else:
            import sympy

            root = sympy.sqrt(2 / sympy.pi)
        return 2 * g * (1 - g) * root * (1 + 3 * CUBIC * x * x)

    def slope_growth(self, size: np.ndarray) -> np.ndarray:
        """``1 - tanh²`` cancels and is multiplied by ``a z' / 2``, up to ``|a|(1 + 0.134 a²)``."""
        return 1 + size * (1 + 0.135 * size * size)

    def numpy_gate(self, a: np.ndarray) -> np.ndarray:
        c = cast(math.sqrt(2 / math.pi), a)
        return stable_sigmoid(cast(2, a) * c * (a + cast(0.044715, a) * a * a * a))

    def numpy_gate_slope(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        c = cast(math.sqrt(2 / math.pi), a)
        return cast(2, a) * g * (cast(1, a) - g) * c * (cast(1, a) + cast(3 * 0.044715, a) * a * a)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        z = lambda v: sp.sqrt(2 / sp.pi) * (v + sp.Rational(44715, 10**6) * v**3)  # noqa: E731
        return elementwise(lambda v: v * (1 + sp.tanh(z(v))) / 2, args[0])
