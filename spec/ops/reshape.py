"""``reshape``: the same elements, in row-major order, in a new shape."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INTS, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace
from resverify.spec.ops.layout import Layout


class Reshape(Layout):
    """``reshape(a, shape)``: ``a``'s elements in row-major order in ``shape`` (same
    count); the cotangent is reshaped back."""

    name, arity = "reshape", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"shape": INTS}
    samples = (Sample(((2, 3),), shape=(3, 2)), Sample(((2, 3),), shape=(6,)),
               Sample(((),), shape=(1, 1)), Sample(((0, 2),), shape=(2, 0, 3)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        target = k.ints("shape")
        if math.prod(shapes[0]) != math.prod(target):
            raise ShapeMismatch(self.name, shapes[0], target)
        return target

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.reshape(args[0], k.ints("shape"))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent in the argument's shape."""
        return (np.reshape(g, args[0].shape),)
