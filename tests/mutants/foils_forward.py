"""Deliberately broken forward-mode backends the mutant catalog lacks: each plants one bug
in the tangent that a particular forward-mode property exists to catch.

The reverse mode of each is the reference's (right), so a property that catches one
catches it through the output tangent ``J·t`` alone. ``tests/meta/test_meta_jvp.py`` proves
that every forward-mode property of ``properties/test_jvp.py`` catches a bug, drawing the
bug from the catalog's forward-mode mutants (:mod:`tests.mutants.forward`)
wherever the catalog plants it, and from here otherwise. These three are not catalog
mutants because each is the foil of one law rather than a bug an engine is known to
ship: tangents pooled by shape (the forward twin of the shared gradient buffer of
:mod:`tests.broken_backends`), relu applied to the tangent (the one non-linear tangent,
for the linearity law), and a repeated operand's tangent counted once (the forward twin of
the catalog's ``DedupedRepeatedOperand``, for the shared-operand law). They are ordinary
backends: ``pytest properties --backend tests.broken_jvp_backends:ReluOfTangent``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node
from tests.broken_backends import Reference


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


BROKEN_JVP: tuple[type[Reference], ...] = (
    DedupedOperandTangent, ReluOfTangent, TangentPooledByShape,
)
