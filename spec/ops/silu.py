"""``silu``: ``a σ(a)`` as ``torch.nn.functional.silu`` computes it, Llama's gate; enclosed
through sigmoid's enclosure."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ops.base import cast, elementwise
from resverify.spec.ops.gated import Gated
from resverify.spec.ops.sigmoid import stable_sigmoid
from resverify.spec.rational import exact_sigmoid

SILU_ULPS = 8
"""Error allowed for a backend's silu, in units of ``u|a|`` (an ulp of ``a`` is one or two
of them; ``|silu(a)| <= |a|``), plus twice the smallest normal where it underflows.

Not in ulps of the result: ``a/(1 + exp(-a))`` is 0 where ``exp(-a)`` overflows, off by
about 180 smallest normals in float64 at ``a = -712`` and by 2,040 ulps in float16 (jax,
tinygrad) at ``a = -11.5``, still below ``u|a|``. Measured against mpmath on 6,300 points a
dtype (the range where silu is not flushed, ±8, near 0), the largest error in units of
``u|a|``: torch 1.73 (float64), 1.92 (float32), 1.00 (float16); jax 1.83, 2.11, 1.89;
TensorFlow 1.59, 1.90, 1.51; tinygrad 1.73, 1.92, 1.01. 8 covers these with a margin."""


class Silu(Gated):
    """``silu(a) = a σ(a)``, silu' = σ(1 + a(1 - σ)) in [-0.0998, 1.0998], ``|silu''| <=
    1/2``. Not rational: σ is enclosed with mpmath
    (:func:`resverify.spec.rational.exact_sigmoid`)."""

    name, rational = "silu", False
    lipschitz, curvature, ulps = Fraction(9, 8), Fraction(1, 2), SILU_ULPS

    def gate(self, x: Fraction) -> Fraction:
        return exact_sigmoid(x)[0]

    def gate_slope(self, x: Any, g: Any) -> Any:
        return g * (1 - g)

    def numpy_gate(self, a: np.ndarray) -> np.ndarray:
        return stable_sigmoid(a)

    def numpy_gate_slope(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * (cast(1, a) - g)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: v / (1 + sp.exp(-v)), args[0])
