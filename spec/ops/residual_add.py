"""``residual_add``: the exact-shape merge of the identity and the branch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.add import Add
from resverify.spec.ops.base import ArrayNamespace, Site, same_shape
from resverify.spec.rounding import Bound, Ctx


class ResidualAdd(Add):
    """``residual_add(identity, branch)``: the exact-shape merge. Any other shape pair,
    broadcastable or not, is a ShapeMismatch naming both; the cotangent passes unchanged
    to both edges. The forward, its error and its budget are add's (inherited)."""

    name, arity = "residual_add", 2
    families = ()  # the merge of every block, no branch
    samples = (((2,), (2,)), ((), ()), ((2, 2), (2, 2)), ((0, 3), (0, 3)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return same_shape(self.name, shapes[0], shapes[1])

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent itself, on both edges."""
        return g, g

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The cotangent itself, on both edges: no rounding."""
        return [g, g]

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return g, g
