"""Small builders shared by the seed modules: programs, requests and exact values.

Why: most observations build a one- or two-node program and a float64 request around it;
one helper each keeps the seed modules down to their facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from resverify.spec.errors import Shape
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = []


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
