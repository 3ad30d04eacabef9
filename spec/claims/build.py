"""Small builders shared by the seed modules: programs, requests, and the claims themselves.

Why: most checks build a one- or two-node program and a float64 request around it, and every
claim pairs an exact check with a backend check of the same observation; one helper each
keeps the seed modules down to their facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from resverify.spec.claims.model import (
    Claim,
    Interpreter,
    Runner,
    Section,
    backend_interpreter,
    exact_run,
)
from resverify.spec.errors import Shape
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = [
    "claim",
    "frac",
    "fracs",
    "is_zero",
    "make_program",
    "make_request",
    "residual_pair",
]


def make_program(shapes: Mapping[str, Shape], nodes: list[tuple[Any, ...]], output: str
                 ) -> Program:
    """A program from ``{input: shape}`` and ``(name, op, args[, alpha])`` node tuples."""
    return Program(tuple(Input(n, s) for n, s in shapes.items()),
                   tuple(Node(*spec) for spec in nodes), output)


def make_request(program: Program, inputs: Mapping[str, object], cotangent: object | None,
                 dtype: str = "float64") -> Request:
    """A request whose values (plain lists or arrays) are read as float64 numbers."""
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    cot = None if cotangent is None else np.asarray(cotangent, dtype=np.float64)
    return Request(program, arrays, dtype, cot)


def residual_pair(x_shape: Shape, f_shape: Shape, op: str = "residual_add") -> Program:
    """``op(x, f)`` with both operands given as inputs: the merge alone."""
    return make_program({"x": x_shape, "f": f_shape}, [("y", op, ("x", "f"))], "y")


def is_zero(matrix: sp.Matrix) -> bool:
    """Whether every entry of a SymPy matrix simplifies to 0 (a law's difference vanishes)."""
    return all(sp.simplify(entry) == 0 for entry in matrix)


def frac(text: str) -> Fraction:
    """An exact expected value written as text: ``frac("-13/4")``."""
    return Fraction(text)


def fracs(*texts: str) -> tuple[Fraction, ...]:
    """A flat tuple of exact expected values: ``fracs("1", "-13/4")``."""
    return tuple(Fraction(t) for t in texts)


def _both(observe: Callable[[Interpreter], object]
          ) -> tuple[Callable[[], object], Callable[[Runner], object]]:
    """The exact check and the backend check of one observation."""
    return (lambda: observe(exact_run)), (lambda run: observe(backend_interpreter(run)))


def claim(id_: str, source: Section, statement: str, expected: object,
          observe: Callable[[Interpreter], object] | None = None, *,
          check: Callable[[], object] | None = None,
          backend: Callable[[Runner], object] | None = None,
          backend_expected: object = None, note: str = "") -> Claim:
    """A claim; ``observe`` gives both checks at once, ``check``/``backend`` override them."""
    if observe is not None:
        exact_check, backend_check = _both(observe)
        check = check or exact_check
        backend = backend or backend_check
    assert check is not None
    return Claim(id_, source, statement, expected, check, backend, backend_expected, note)

