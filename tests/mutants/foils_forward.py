"""Forward-mode foils: each plants one bug in the tangent that one forward-mode law exists
to catch, where no scored forward-mode mutant (:mod:`tests.mutants.forward`) does.

The reverse mode of each is the reference's (right), so a law that kills one kills it
through the output tangent ``J·t`` alone (as a broken law: ``kind="law"``). They are foils
rather than scored mutants because each pins one law rather than a bug an engine is known
to ship: tangents pooled by shape (the forward twin of the shared gradient buffer of
:mod:`tests.mutants.foils`), relu applied to the tangent (the one non-linear tangent, for
the linearity law), and a repeated operand's tangent counted once (the forward twin of the
scored ``DedupedRepeatedOperand``, for the shared-operand law). They are ordinary
backends: ``pytest properties --backend tests.mutants.foils_forward:ReluOfTangent``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node
from tests.mutants.base import Kill, Mutant

__all__ = ["DedupedOperandTangent", "ReluOfTangent", "TangentPooledByShape"]


class TangentPooledByShape(Mutant):
    """Input tangents are pooled by shape: every input gets the tangent of the first
    input of its shape (a same-shaped weight's tangent comes from the wrong input)."""

    name = "broken-jvp-tangent-pooled"
    kills = (Kill("tangent_matches_spec_within_budget", generated=True),)

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        first: dict[tuple[int, ...], np.ndarray] = {}
        for t in tangents.values():
            first.setdefault(t.shape, t)
        return {name: np.array(first[t.shape], copy=True) for name, t in tangents.items()}


class ReluOfTangent(Mutant):
    """relu's tangent is clamped at 0 like relu's value (``max(mask·t, 0)``): right for
    positive tangents only, and not linear in t."""

    name = "broken-jvp-relu-of-tangent"
    kills = (Kill("tangent_matches_spec_within_budget", "float16", generated=True),
             Kill("tangent_is_linear_in_the_input_tangents"),
             Kill("tangent_is_linear_in_the_input_tangents", "float16"))

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if node.op == "relu":
            masked = super().tangent(node, args, ts, out)
            return np.asarray(np.maximum(masked, 0), dtype=out.dtype)
        return super().tangent(node, args, ts, out)


class DedupedOperandTangent(Mutant):
    """An op given one tensor twice (``residual_add(x, x)``) counts its tangent once
    (tangents looked up by the set of distinct operands)."""

    name = "broken-jvp-deduped-operand"
    kills = (Kill("shared_operand_tangent_is_k_times_the_input_tangent"),)

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        if len(args) == 2 and args[0] is args[1]:
            return super().tangent(node, args, [ts[0], np.zeros_like(ts[1])], out)
        return super().tangent(node, args, ts, out)

