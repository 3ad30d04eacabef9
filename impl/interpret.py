"""The one loop every in-process adapter shares: walk the program, apply each node."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from resverify.spec.ir import Node, Program

T = TypeVar("T")


def interpret(program: Program, leaves: Mapping[str, T], apply: Callable[[Node, list[T]], T]) -> T:
    """The value of ``program.output`` given a value per input and a per-node ``apply``.

    Whatever ``apply`` raises (ShapeMismatch above all) propagates unchanged.
    """
    env: dict[str, T] = dict(leaves)
    for node in program.order:
        env[node.name] = apply(node, [env[a] for a in node.args])
    return env[program.output]
