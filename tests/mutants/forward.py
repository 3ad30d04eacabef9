"""Mutants of forward mode: the output tangent ``J·t`` goes wrong while the output and the
gradients stay right.

Forward-mode rules are written apart from the reverse-mode ones in most engines (a JVP
rule per primitive, or a tangent pushed along the forward pass), so they carry bugs of
their own that no gradient check sees. Each class plants one, named in the first line of
its docstring; several hide (only square weights, only inputs at relu's kink, only in
float64, only where a tangent is negative).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import ClassVar

import numpy as np

from resverify.impl.interpret import node_alpha
from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node
from tests.mutants.base import Kill, Mutant
from tests.mutants.numeric import _tf32

__all__ = [
    "NormTangentStatisticsDetached", "ReluTangentOneAtZero", "TangentDropsIdentity",
    "TangentForgetsAlpha", "TangentInFloat32", "TangentMergedInPlace", "TangentOfWeightsIgnored",
    "TangentTf32AboveWidth32", "TangentThroughTransposedWeight", "TanhTangentFromInput",
    "detached_norm_tangent",
]


class _TangentHook(Mutant):
    """Mutants that replace the tangent rule of one op (``op``) with ``jvp``."""

    bug_class = "forward mode"
    op: ClassVar[str] = ""

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        """The wrong tangent, or None where the bug does not show (the right rule runs)."""
        raise NotImplementedError

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        wrong = self.jvp([a.value for a in args], ts, out.value) if node.op == self.op else None
        if wrong is None:
            return super().tangent(node, args, ts, out)
        return np.asarray(wrong, out.dtype)


class TangentDropsIdentity(_TangentHook):
    """The merge's tangent drops the identity path: J·t = J_F·t instead of t + J_F·t."""

    name = "mutant-tangent-drops-identity"
    op = "residual_add"
    kills = (Kill("tangent_matches_spec_within_budget"),
             Kill("norm_stack_tangent_matches_spec_within_budget", "float32"),
             Kill("alpha_zero_passes_the_input_tangent_unchanged",
                  generated=True))

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        return np.array(ts[1], copy=True)


class TangentForgetsAlpha(_TangentHook):
    """scale's tangent forgets α (the JVP rule registered for the unscaled op)."""

    name = "mutant-tangent-forgets-alpha"
    op = "scale"
    kills = (Kill("tangent_matches_spec_within_budget", "float32"),
             Kill("tangent_and_gradients_satisfy_duality", "float32",
                  generated=True),
             Kill("alpha_zero_passes_the_input_tangent_unchanged", "float32"))

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        return np.array(ts[0], copy=True)


class TangentThroughTransposedWeight(_TangentHook):
    """linear pushes the input's tangent through wᵀ (the VJP's matrix, Jᵀ instead of J):
    only square weights, where the shapes allow it."""

    name = "mutant-tangent-transposed-weight"
    op = "linear"
    kills = (Kill("tangent_matches_spec_within_budget", generated=True),
             Kill("tangent_and_gradients_satisfy_duality", generated=True))

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        (x, w), (tx, tw) = args, ts
        return tx @ w.T + x @ tw if w.shape[0] == w.shape[1] else None


class TangentTf32AboveWidth32(_TangentHook):
    """linear's tangent multiplies in TF32 (10-bit mantissas) when d_in >= 32, whatever the
    dtype (the forward-mode matmul took the fast path the forward did not): narrow layers
    are exact."""

    name = "mutant-tangent-tf32-wide"
    op = "linear"
    kills = (Kill("tangent_matches_spec_within_budget"),)

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        (x, w), (tx, tw) = args, ts
        if w.shape[0] < 32:
            return None
        wide = [_tf32(a).astype(np.float64) for a in (x, w, tx, tw)]
        return wide[2] @ wide[1] + wide[0] @ wide[3]


class ReluTangentOneAtZero(_TangentHook):
    """relu's tangent passes t where the input is >= 0 (derivative 1 at the kink, not the
    declared 0): only inputs exactly at 0 show it."""

    name = "mutant-relu-tangent-at-zero"
    op = "relu"
    kills = (Kill("tangent_matches_spec_within_budget"),)

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        return np.where(args[0] >= 0, ts[0], 0 * ts[0])


class TanhTangentFromInput(_TangentHook):
    """tanh's tangent is (1 - x²)·t from the input instead of (1 - tanh(x)²)·t."""

    name = "mutant-tanh-tangent-from-input"
    op = "tanh"
    kills = (Kill("tangent_matches_spec_within_budget"),)

    def jvp(self, args: list[np.ndarray], ts: list[np.ndarray], out: np.ndarray
            ) -> np.ndarray | None:
        return (1 - args[0] * args[0]) * ts[0]


class TangentInFloat32(Mutant):
    """Tangents are pushed along in float32 whatever the request's dtype (a tangent buffer
    of the default dtype): only float64 programs lose precision, only in J·t."""

    name = "mutant-tangent-float32"
    bug_class = "forward mode"
    kills = (Kill("tangent_matches_spec_within_budget"),)

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        exact = super().tangent(node, args, ts, out)
        return np.asarray(exact.astype(np.float32), out.dtype)


class TangentOfWeightsIgnored(Mutant):
    """Only the first input's tangent is pushed along; every other input (the weights) is
    treated as a constant, as a jvp over x alone with the weights closed over."""

    name = "mutant-tangent-weights-ignored"
    bug_class = "forward mode"
    kills = (Kill("tangent_matches_spec_within_budget"),)

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        first = next(iter(tangents), None)
        return {n: np.array(t, copy=True) if n == first else np.zeros_like(t)
                for n, t in tangents.items()}


def detached_norm_tangent(op: str, a: np.ndarray, t: np.ndarray, eps: Fraction) -> np.ndarray:
    """A norm's tangent with its statistics detached (a stop-gradient on the mean and the
    scale): ``t / sqrt(σ² + ε)``, neither centred nor projected off the output."""
    c = a - a.mean(axis=-1, keepdims=True) if op == "layer_norm" and a.size else a
    r = 1 / np.sqrt((c * c).mean(axis=-1, keepdims=True) + float(eps)) if a.size else 1
    return np.asarray(r * t, a.dtype)


class NormTangentStatisticsDetached(Mutant):
    """layer_norm's and rms_norm's tangents treat the row statistics as constants (a
    stop-gradient on the mean and the scale): J·t = t/σ."""

    name = "mutant-norm-tangent-detached"
    bug_class = "forward mode"
    kills = (Kill("norm_stack_tangent_matches_spec_within_budget"),
             Kill("norm_stack_tangent_matches_spec_within_budget", "float32",
                  pinned=False, generated=True))

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        eps = node_alpha(node)
        if node.op in ("layer_norm", "rms_norm") and eps is not None:
            return detached_norm_tangent(node.op, args[0].value, ts[0], eps)
        return super().tangent(node, args, ts, out)


class TangentMergedInPlace(Mutant):
    """The merge adds the branch's tangent into the identity's in place (``t_x += t_F``) on
    tangents that alias the caller's arrays: J·t is right, the caller's tangent of x is not."""

    name = "mutant-tangent-merged-in-place"
    bug_class = "forward mode"
    kills = (Kill("forward_mode_leaves_inputs_and_tangents_unchanged",
                  generated=True),)

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for t in tangents.values():
            t.flags.writeable = True  # the backend's own copy, but not copied again
        return dict(tangents)

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "residual_add" and ts[0].shape == ts[1].shape and ts[0] is not ts[1]:
            ts[0] += ts[1]
            return ts[0]
        return super().tangent(node, args, ts, out)
