"""How much of its budget a judged element used, and torch values as NumPy arrays.

Shared by the whole-program judgement (:mod:`resverify.blocks.exact`) and the op-by-op one
(:mod:`resverify.blocks.local`), which report their budgets' tightness the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__: list[str] = []

QUANTILES = (0.0, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0)
"""The percentiles of ``|error| / bound`` a :class:`Tightness` keeps for the report's plot
of the distribution (:attr:`Tightness.quantiles`)."""


@dataclass(frozen=True)
class Tightness:
    """The distribution of ``|error| / bound`` over the elements judged."""

    median: float
    p99: float
    max: float
    quantiles: tuple[float, ...] = field(default=(), compare=False)
    """The ratio at each percentile of :data:`QUANTILES` (empty: no element judged)."""

    @staticmethod
    def of(ratios: np.ndarray) -> Tightness:
        if ratios.size == 0:
            return Tightness(0.0, 0.0, 0.0)
        median, p99 = np.percentile(ratios, [50, 99])
        spread = np.percentile(ratios, QUANTILES)
        return Tightness(float(median), float(p99), float(ratios.max()),
                         tuple(float(q) for q in spread))

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it: ``median``, ``p99``, ``max`` and ``quantiles`` (each
        ``{"percent", "ratio"}``), an infinite ratio (an error where the bound is 0) as the
        text ``"inf"``."""
        return {"median": figure(self.median), "p99": figure(self.p99),
                "max": figure(self.max),
                "quantiles": [{"percent": p, "ratio": figure(r)}
                              for p, r in zip(QUANTILES, self.quantiles, strict=True)]
                if self.quantiles else []}

    def __str__(self) -> str:
        return f"|error|/bound median {self.median:.3g}, p99 {self.p99:.3g}, max {self.max:.3g}"


def figure(value: float) -> float | str:
    """A ratio as JSON: a finite float, or ``"inf"``, ``"-inf"``, ``"nan"`` as text."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def ratios(values: np.ndarray, nearest: np.ndarray, bound: np.ndarray,
           keep_shape: bool = False) -> np.ndarray:
    """``|values - nearest| / bound`` for every element with a finite bound, flattened (0
    where the error is 0, infinite for an error where the bound is 0); ``nearest`` is a
    float64 value near the exact one, for saying how much of its budget an element used,
    never for a verdict. ``keep_shape``: every element in ``values``' shape instead, NaN
    where the bound is infinite."""
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), values.shape)
    with np.errstate(divide="ignore", invalid="ignore"):  # inf - inf where overflowing
        error = np.abs(values.astype(np.float64) - nearest)
        ratio = np.where(error == 0, 0.0, error / bound)
    if keep_shape:
        return np.where(np.isfinite(bound), ratio, np.nan)
    return ratio[np.isfinite(bound)].ravel()


def numpy_of(tensor: torch.Tensor) -> np.ndarray:
    """The values of ``tensor`` in the NumPy dtype that stores its dtype exactly."""
    held = tensor.detach()
    return (held.float() if held.dtype == torch.bfloat16 else held).numpy()
