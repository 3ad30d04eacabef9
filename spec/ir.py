"""The program IR: a tiny graph over named inputs that every party interprets.

The ops themselves (arity, attribute, shape rule and every other rule) are defined in
:mod:`resverify.spec.ops`; :data:`OPS` here is their name and arity, read from there.

A node carries at most one exact rational attribute, the one its op's entry names
(:attr:`~resverify.spec.ops.Op.attribute`): ``alpha`` for ``scale``, ``eps`` for
``layer_norm`` and ``rms_norm``. Each attribute name is a field of :class:`Node` and a key
of the JSON wire format (:data:`ATTRIBUTES`); all are read by :func:`as_exact`, so an ε is
as exact as an α. :attr:`Node.attribute` is the value of the node's own one.

A program is validated once, when it is built (or loaded from JSON), so that no
interpreter ever meets an unknown op, a dangling name or a cycle. Shape errors are
not structural: they are found by :func:`infer_shapes` (and by every interpreter)
and reported as the typed :class:`~resverify.spec.errors.ShapeMismatch`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.ops import OP_TABLE, broadcast_shapes

__all__ = ["DTYPES", "OPS", "Input", "Node", "Program", "broadcast_shapes", "infer_shapes"]

OPS: Mapping[str, int] = {name: op.arity for name, op in OP_TABLE.items()}
"""Op name -> number of tensor arguments (the entries are in :mod:`resverify.spec.ops`)."""

DTYPES = ("float64", "float32", "float16", "bfloat16")

ATTRIBUTES = tuple(sorted({op.attribute for op in OP_TABLE.values() if op.attribute}))
"""Every attribute name an op takes (``alpha``, ``eps``): a field of Node, a JSON key."""


def as_exact(value: object, what: str = "alpha") -> Fraction:
    """Turn an int, float, Fraction or ``"p/q"`` string into an exact, finite Fraction.

    ``what`` names the attribute in the error message.
    """
    if isinstance(value, bool):
        raise InvalidProgram(f"{what} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidProgram(f"{what} must be finite, got {value!r}")
    try:
        if isinstance(value, str):
            text = value.strip().lower()
            if text.lstrip("+-").startswith("0x"):
                return as_exact(float.fromhex(text), what)
            if any(word in text for word in ("inf", "nan")):
                raise InvalidProgram(f"{what} must be finite, got {value!r}")
        if isinstance(value, (int, float, Fraction, str)):
            return Fraction(value)
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        raise InvalidProgram(f"{what} {value!r} is not a finite number: {exc}") from None
    raise InvalidProgram(f"{what} must be a number, got {type(value).__name__} {value!r}")


def as_alpha(value: object) -> Fraction:
    """:func:`as_exact` for ``scale``'s α."""
    return as_exact(value, "alpha")


def as_shape(value: object, where: str) -> Shape:
    """Validate a shape literal: a list or tuple of non-negative ints."""
    if not isinstance(value, (list, tuple)):
        raise InvalidProgram(f"{where}: shape must be a list of ints, got {value!r}")
    for dim in value:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InvalidProgram(f"{where}: bad dimension {dim!r} in shape {list(value)!r}")
    return tuple(value)


@dataclass(frozen=True)
class Input:
    """A named input tensor of a fixed shape."""

    name: str
    shape: Shape

    def __post_init__(self) -> None:
        _check_name(self.name)
        object.__setattr__(self, "shape", as_shape(self.shape, f"input {self.name!r}"))


@dataclass(frozen=True)
class Node:
    """One op applied to earlier names, with the exact attribute its op names, if any:
    ``alpha`` for ``scale``, ``eps`` for ``layer_norm`` and ``rms_norm``."""

    name: str
    op: str
    args: tuple[str, ...]
    alpha: Fraction | None = None
    eps: Fraction | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.op not in OPS:
            raise InvalidProgram(
                f"node {self.name!r}: unknown op {self.op!r}; known: {sorted(OPS)}"
            )
        args = tuple(self.args)
        if len(args) != OPS[self.op]:
            raise InvalidProgram(
                f"node {self.name!r}: {self.op} takes {OPS[self.op]} argument(s), got {len(args)}"
            )
        object.__setattr__(self, "args", args)
        entry = OP_TABLE[self.op]
        for attr in ATTRIBUTES:
            value = getattr(self, attr)
            if attr != entry.attribute:
                if value is not None:
                    takers = " and ".join(n for n, op in OP_TABLE.items() if op.attribute == attr)
                    raise InvalidProgram(f"node {self.name!r}: only {takers} takes an {attr}")
                continue
            if value is None:
                raise InvalidProgram(f"node {self.name!r}: {self.op} needs an {attr}")
            exact = as_exact(value, attr)
            refused = entry.refuses(exact)
            if refused:
                raise InvalidProgram(f"node {self.name!r}: {self.op}'s {attr} {refused}")
            object.__setattr__(self, attr, exact)

    @property
    def attribute(self) -> Fraction | None:
        """The value of the attribute this node's op takes (None for an op without one)."""
        attr = OP_TABLE[self.op].attribute
        return None if attr is None else getattr(self, attr)


@dataclass(frozen=True)
class Program:
    """Inputs, nodes in any order (sorted topologically here) and the name of the output."""

    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]
    output: str
    _order: tuple[Node, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        inputs, nodes = tuple(self.inputs), tuple(self.nodes)
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "nodes", nodes)
        names = [i.name for i in inputs] + [n.name for n in nodes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise InvalidProgram(f"duplicate name(s) {duplicates}")
        known = set(names)
        for node in nodes:
            for arg in node.args:
                if arg not in known:
                    raise InvalidProgram(f"node {node.name!r} refers to unknown name {arg!r}")
        if self.output not in known:
            raise InvalidProgram(f"output {self.output!r} is not an input or node name")
        object.__setattr__(self, "_order", _topological(inputs, nodes))

    @property
    def order(self) -> tuple[Node, ...]:
        """The nodes in an order where every argument comes before its use."""
        return self._order

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    def describe(self) -> str:
        """A one-line expression of the output, e.g. ``residual_add(x, linear(x, w))``."""
        by_name = {n.name: n for n in self.nodes}

        def text(name: str) -> str:
            node = by_name.get(name)
            if node is None:
                return name
            inner = ", ".join(text(a) for a in node.args)
            if node.alpha is not None:
                inner += f", {node.alpha}"
            if node.eps is not None:
                inner += f", eps={node.eps}"
            return f"{node.op}({inner})"

        return text(self.output)


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidProgram(f"names must be non-empty strings, got {name!r}")


def _topological(inputs: tuple[Input, ...], nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    done = {i.name for i in inputs}
    pending = list(nodes)
    order: list[Node] = []
    while pending:
        ready = [n for n in pending if all(a in done for a in n.args)]
        if not ready:
            raise InvalidProgram(f"cycle through node(s) {sorted(n.name for n in pending)}")
        for node in ready:
            order.append(node)
            done.add(node.name)
        pending = [n for n in pending if n.name not in done]
    return tuple(order)


def node_shape(op: str, shapes: Iterable[Shape]) -> Shape:
    """The output shape of one op from its argument shapes (raises ShapeMismatch)."""
    return OP_TABLE[op].shape(list(shapes))


def infer_shapes(program: Program) -> dict[str, Shape]:
    """The shape of every name in ``program``; raises ShapeMismatch on the first bad node."""
    shapes: dict[str, Shape] = {i.name: i.shape for i in program.inputs}
    for node in program.order:
        shapes[node.name] = node_shape(node.op, (shapes[a] for a in node.args))
    return shapes
