"""Deliberately broken forward-mode backends: each plants one realistic bug in the tangent.

The reverse mode of each is the reference's (right), so a property that catches one
catches it through the output tangent ``J·t`` alone; ``tests/test_meta_jvp.py`` proves
that every forward-mode property of ``properties/test_jvp.py`` catches one of them. They
are ordinary backends: ``pytest properties --backend tests.broken_jvp_backends:NoAlphaTangent``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from resverify.impl.interpret import node_alpha
from resverify.impl.mutants.forward import detached_norm_tangent
from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node
from tests.broken_backends import Reference


class DroppedIdentityTangent(Reference):
    """The merge's tangent drops the identity path: J·t = J_F·t instead of t + J_F·t."""

    name = "broken-jvp-dropped-identity"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "residual_add":
            return np.array(ts[1], copy=True)
        return super().tangent(node, args, ts, out)


class NoAlphaTangent(Reference):
    """scale's tangent forgets α: the branch's tangent enters the merge unscaled."""

    name = "broken-jvp-no-alpha"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "scale":
            return np.array(ts[0], copy=True)
        return super().tangent(node, args, ts, out)


class TransposedLinearTangent(Reference):
    """linear pushes its input tangent through wᵀ (Jᵀ instead of J) where w is square."""

    name = "broken-jvp-transposed-linear"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "linear" and args[1].shape[0] == args[1].shape[1]:
            x, w = args[0].value, args[1].value
            return np.asarray(ts[0] @ w.T + x @ ts[1], dtype=out.dtype)
        return super().tangent(node, args, ts, out)


class TangentPooledByShape(Reference):
    """Input tangents are pooled by shape: every input gets the tangent of the first
    input of its shape (a same-shaped weight's tangent comes from the wrong input)."""

    name = "broken-jvp-tangent-pooled"

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        first: dict[tuple[int, ...], np.ndarray] = {}
        for t in tangents.values():
            first.setdefault(t.shape, t)
        return {name: np.array(first[t.shape], copy=True) for name, t in tangents.items()}


class ReluOfTangent(Reference):
    """relu's tangent is clamped at 0 like relu's value (``max(mask·t, 0)``): right for
    positive tangents only, and not linear in t."""

    name = "broken-jvp-relu-of-tangent"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "relu":
            masked = super().tangent(node, args, ts, out)
            return np.asarray(np.maximum(masked, 0), dtype=out.dtype)
        return super().tangent(node, args, ts, out)


class DedupedOperandTangent(Reference):
    """An op given one tensor twice (``residual_add(x, x)``) counts its tangent once
    (tangents looked up by the set of distinct operands)."""

    name = "broken-jvp-deduped-operand"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if len(args) == 2 and args[0] is args[1]:
            return super().tangent(node, args, [ts[0], np.zeros_like(ts[1])], out)
        return super().tangent(node, args, ts, out)


class TangentMergedInPlace(Reference):
    """The merge accumulates the branch's tangent into the identity's in place
    (``t_x += t_F``), and the input tangents alias the caller's arrays (no defensive copy):
    the output tangent is right, the caller's tangent of x is not."""

    name = "broken-jvp-merged-in-place"

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for t in tangents.values():
            t.flags.writeable = True
        return dict(tangents)

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "residual_add" and ts[0].shape == ts[1].shape and ts[0] is not ts[1]:
            ts[0] += ts[1]
            return ts[0]
        return super().tangent(node, args, ts, out)


class NormStatisticsDetached(Reference):
    """The norms' tangents treat the row statistics as constants (a stop-gradient on the
    mean and the scale): J·t = t/σ, neither centred nor projected off the output."""

    name = "broken-jvp-norm-detached"

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        eps = node_alpha(node)
        if node.op in ("layer_norm", "rms_norm") and eps is not None:
            return detached_norm_tangent(node.op, args[0].value, ts[0], eps)
        return super().tangent(node, args, ts, out)


BROKEN_JVP: tuple[type[Reference], ...] = (
    DedupedOperandTangent, DroppedIdentityTangent, NoAlphaTangent, NormStatisticsDetached,
    ReluOfTangent, TangentMergedInPlace, TangentPooledByShape, TransposedLinearTangent,
)
