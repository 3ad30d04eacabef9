"""The exact interpreter: the value and the gradients that every backend is compared against.

Every op except ``tanh`` maps rationals to rationals, so it is evaluated in exact
:class:`fractions.Fraction` arithmetic on NumPy object arrays (which gives NumPy's own
shape and broadcasting behaviour, rank 0 and empty axes included). ``tanh`` is not
rational: it is enclosed with mpmath's interval arithmetic (outward-rounded ``exp``),
at a working precision that grows until the enclosure is narrower than
``2**-TANH_PRECISION_BITS`` relative to the value; the midpoint of the enclosure becomes
the Fraction we carry, and half its width is that element's error.

Approximation errors are tracked soundly but coarsely, as one absolute bound per array,
through every later op (forward and reverse): sums add bounds, products use
``|ab - a'b'| <= |a'|e_b + |b'|e_a + e_a e_b``, relu and tanh are 1-Lipschitz, and a
relu whose input sign is uncertain charges the whole cotangent magnitude to its
gradient. The largest of these bounds over the output and every gradient is the
result's ``slack``; it is exactly 0 for programs without ``tanh``.

The VJP rules here are written by hand beside each forward rule; ``resverify.spec.derive`` derives
the same rules with SymPy and ``tests/test_derive.py`` proves they agree.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from mpmath import libmp

from resverify.spec.errors import InvalidProgram, Shape, ShapeMismatch
from resverify.spec.ir import Program, infer_shapes
from resverify.spec.request import Request, Result, ResultError

__all__ = [
    "RULES",
    "TANH_PRECISION_BITS",
    "ExactResult",
    "Rule",
    "Trace",
    "as_fractions",
    "evaluate",
    "evaluate_exact",
    "exact_tanh",
    "unbroadcast",
]

TANH_PRECISION_BITS = 200
"""Each tanh element is enclosed to within ``2**-200`` of its own magnitude (relative)."""

ZERO = Fraction(0)
_ZERO_OBJ = np.array(ZERO, dtype=object)
Arr = np.ndarray


# ----------------------------------------------------------------------------------------
# conversions


def _fraction(value: object) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise InvalidProgram(f"expected a number, got {value!r}")
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            raise InvalidProgram(f"the exact interpreter needs finite values, got {number!r}")
        return Fraction(number)
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, str):
        return Fraction(value)
    raise InvalidProgram(f"expected a number, got {type(value).__name__} {value!r}")


def _objects(values: Sequence[object], shape: Shape) -> Arr:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.reshape(shape)


def as_fractions(array: object) -> Arr:
    """An object array of exact Fractions with the same shape (-0.0 becomes Fraction(0)).

    Floats convert exactly (every finite float is a dyadic rational); NaN and infinities
    are refused with :class:`~resverify.spec.errors.InvalidProgram`.
    """
    raw = array if isinstance(array, np.ndarray) else np.array(array, dtype=object)
    return _objects([_fraction(v) for v in raw.reshape(-1).tolist()], raw.shape)


def _normalize(array: Arr) -> Arr:
    """Object arrays whose elements are all Fractions (NumPy's empty sums yield int 0)."""
    flat = np.asarray(array, dtype=object).reshape(-1).tolist()
    return _objects([v if isinstance(v, Fraction) else Fraction(v) for v in flat],
                    np.shape(array))


# ----------------------------------------------------------------------------------------
# tanh, enclosed


def _to_fraction(raw: tuple[int, int, int, int]) -> Fraction:
    p, q = libmp.to_rational(raw)
    return Fraction(p, q)


@functools.lru_cache(maxsize=1 << 16)
def exact_tanh(x: Fraction) -> tuple[Fraction, Fraction]:
    """``(t, e)`` with ``|tanh(x) - t| <= e <= |t| * 2**-TANH_PRECISION_BITS``.

    Small and large arguments use bounds that need no evaluation:
    ``x - x**3/3 <= tanh x <= x`` for x >= 0, and ``0 < 1 - tanh x < 2 exp(-2x) < 2**-700``
    for x >= 256. Between, ``tanh x = 1 - 2/(exp(2x) + 1)`` with outward rounding, redone at
    double the precision until the enclosure is narrow enough. The result is cached.
    """
    if x < 0:
        t, e = exact_tanh(-x)
        return -t, e
    if x == 0:
        return ZERO, ZERO
    if x < Fraction(1, 2**TANH_PRECISION_BITS):
        return x, x**3 / 3
    if x >= 256:
        return Fraction(1), Fraction(1, 2**700)
    prec = TANH_PRECISION_BITS + 24 + max(0, -x.numerator.bit_length() + x.denominator.bit_length())
    while True:
        lo, hi = _tanh_enclosure(x, prec)
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        if half <= abs(mid) / 2**TANH_PRECISION_BITS:
            return mid, half
        prec *= 2


def _tanh_enclosure(x: Fraction, prec: int) -> tuple[Fraction, Fraction]:
    """Bounds on tanh(x) for x > 0, as ``1 - 2/(exp(2x) + 1)`` with every step rounded outward.

    This is mpmath's interval ``exp`` (``mpf_exp`` rounded down and up) without the
    interval-object overhead; the expression is increasing in exp(2x), so the lower bound
    uses only lower bounds of its increasing parts and upper bounds of its decreasing ones.
    """
    down, up = libmp.round_floor, libmp.round_ceiling
    one, two = libmp.fone, libmp.from_int(2)
    bounds = []
    for rnd, other in ((down, up), (up, down)):
        twice = libmp.from_rational(2 * x.numerator, x.denominator, prec, rnd)
        grown = libmp.mpf_add(libmp.mpf_exp(twice, prec, rnd), one, prec, rnd)
        share = libmp.mpf_div(two, grown, prec, other)
        bounds.append(_to_fraction(libmp.mpf_sub(one, share, prec, rnd)))
    return bounds[0], bounds[1]


# ----------------------------------------------------------------------------------------
# the rules: forward and VJP side by side


@dataclass(frozen=True)
class Rule:
    """One op: ``forward(args, alpha)`` and ``vjp(g, args, out, alpha)`` -> one grad per arg.

    Both work on object arrays of any numbers that support + and * (Fractions here,
    SymPy symbols in ``tests/test_derive.py``).
    """

    forward: Callable[[Sequence[Arr], Fraction | None], Arr]
    vjp: Callable[[Arr, Sequence[Arr], Arr, Fraction | None], tuple[Arr, ...]]


def unbroadcast(grad: Arr, shape: Shape) -> Arr:
    """Sum ``grad`` over the axes broadcasting added or stretched to go from ``shape``.

    Keeps the dtype of ``grad`` (object arrays of numbers, or floats in ``resverify.spec.budget``).
    """
    extra = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True)
    return np.asarray(out, dtype=grad.dtype).reshape(shape)


def _obj(value: Any) -> Arr:
    return np.asarray(value, dtype=object)


def _scaled(array: Arr) -> tuple[Arr, int] | None:
    """``(ints, d)`` with ``array == ints / d`` when every element is a Fraction or int."""
    flat = array.reshape(-1).tolist()
    if not all(isinstance(v, (Fraction, int)) for v in flat):
        return None
    d = math.lcm(*(v.denominator for v in flat)) if flat else 1
    ints = [v.numerator * (d // v.denominator) for v in flat]
    return _objects(ints, array.shape), d


def _matmul(a: Arr, b: Arr) -> Arr:
    """``a @ b``; on rationals, done on integers over a common denominator (no gcd per step)."""
    sa, sb = _scaled(a), _scaled(b)
    if sa is None or sb is None:
        return _obj(a @ b)
    product = _obj(sa[0] @ sb[0])
    d = sa[1] * sb[1]
    return _objects([Fraction(v, d) for v in product.reshape(-1).tolist()], product.shape)


def _relu(args: Sequence[Arr], alpha: Fraction | None) -> Arr:
    return _obj(np.where(args[0] > 0, args[0], _ZERO_OBJ))


def _tanh(args: Sequence[Arr], alpha: Fraction | None) -> Arr:
    return _objects([exact_tanh(_fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                    args[0].shape)


def _linear_vjp(g: Arr, args: Sequence[Arr], out: Arr, alpha: Fraction | None
                ) -> tuple[Arr, ...]:
    x, w = args
    d_in, d_out = w.shape
    rows = math.prod(x.shape[:-1])  # not reshape(-1, d_in): d_in may be 0
    gw = _matmul(x.reshape(rows, d_in).T, g.reshape(rows, d_out)).reshape(w.shape)
    return _matmul(g, w.T).reshape(x.shape), gw


RULES: Mapping[str, Rule] = {
    # d(a+b) = da + db, summed back over broadcast axes
    "add": Rule(lambda a, _: _obj(a[0] + a[1]),
                lambda g, a, y, _: (unbroadcast(g, a[0].shape), unbroadcast(g, a[1].shape))),
    # the merge passes the cotangent unchanged to both edges
    "residual_add": Rule(lambda a, _: _obj(a[0] + a[1]), lambda g, a, y, _: (g, g)),
    # d(ab) = b da + a db
    "mul": Rule(lambda a, _: _obj(a[0] * a[1]),
                lambda g, a, y, _: (unbroadcast(_obj(g * a[1]), a[0].shape),
                                    unbroadcast(_obj(g * a[0]), a[1].shape))),
    # d(alpha a) = alpha da
    "scale": Rule(lambda a, k: _obj(a[0] * k), lambda g, a, y, k: (_obj(g * k),)),
    # y = x w: x̄ = ȳ wᵀ, w̄ = Σ_rows xᵀ ȳ
    "linear": Rule(lambda a, _: _matmul(a[0], a[1]).reshape(a[0].shape[:-1] + a[1].shape[1:]),
                   _linear_vjp),
    # relu' = 1 where a > 0, else 0 (0 at 0: the declared convention)
    "relu": Rule(_relu, lambda g, a, y, _: (_obj(np.where(a[0] > 0, g, _ZERO_OBJ)),)),
    # tanh' = 1 - tanh²
    "tanh": Rule(_tanh, lambda g, a, y, _: (_obj(g * (1 - y * y)),)),
    # sum: the cotangent is copied to every element
    "sum": Rule(lambda a, _: _obj(a[0].sum()),
                lambda g, a, y, _: (_obj(np.broadcast_to(g, a[0].shape)).copy(),)),
}


# ----------------------------------------------------------------------------------------
# error bounds for the approximate elements (only tanh makes them non-zero)


def _mag(array: Arr) -> Fraction:
    flat = array.reshape(-1).tolist()
    return max((abs(v) for v in flat), default=ZERO)


def _times(ma: Fraction, ea: Fraction, mb: Fraction, eb: Fraction) -> Fraction:
    """Error of a product of approximations with magnitudes ma, mb and errors ea, eb."""
    return ma * eb + mb * ea + ea * eb


def _forward_slack(op: str, args: Sequence[Arr], slacks: Sequence[Fraction],
                   alpha: Fraction | None, own: Fraction) -> Fraction:
    if op in ("add", "residual_add"):
        return slacks[0] + slacks[1]
    if op == "mul" and any(slacks):
        return _times(_mag(args[0]), slacks[0], _mag(args[1]), slacks[1])
    if op == "linear" and any(slacks):
        return args[1].shape[0] * _times(_mag(args[0]), slacks[0], _mag(args[1]), slacks[1])
    if op == "sum":
        return args[0].size * slacks[0]
    if op in ("relu", "tanh"):
        return slacks[0] + own
    if op == "scale":
        assert alpha is not None
        return abs(alpha) * slacks[0]
    return ZERO


def _backward_slack(op: str, g: Arr, eg: Fraction, args: Sequence[Arr],
                    slacks: Sequence[Fraction], out: Arr, out_slack: Fraction,
                    alpha: Fraction | None) -> tuple[Fraction, ...]:
    if not (eg or any(slacks) or out_slack):
        return tuple(ZERO for _ in args)
    mg = _mag(g)
    if op in ("add", "residual_add"):
        return tuple(eg * max(1, g.size // max(1, a.size)) for a in args)
    if op == "mul":
        return tuple(max(1, g.size // max(1, a.size)) * _times(mg, eg, _mag(b), eb)
                     for a, b, eb in ((args[0], args[1], slacks[1]),
                                      (args[1], args[0], slacks[0])))
    if op == "linear":
        x, w = args
        rows = math.prod(x.shape[:-1])
        return (w.shape[1] * _times(mg, eg, _mag(w), slacks[1]),
                rows * _times(mg, eg, _mag(x), slacks[0]))
    if op == "scale":
        assert alpha is not None
        return (abs(alpha) * eg,)
    if op == "relu":
        unsure = slacks[0] > 0 and any(abs(v) <= slacks[0] for v in args[0].reshape(-1).tolist())
        return (eg + (mg if unsure else ZERO),)
    if op == "tanh":
        return (eg + mg * out_slack * (2 * _mag(out) + out_slack),)
    return (eg,)  # sum


# ----------------------------------------------------------------------------------------
# the interpreter


@dataclass(frozen=True)
class ExactResult:
    """The exact output and gradients (object arrays of Fractions), or a typed error.

    ``slack`` bounds, for every element at once, the distance between a Fraction here and
    the true real value; it is 0 unless the program uses ``tanh``. ``grads`` is None
    when no cotangent was given (forward only) or on error. ``trace`` keeps every
    intermediate value (``resverify.spec.budget`` reuses it when passed ``exact=``).
    """

    output: Arr | None
    grads: dict[str, Arr] | None
    slack: Fraction
    error: ResultError | None = None
    trace: Trace | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Trace:
    """The forward pass kept for later analysis (``resverify.spec.budget`` reads relu signs
    from it).

    ``values`` holds every input and node value (object arrays, elements may be ints where
    NumPy summed nothing), ``slack`` each one's absolute error bound.
    """

    values: Mapping[str, Arr]
    slack: Mapping[str, Fraction]


def evaluate(request: Request) -> ExactResult:
    """Interpret ``request`` exactly: its float inputs and cotangent are read as rationals."""
    return evaluate_exact(request.program, request.inputs, request.cotangent)


def evaluate_exact(program: Program, inputs: Mapping[str, object],
                   cotangent: object | None) -> ExactResult:
    """Like :func:`evaluate`, but inputs and cotangent may hold any Fractions or ints.

    With ``cotangent=None`` only the forward value is computed (``grads`` is None).
    """
    try:
        shapes = infer_shapes(program)
    except ShapeMismatch as exc:
        return ExactResult(None, None, ZERO, Result.mismatch(exc).error)
    values = _read_inputs(program, inputs)
    slack = dict.fromkeys(values, ZERO)
    for node in program.order:
        args = [values[a] for a in node.args]
        values[node.name] = RULES[node.op].forward(args, node.alpha)
        own = _tanh_error(values[node.name]) if node.op == "tanh" else ZERO
        slack[node.name] = _forward_slack(node.op, args, [slack[a] for a in node.args],
                                          node.alpha, own)
    output = _normalize(values[program.output])
    trace = Trace(values, slack)
    if cotangent is None:
        return ExactResult(output, None, slack[program.output], trace=trace)
    cot = as_fractions(cotangent)
    if cot.shape != shapes[program.output]:
        raise InvalidProgram(f"cotangent has shape {list(cot.shape)}, "
                             f"output has {list(shapes[program.output])}")
    grads, grad_slack = _backward(program, values, slack, cot)
    total = max([slack[program.output], *(grad_slack[n] for n in program.input_names)])
    return ExactResult(output, {n: _normalize(grads[n]) for n in program.input_names}, total,
                       trace=trace)


def _tanh_error(out: Arr) -> Fraction:
    """The largest enclosure half-width among the tanh elements just computed (cached)."""
    return max((_tanh_value_error(v) for v in out.reshape(-1).tolist()), default=ZERO)


def _tanh_value_error(t: Fraction) -> Fraction:
    """A bound for the error of a tanh value t: ``|t| 2**-P`` (or ``2**-700`` at ±1)."""
    if abs(t) == 1:
        return Fraction(1, 2**700)
    return abs(t) / 2**TANH_PRECISION_BITS


def _read_inputs(program: Program, inputs: Mapping[str, object]) -> dict[str, Arr]:
    declared = {i.name: i.shape for i in program.inputs}
    if set(inputs) != set(declared):
        raise InvalidProgram(f"inputs {sorted(inputs)} do not match program inputs "
                             f"{sorted(declared)}")
    values = {}
    for name, shape in declared.items():
        values[name] = as_fractions(inputs[name])
        if values[name].shape != shape:
            raise InvalidProgram(f"input {name!r} has shape {list(values[name].shape)}, "
                                 f"declared {list(shape)}")
    return values


def _backward(program: Program, values: dict[str, Arr], slack: dict[str, Fraction],
              cot: Arr) -> tuple[dict[str, Arr], dict[str, Fraction]]:
    grads: dict[str, Arr] = {program.output: cot}
    errs: dict[str, Fraction] = {program.output: ZERO}
    for node in reversed(program.order):
        if node.name not in grads:
            continue
        g, eg = grads.pop(node.name), errs.pop(node.name)
        args = [values[a] for a in node.args]
        parts = RULES[node.op].vjp(g, args, values[node.name], node.alpha)
        part_errs = _backward_slack(node.op, g, eg, args, [slack[a] for a in node.args],
                                    values[node.name], slack[node.name], node.alpha)
        for arg, part, err in zip(node.args, parts, part_errs, strict=True):
            grads[arg] = part if arg not in grads else _obj(grads[arg] + part)
            errs[arg] = errs.get(arg, ZERO) + err
    for name in program.input_names:
        if name not in grads:
            grads[name] = _objects([ZERO] * values[name].size, values[name].shape)
            errs[name] = ZERO
    return grads, errs
