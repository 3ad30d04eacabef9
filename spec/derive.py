"""Each op's local derivative, derived by SymPy rather than written by hand.

For an op and concrete argument shapes we build the op's forward value from SymPy
primitives over one real symbol per element (each op's ``symbolic`` form in its entry in
:mod:`resverify.spec.ops`: ``Max(a, 0)`` for relu, ``tanh`` for tanh, explicit sums for
``linear`` and ``sum``, ``sqrt`` of the mean square plus a positive ε for the norms),
let SymPy differentiate it into the Jacobian of
the flattened output with respect to each flattened argument, and form the VJP
``J_iᵀ ȳ`` (reverse mode) and the JVP ``Σ_i J_i t_i`` (forward mode, one tangent symbol
per argument element). ``tests/spec/test_derive.py`` and ``tests/spec/ops/test_table.py``
feed the same symbols to the hand-written rules of :mod:`resverify.spec.ops` and ask SymPy
whether the two agree.

Broadcasting is only index bookkeeping (which input element feeds which output element),
so it is done with ``np.broadcast_to`` on the symbol arrays; the arithmetic is SymPy's.

relu is not differentiable at 0: SymPy's derivative of ``Max(a, 0)`` is ``Heaviside(a)``,
whose value at 0 SymPy leaves as 1/2 by default. resverify declares the derivative at 0 to
be 0 (:data:`RELU_DERIVATIVE_AT_ZERO`), as PyTorch, JAX and our reference do; away from 0
the derived and declared rules coincide.

Derivations are cached per (op, shapes), so each is done once per process; a layout op's
sample shapes carry its integer attributes (:class:`~resverify.spec.ops.Sample`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy

from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.ir import OPS
from resverify.spec.ops import OP_TABLE, Params
from resverify.spec.ops.attributes import sample_params

__all__ = []

RELU_DERIVATIVE_AT_ZERO = sympy.Integer(0)
"""The declared value of relu'(0); SymPy's ``Heaviside(0)`` alone would say 1/2."""

ALPHA = sympy.Symbol("alpha", real=True)
"""The symbol standing for ``scale``'s constant."""

EPS = sympy.Symbol("eps", positive=True)
"""The symbol standing for a norm's ε (positive, so SymPy may take square roots)."""

ATTRIBUTE_SYMBOLS = {"alpha": ALPHA, "eps": EPS}


def attribute_symbol(op: str, shapes: tuple[Shape, ...] = ()) -> sympy.Symbol | Params | None:
    """The symbol standing for ``op``'s exact attribute; for a layout op, the integer
    attributes its sample ``shapes`` give (:class:`~resverify.spec.ops.Sample`); None for an
    op without any."""
    attr = OP_TABLE[op].attribute
    if attr is not None:
        return ATTRIBUTE_SYMBOLS[attr]
    return sample_params(shapes) if OP_TABLE[op].attributes else None


@dataclass(frozen=True)
class Derived:
    """One op at fixed shapes: symbols, symbolic output, Jacobians, the derived VJP and the
    derived JVP (over one tangent symbol array per argument, ``tangents``)."""

    op: str
    args: tuple[np.ndarray, ...]
    cotangent: np.ndarray
    output: np.ndarray
    jacobians: tuple[sympy.Matrix, ...]
    vjp: tuple[np.ndarray, ...]
    tangents: tuple[np.ndarray, ...]
    jvp: np.ndarray


def symbols(prefix: str, shape: Shape) -> np.ndarray:
    """An object array of real symbols ``prefix_i_j``, one per element of ``shape``."""
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = sympy.Symbol("_".join([prefix, *map(str, index)]), real=True)
    return out


def symbolic_forward(op: str, args: tuple[np.ndarray, ...], shapes: tuple[Shape, ...] = ()
                     ) -> np.ndarray:
    """The op's value on symbol arrays, from its SymPy form (not from its exact rule)."""
    return OP_TABLE[op].symbolic(sympy, args, attribute_symbol(op, shapes))


def _jacobian(output: np.ndarray, arg: np.ndarray) -> sympy.Matrix:
    rows, cols = list(output.flat), list(arg.flat)
    if not rows or not cols:
        return sympy.zeros(len(rows), len(cols))
    return sympy.Matrix(rows).jacobian(sympy.Matrix(cols))


def _jvp(jacobians: tuple[sympy.Matrix, ...], tangents: tuple[np.ndarray, ...],
         shape: Shape) -> np.ndarray:
    """``Σ_i J_i vec(t_i)`` in the output's shape."""
    total = sympy.zeros(int(np.prod(shape)), 1)
    for jacobian, tangent in zip(jacobians, tangents, strict=True):
        if tangent.size and total.rows:
            total += jacobian * sympy.Matrix(list(tangent.flat))
    out = np.empty(total.rows, dtype=object)
    out[:] = list(total)
    return out.reshape(shape)


def _vjp(jacobian: sympy.Matrix, cotangent: np.ndarray, shape: Shape) -> np.ndarray:
    column = jacobian.T * sympy.Matrix(list(cotangent.flat)) if cotangent.size else None
    values = list(column) if column is not None else [sympy.Integer(0)] * int(np.prod(shape))
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


@functools.cache
def derived(op: str, shapes: tuple[Shape, ...]) -> Derived:
    """Derive ``op``'s Jacobians, VJP and JVP at argument ``shapes`` (cached)."""
    if op not in OPS or len(shapes) != OPS[op]:
        raise InvalidProgram(f"{op!r} with {len(shapes)} argument shape(s) is not an op of the IR")
    args = tuple(symbols(name, shape) for name, shape in zip("abc", shapes, strict=False))
    output = symbolic_forward(op, args, shapes)
    cotangent = symbols("g", output.shape)
    jacobians = tuple(_jacobian(output, a) for a in args)
    vjp = tuple(_vjp(j, cotangent, a.shape) for j, a in zip(jacobians, args, strict=True))
    tangents = tuple(symbols(f"t{name}", shape) for name, shape in zip("abc", shapes,
                                                                       strict=False))
    jvp = _jvp(jacobians, tangents, output.shape)
    return Derived(op, args, cotangent, output, jacobians, vjp, tangents, jvp)


def local_jacobian(op: str, shapes: tuple[Shape, ...]) -> tuple[sympy.Matrix, ...]:
    """d vec(output) / d vec(argument), one matrix per argument."""
    return derived(op, shapes).jacobians


def derived_vjp(op: str, shapes: tuple[Shape, ...]) -> tuple[np.ndarray, ...]:
    """``J_iᵀ ȳ`` in each argument's shape, over the symbols of :func:`derived`."""
    return derived(op, shapes).vjp


def derived_jvp(op: str, shapes: tuple[Shape, ...]) -> np.ndarray:
    """``Σ_i J_i t_i`` in the output's shape, over the symbols of :func:`derived`."""
    return derived(op, shapes).jvp


def relu_derivative(value: Fraction | int) -> sympy.Expr:
    """The derived relu derivative at a rational point, with the declared value at 0."""
    point = sympy.Rational(value.numerator, value.denominator) if isinstance(value, Fraction) \
        else sympy.Integer(value)
    a = sympy.Symbol("a", real=True)
    slope = sympy.diff(sympy.Max(a, 0), a)
    slope = slope.replace(sympy.Heaviside,
                          lambda arg, *_: sympy.Heaviside(arg, RELU_DERIVATIVE_AT_ZERO))
    return slope.subs(a, point)
