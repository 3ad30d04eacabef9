"""A tensor that remembers how it was made, and reverse-mode accumulation over that graph.

There is no global tape: each tensor keeps its parents and the local vector-Jacobian
product (VJP) of the op that produced it. An op that refuses its inputs raises before
it builds a tensor, so a rejected op leaves no trace in any graph.

Forward mode needs no graph at all: a tensor may carry a ``tangent`` (a dual number's
second part), and each op computes its output's tangent from its arguments' as it computes
its value (:func:`resverify.impl.ops.apply_op`), so one pass gives both the value and
``J t``, while the graph still gives ``Jᵀ ȳ`` afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from resverify.spec.errors import InvalidRequest

Vjp = Callable[[np.ndarray], Sequence[np.ndarray]]


class Tensor:
    """A value, the gradient accumulated into it, the op that produced it, and its tangent
    (forward mode; None when no input carried one)."""

    __slots__ = ("grad", "op", "parents", "tangent", "value", "vjp")

    def __init__(self, value: np.ndarray, parents: tuple[Tensor, ...] = (),
                 vjp: Vjp | None = None, op: str = "leaf",
                 tangent: np.ndarray | None = None) -> None:
        self.value = np.asarray(value)
        self.tangent = None if tangent is None else np.asarray(tangent, dtype=self.value.dtype)
        if self.tangent is not None and self.tangent.shape != self.value.shape:
            raise InvalidRequest(f"tangent shape {list(self.tangent.shape)} != tensor shape "
                                 f"{list(self.value.shape)}")
        self.grad: np.ndarray | None = None
        self.parents = parents
        self.vjp = vjp
        self.op = op

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    def __repr__(self) -> str:
        return f"Tensor({self.value!r}, op={self.op})"

    def backward(self, seed: np.ndarray) -> None:
        """Accumulate ``seed`` (the cotangent of this tensor) into the grad of every ancestor.

        A tensor reached along several paths receives the sum of their contributions.
        """
        seed = np.asarray(seed, dtype=self.dtype)
        if seed.shape != self.shape:
            raise InvalidRequest(f"seed shape {list(seed.shape)} != tensor shape "
                                 f"{list(self.shape)}")
        pending: dict[int, np.ndarray] = {id(self): seed}
        for node in reversed(_topological(self)):
            g = pending.pop(id(node))
            node.grad = g.copy() if node.grad is None else np.asarray(node.grad + g, node.dtype)
            if node.vjp is None:
                continue
            for parent, contribution in zip(node.parents, node.vjp(g), strict=True):
                contribution = np.asarray(contribution, dtype=parent.dtype)
                key = id(parent)
                pending[key] = contribution if key not in pending else np.asarray(
                    pending[key] + contribution, parent.dtype)


def _topological(root: Tensor) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((p, False) for p in reversed(node.parents) if id(p) not in seen)
    return order
