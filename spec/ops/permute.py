"""``permute``: the axes in a new order (a transpose is the permutation ``(1, 0)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INTS, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace
from resverify.spec.ops.layout import Layout


class Permute(Layout):
    """``permute(a, perm)``: axis ``i`` of the output is axis ``perm[i]`` of ``a``
    (``xp.permute_dims``); the cotangent goes back through the inverse permutation."""

    name, arity = "permute", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"perm": INTS}
    samples = (Sample(((2, 3),), perm=(1, 0)), Sample(((2, 1, 3),), perm=(2, 0, 1)),
               Sample(((),), perm=()), Sample(((0, 2),), perm=(1, 0)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        perm = k.ints("perm")
        if sorted(perm) != list(range(len(shapes[0]))):
            raise ShapeMismatch(self.name, shapes[0], perm)
        return tuple(shapes[0][i] for i in perm)

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.permute_dims(args[0], k.ints("perm"))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent permuted by the inverse permutation."""
        return (np.transpose(g, np.argsort(k.ints("perm"))),)
