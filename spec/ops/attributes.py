"""An op's attributes, declared once on its entry: each attribute's name and its kind.

An entry names what it takes in ``attributes`` (``{"alpha": EXACT}`` for scale,
``{"perm": INTS}`` for permute). Everything else is read from there: the IR checks a
node's values by their kind (:func:`checked`), the JSON wire format writes each under its
name, the protocol schema gives each its kind's :attr:`Kind.schema`, and
``Program.describe`` prints them. An op with a new attribute needs no new field.

Two families of kind. An exact rational (:data:`EXACT`: scale's ``alpha``, the norms'
``eps``) is a field of the node of its own name, as it always was, and the rules receive
it as a Fraction. Integers (:data:`INT`, :data:`INTS`: a shape, a permutation, an axis,
a slice's bounds), flags (:data:`BOOL`: a reduction's ``keepdim``) and dtype names
(:data:`DTYPE`: a cast's ``target`` and ``source``) are held together in one
:class:`Params` mapping, which the rules of such an op receive in place of a
rational. An op takes one or the other, never both (``tests/spec/ops/test_table.py`` holds it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.rounding import UNIT_ROUNDOFF

__all__ = ["Params", "Sample", "sample_params"]

IntValue = int | tuple[int, ...] | str
"""A :class:`Params` attribute's value: one int (a bool for a flag), a tuple of ints, or a
dtype name."""

_NATURAL = {"type": "integer", "minimum": 0}


@dataclass(frozen=True)
class Kind:
    """What values an attribute takes: ``name`` for messages, ``schema`` its JSON Schema."""

    name: str
    schema: Mapping[str, Any]


EXACT = Kind("an exact rational", {"$ref": "#/$defs/alpha"})
INT = Kind("a non-negative int", _NATURAL)
INTS = Kind("a list of non-negative ints", {"type": "array", "items": _NATURAL})
BOOL = Kind("a boolean", {"type": "boolean"})
DTYPE = Kind(f"a dtype name ({', '.join(UNIT_ROUNDOFF)})", {"enum": list(UNIT_ROUNDOFF)})


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checked(kind: Kind, value: object, where: str) -> IntValue:
    """``value`` as a Params attribute of ``kind`` (a list becomes a tuple), or
    InvalidProgram naming ``where`` and the value."""
    if kind is INT and _natural(value):
        assert isinstance(value, int)
        return value
    if kind is INTS and isinstance(value, (list, tuple)) and all(map(_natural, value)):
        return tuple(value)
    if kind is BOOL and isinstance(value, bool):
        return value
    if kind is DTYPE and isinstance(value, str) and value in UNIT_ROUNDOFF:
        return value
    raise InvalidProgram(f"{where} must be {kind.name}, got {value!r}")


class Params(Mapping[str, IntValue]):
    """A node's integer attributes by name: immutable, hashable, printed ``perm=(1, 0)``."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, IntValue] | Iterable[tuple[str, IntValue]] = ()
                 ) -> None:
        self._items = tuple(sorted(dict(items).items()))

    def __getitem__(self, name: str) -> IntValue:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return f"Params({self.text()})"

    def text(self) -> str:
        """``axis=1, start=0``: each attribute as its name and value."""
        return ", ".join(f"{key}={value}" for key, value in self._items)

    def number(self, name: str) -> int:
        value = self[name]
        assert isinstance(value, int)
        return value

    def flag(self, name: str) -> bool:
        value = self[name]
        assert isinstance(value, bool)
        return value

    def ints(self, name: str) -> tuple[int, ...]:
        value = self[name]
        assert isinstance(value, tuple)
        return value

    def dtype(self, name: str) -> str:
        value = self[name]
        assert isinstance(value, str)
        return value


class Sample(tuple[Shape, ...]):
    """An entry's sample: the argument shapes (a tuple, as every other op's samples are)
    with the integer attributes the op takes on them, ``Sample(((2, 3),), perm=(1, 0))``."""

    params: Params

    def __new__(cls, shapes: Iterable[Shape], **params: IntValue) -> Sample:
        self = super().__new__(cls, shapes)
        self.params = Params(params)
        return self

    def __eq__(self, other: object) -> bool:
        return tuple(self) == other and self.params == sample_params(other)

    def __hash__(self) -> int:
        return hash((tuple(self), self.params))

    def __repr__(self) -> str:
        return f"{tuple(self)!r} {self.params.text()}"


def sample_params(sample: object) -> Params:
    """The integer attributes a sample gives its op (none for a plain tuple of shapes)."""
    return getattr(sample, "params", Params())
