"""The one loop every in-process adapter shares, and the per-node dispatch to the op table.

:func:`interpret` walks the program and applies each node. Each node's op comes from its
entry in :mod:`resverify.spec.ops`: :func:`node_alpha` gives it its α (checked present),
and :func:`array_apply` is the whole dispatch of the array-library adapters (torch, jax,
HIPS autograd), which differ only in the :class:`~resverify.spec.ops.ArrayNamespace`
they pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

from resverify.impl.backend import scale_alpha
from resverify.spec.ir import Node, Program
from resverify.spec.ops import OP_TABLE, ArrayNamespace

T = TypeVar("T")


def interpret(program: Program, leaves: Mapping[str, T], apply: Callable[[Node, list[T]], T]) -> T:
    """The value of ``program.output`` given a value per input and a per-node ``apply``.

    Whatever ``apply`` raises (ShapeMismatch above all) propagates unchanged.
    """
    env: dict[str, T] = dict(leaves)
    for node in program.order:
        env[node.name] = apply(node, [env[a] for a in node.args])
    return env[program.output]


def node_alpha(node: Node) -> Fraction | None:
    """The α the node's op takes; a missing one is an error, never a silent 0."""
    return scale_alpha(node) if OP_TABLE[node.op].takes_alpha else None


def array_apply(xp: ArrayNamespace, node: Node, args: list[Any]) -> Any:
    """One node in an array library: the entry's shape rule, then its ``array`` form."""
    op = OP_TABLE[node.op]
    alpha = node_alpha(node)
    op.shape([tuple(a.shape) for a in args])
    return op.array(xp, args, alpha)
