"""The one loop every in-process adapter shares, and the per-node dispatch to the op table.

:func:`interpret` walks the program and applies each node. Each node's op comes from its
entry in :mod:`resverify.spec.ops`: :func:`node_alpha` gives it its exact attribute (α or
ε, checked present),
and :func:`array_apply` is the whole dispatch of the array-library adapters (torch, jax,
HIPS autograd), which differ only in the :class:`~resverify.spec.ops.ArrayNamespace`
they pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

from resverify.impl.backend import scale_alpha
from resverify.spec.errors import InvalidProgram
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


def node_alpha(node: Node) -> Any:
    """The attribute the node's op takes (scale's α, a norm's ε, a layout op's integer
    ones), None for an op without one; a missing α or ε is an error, never a silent 0."""
    attr = OP_TABLE[node.op].attribute
    if attr is None:
        return node.attribute
    return scale_alpha(node) if attr == "alpha" else node_attribute(node, attr)


def node_attribute(node: Node, attr: str) -> Fraction:
    """The node's exact ``attr``; a missing one is an error (a Node made without checks)."""
    value = getattr(node, attr)
    if value is None:
        raise InvalidProgram(f"node {node.name!r}: {node.op} needs an {attr}")
    assert isinstance(value, Fraction)
    return value


def array_apply(xp: ArrayNamespace, node: Node, args: list[Any]) -> Any:
    """One node in an array library: the entry's shape rule, then its ``array`` form."""
    op = OP_TABLE[node.op]
    alpha = node_alpha(node)
    op.shape([tuple(a.shape) for a in args], alpha)
    return op.array(xp, args, alpha)
