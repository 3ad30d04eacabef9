"""``slice``: every ``step``-th element from ``start`` to before ``stop`` along one axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INT, Kind, Params, Sample
from resverify.spec.ops.base import ArrayNamespace
from resverify.spec.ops.layout import Layout


def _index(k: Params) -> tuple[slice, ...]:
    """``[:, ..., start:stop:step]``, the slice at axis ``axis``."""
    return (slice(None),) * k.number("axis") + (slice(k.number("start"), k.number("stop"),
                                                    k.number("step")),)


class Slice(Layout):
    """``slice(a, axis, start, stop, step)``: ``a[..., start:stop:step]`` at axis ``axis``
    as Python slices a list (``stop`` past the end stops at the end; ``step >= 1``); the
    cotangent goes back to the elements taken, zeros elsewhere."""

    name, arity = "slice", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"axis": INT, "start": INT, "stop": INT,
                                                "step": INT}
    samples = (Sample(((4, 3),), axis=0, start=1, stop=3, step=1),
               Sample(((2, 5),), axis=1, start=0, stop=9, step=2),
               Sample(((2, 3),), axis=1, start=2, stop=2, step=1),
               Sample(((0, 3),), axis=1, start=1, stop=3, step=1))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        (a,), axis, step = shapes, k.number("axis"), k.number("step")
        if axis >= len(a) or step < 1:
            raise ShapeMismatch(self.name, a, (axis, k.number("start"), k.number("stop"), step))
        taken = len(range(a[axis])[k.number("start"):k.number("stop"):step])
        return (*a[:axis], taken, *a[axis + 1:])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return args[0][_index(k)]

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent at the elements taken, zeros elsewhere."""
        out = np.zeros_like(g, shape=args[0].shape)
        out[_index(k)] = g
        return (out,)
