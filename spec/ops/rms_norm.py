"""``rms_norm``: layer_norm without the centring."""

from __future__ import annotations

from resverify.spec.ops.base import Op
from resverify.spec.ops.layer_norm import LayerNorm, StandInLayerNorm


class RmsNorm(LayerNorm):
    """``rms_norm(a, eps)`` over the last axis: ``a / sqrt(mean(a²) + ε)``, no centring
    and no affine part; the VJP is ``ā = r (ḡ - y mean(ḡ y))``. Every rule is layer_norm's
    without the mean (inherited: ``centred`` is False)."""

    name = "rms_norm"
    centred = False
    fused = False  # in a trace it stands for a matched composite, each step in its dtype
    grad_parts = 3  # the numerator and both factors of the square

    def slack_rules(self) -> Op:
        return _StandInRmsNorm()


class _StandInRmsNorm(StandInLayerNorm):
    """rms_norm's error rules on stand-ins (:class:`StandInLayerNorm` without the mean)."""

    name = "rms_norm"
    centred = False
