"""``cat``: two arrays joined along one axis (arity 2: a longer join is a chain of cats)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INT, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace
from resverify.spec.ops.layout import Layout


class Cat(Layout):
    """``cat(a, b, axis)``: ``a`` then ``b`` along axis ``axis`` (``xp.concat``; every
    other axis equal, as are the ranks); the cotangent is split back. Two arguments: join
    more with a chain of cats."""

    name, arity = "cat", 2
    attributes: ClassVar[Mapping[str, Kind]] = {"axis": INT}
    samples = (Sample(((2, 3), (1, 3)), axis=0), Sample(((2, 1), (2, 2)), axis=1),
               Sample(((2, 0), (2, 3)), axis=1), Sample(((3,), (0,)), axis=0))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        (a, b), axis = shapes, k.number("axis")
        if len(a) != len(b) or axis >= len(a) or any(
                m != n for i, (m, n) in enumerate(zip(a, b, strict=True)) if i != axis):
            raise ShapeMismatch(self.name, a, b)
        return (*a[:axis], a[axis] + b[axis], *a[axis + 1:])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.concat((args[0], args[1]), axis=k.number("axis"))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent split where ``a`` ends."""
        axis, n = k.number("axis"), args[0].shape[k.number("axis")]
        head = (slice(None),) * axis
        return g[(*head, slice(0, n))], g[(*head, slice(n, None))]
