"""The program IR: a tiny graph over named inputs that every party interprets.

The ops themselves (arity, attribute, shape rule and every other rule) are defined in
:mod:`resverify.spec.ops`; :data:`OPS` here is their name and arity, read from there.

A node carries the attributes its op's entry declares
(:attr:`~resverify.spec.ops.Op.attributes`, each with its kind): at most one exact
rational, ``alpha`` for ``scale``, ``eps`` for ``layer_norm`` and ``rms_norm``, each a
field of :class:`Node` (:data:`ATTRIBUTES`) read by :func:`as_exact`, so an ε is as exact
as an α; or the integer ones of a layout op (``shape``, ``perm``, ``axis``, ...), held
together in :attr:`Node.params`. Each is a key of the JSON wire format under its name
(:data:`KINDS`). :attr:`Node.attribute` is what the op's rules receive.

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
from typing import Any

from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.ops import OP_TABLE, Params, broadcast_shapes
from resverify.spec.ops.attributes import EXACT, IntValue, Kind, checked

__all__ = ["DTYPES", "OPS", "Input", "Node", "Program", "broadcast_shapes", "infer_shapes"]

OPS: Mapping[str, int] = {name: op.arity for name, op in OP_TABLE.items()}
"""Op name -> number of tensor arguments (the entries are in :mod:`resverify.spec.ops`)."""

DTYPES = ("float64", "float32", "float16", "bfloat16")

ATTRIBUTES = tuple(sorted({op.attribute for op in OP_TABLE.values() if op.attribute}))
"""Every exact rational attribute an op takes (``alpha``, ``eps``): a field of Node."""

KINDS: Mapping[str, Kind] = {name: kind for op in OP_TABLE.values()
                             for name, kind in sorted(op.attributes.items())}
"""Every attribute an op takes, by name, with its kind: each a JSON key of a node."""


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
    """One op applied to earlier names, with the attributes its op names, if any: the
    exact rational ``alpha`` of ``scale``, ``eps`` of ``layer_norm`` and ``rms_norm``, or
    the integer ones of a layout op in ``params`` (``{"perm": (1, 0)}``)."""

    name: str
    op: str
    args: tuple[str, ...]
    alpha: Fraction | None = None
    eps: Fraction | None = None
    params: Mapping[str, object] = Params()

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
        for attr in ATTRIBUTES:  # the exact ones, fields of their own
            value = self._given(attr, getattr(self, attr))
            if value is not None:
                object.__setattr__(self, attr, self._exact(attr, value))
        for attr, value in self.params.items():
            self._given(attr, value)
        params: dict[str, IntValue] = {}
        for attr, kind in entry.attributes.items():
            if kind is not EXACT:
                where = f"node {self.name!r}: {self.op}'s {attr}"
                params[attr] = checked(kind, self._given(attr, self.params.get(attr)), where)
        object.__setattr__(self, "params", Params(params))

    def _given(self, attr: str, value: object) -> object:
        """``value`` if the op takes ``attr`` and it is given; None if the op does not take
        it and it is not given; else InvalidProgram."""
        takes = attr in OP_TABLE[self.op].attributes
        if takes and value is None:
            raise InvalidProgram(f"node {self.name!r}: {self.op} needs {_an(attr)}")
        if not takes and value is not None:
            raise InvalidProgram(f"node {self.name!r}: {_takers(attr)} {_an(attr)}")
        return value

    def _exact(self, attr: str, value: object) -> Fraction:
        exact = as_exact(value, attr)
        refused = OP_TABLE[self.op].refuses(exact)
        if refused:
            raise InvalidProgram(f"node {self.name!r}: {self.op}'s {attr} {refused}")
        return exact

    @property
    def attribute(self) -> Any:
        """What the op's rules receive as its attribute: the exact one's value (α, ε), the
        :class:`~resverify.spec.ops.Params` of integer ones, None for an op without any."""
        entry = OP_TABLE[self.op]
        if entry.attribute is not None:
            return getattr(self, entry.attribute)
        return self.params if entry.attributes else None


def _an(attr: str) -> str:
    """``an alpha``, ``a perm``."""
    return f"{'an' if attr[0] in 'aeiou' else 'a'} {attr}"


def _takers(attr: str) -> str:
    """``only scale takes``, ``only layer_norm, rms_norm and batch_norm take``, or ``no op
    takes`` for a name no op takes."""
    takers = [n for n, op in OP_TABLE.items() if attr in op.attributes]
    if not takers:
        return "no op takes"
    if len(takers) == 1:
        return f"only {takers[0]} takes"
    return f"only {', '.join(takers[:-1])} and {takers[-1]} take"


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
            if node.params:
                inner += "".join(f", {k}={v}" for k, v in node.params.items())
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


def node_shape(op: str, shapes: Iterable[Shape], k: object = None) -> Shape:
    """The output shape of one op from its argument shapes (and its node's integer
    attributes ``k``; raises ShapeMismatch)."""
    return OP_TABLE[op].shape(list(shapes), k)


def infer_shapes(program: Program) -> dict[str, Shape]:
    """The shape of every name in ``program``; raises ShapeMismatch on the first bad node."""
    shapes: dict[str, Shape] = {i.name: i.shape for i in program.inputs}
    for node in program.order:
        shapes[node.name] = node_shape(node.op, (shapes[a] for a in node.args), node.attribute)
    return shapes


def infer_dtypes(program: Program, dtype: str) -> dict[str, str]:
    """The dtype every name of ``program`` is computed in when its inputs are in ``dtype``:
    a ``cast`` node its target, every other node its arguments' (each op's
    :meth:`~resverify.spec.ops.Op.dtype`); InvalidProgram naming the first node whose
    arguments disagree."""
    dtypes = dict.fromkeys(program.input_names, dtype)
    for node in program.order:
        try:
            dtypes[node.name] = OP_TABLE[node.op].dtype([dtypes[a] for a in node.args],
                                                        node.attribute)
        except InvalidProgram as exc:
            raise InvalidProgram(f"node {node.name!r}: {exc}") from None
    return dtypes
