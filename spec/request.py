"""Requests (program + values + dtype + cotangent [+ tangents]) and results (a value or a
typed error).

Why these types: a backend's answer is either a :class:`Value` (the output and every
input's gradient, all present, plus the output tangent exactly when the request carried
input tangents) or a :class:`ResultError` (a typed refusal), and :data:`Result` is that
union, so a consumer matches on the type instead of testing which optional fields are set.
A :class:`Request` always carries a cotangent (derived for a shape-invalid program, see its
docstring); it carries ``tangents`` (one per input) only when it asks for forward mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

import numpy as np

from resverify.spec.errors import BadResult, InvalidRequest, Shape, ShapeMismatch
from resverify.spec.ir import DTYPES, Program, infer_dtypes, infer_shapes
from resverify.spec.rounding import accumulation

ErrorKind = Literal["shape_mismatch", "unsupported", "backend_error"]
ERROR_KINDS: tuple[str, ...] = ("shape_mismatch", "unsupported", "backend_error")

NO_OUTPUT: Final[np.ndarray] = np.zeros((0,))
NO_OUTPUT.flags.writeable = False
"""The derived cotangent of a shape-invalid program (stored in the request's dtype)."""


def storage_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that holds values of ``dtype`` exactly (bfloat16 lives in float32)."""
    if dtype not in DTYPES:
        raise InvalidRequest(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
    return np.dtype("float32" if dtype == "bfloat16" else dtype)


def as_values(value: object, dtype: str, where: str) -> np.ndarray:
    """Convert to a read-only array of ``dtype``, refusing values the dtype cannot hold exactly."""
    raw = np.asarray(value, dtype=np.float64) if not isinstance(value, np.ndarray) else value
    if raw.dtype.kind != "f":
        raw = raw.astype(np.float64)
    out = raw.astype(storage_dtype(dtype))
    if dtype == "bfloat16":
        out = out.copy()
        if np.any(out.view(np.uint32) & np.uint32(0xFFFF)):
            raise InvalidRequest(f"{where}: values are not representable in bfloat16")
    same = (out.astype(np.float64) == raw.astype(np.float64)) | (np.isnan(out) & np.isnan(raw))
    if not np.all(same):
        raise InvalidRequest(f"{where}: values are not exactly representable in {dtype}")
    out = np.array(out, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, init=False)
class Request:
    """Everything needed to run a program once: the values of each input and the output
    cotangent. ``cotangent`` is always an array of the request's dtype.

    A shape-invalid program (one :func:`resverify.spec.ir.infer_shapes` rejects) has no output
    shape, so no cotangent can fit it; its cotangent is *derived*: pass ``cotangent=None``
    and the request holds :data:`NO_OUTPUT`'s empty array of shape ``(0,)``, which holds no
    value and is read by nobody (the spec's answer is a ``shape_mismatch`` before any
    gradient). Only None or that empty array is accepted for such a program, so each
    request has one form, and the wire format writes ``null`` for it losslessly.

    Why derive rather than give the invalid case its own type: every adapter answers a
    shape-invalid program in its shape check, before it reads a cotangent. One request type
    keeps ``Backend.run(request: Request)`` a single signature and lets every adapter read
    ``request.cotangent`` as an array with no type test; a second type would make each
    adapter branch on the request's type for a case it already handles.

    Forward mode: ``tangents``, when given, holds one tangent per input (same names, shapes
    and dtype as ``inputs``); the answer then carries the output tangent ``J·t`` in
    :attr:`Value.tangent` beside the output and the gradients. ``tangents=None`` (the default)
    is a reverse-mode-only request, the form every version-1 engine knows.

    Mixed precision: ``accumulate``, when given, declares the dtype the backend carries out
    its sums and dot products in before one rounding to ``dtype`` (``"float32"`` for torch's
    bfloat16 and float16 matmuls and reductions on CPU); the budget then charges that
    dtype's rounding for them (:meth:`resverify.spec.rounding.Ctx.summed`). None (the
    default) declares every operation done in ``dtype``.
    """

    program: Program
    inputs: Mapping[str, np.ndarray]
    dtype: str
    cotangent: np.ndarray
    tangents: Mapping[str, np.ndarray] | None
    accumulate: str | None

    def __init__(self, program: Program, inputs: Mapping[str, object], dtype: str,
                 cotangent: object | None,
                 tangents: Mapping[str, object] | None = None, *,
                 accumulate: str | None = None) -> None:
        storage_dtype(dtype)
        object.__setattr__(self, "accumulate", accumulation(dtype, accumulate))
        object.__setattr__(self, "program", program)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "inputs", _read_inputs(program, inputs, dtype))
        object.__setattr__(self, "cotangent", _read_cotangent(program, cotangent, dtype))
        object.__setattr__(self, "tangents", None if tangents is None else
                           _read_inputs(program, tangents, dtype, "tangent"))

    @property
    def forward_mode(self) -> bool:
        """Whether the request asks for the output tangent (it carries input tangents)."""
        return self.tangents is not None

    @property
    def shape_valid(self) -> bool:
        """Whether the program's shapes fit (else the cotangent is the derived empty one)."""
        return output_shape(self.program) is not None


def output_shape(program: Program) -> Shape | None:
    """The shape of ``program``'s output, or None when the program is shape-invalid."""
    try:
        return infer_shapes(program)[program.output]
    except ShapeMismatch:
        return None


def _read_inputs(program: Program, inputs: Mapping[str, object],
                 dtype: str, what: str = "input") -> dict[str, np.ndarray]:
    declared = {i.name: i.shape for i in program.inputs}
    if not isinstance(inputs, Mapping) or set(inputs) != set(declared):
        given = sorted(inputs) if isinstance(inputs, Mapping) else type(inputs).__name__
        raise InvalidRequest(
            f"request {what}s {given} do not match program inputs {sorted(declared)}")
    values = {}
    for name, shape in declared.items():
        array = as_values(inputs[name], dtype, f"{what} {name!r}")
        if array.shape != shape:
            raise InvalidRequest(
                f"{what} {name!r} has shape {list(array.shape)}, declared {list(shape)}")
        values[name] = array
    return values


def _read_cotangent(program: Program, cotangent: object | None, dtype: str) -> np.ndarray:
    out_shape = output_shape(program)
    if out_shape is None:
        given = None if cotangent is None else np.asarray(cotangent)
        if given is not None and given.shape != NO_OUTPUT.shape:
            raise InvalidRequest("a shape-invalid program's cotangent is derived: pass None "
                                 f"(got shape {list(given.shape)})")
        return as_values(NO_OUTPUT, dtype, "cotangent")
    if cotangent is None:
        raise InvalidRequest("a shape-valid program needs a cotangent for its output")
    cot = as_values(cotangent, dtype, "cotangent")
    if cot.shape != out_shape:
        raise InvalidRequest(f"cotangent has shape {list(cot.shape)}, output has {list(out_shape)}")
    return cot


@dataclass(frozen=True)
class Value:
    """A backend's answer to a shape-valid request: the output and every input's gradient,
    and the output tangent ``J·t`` when (and only when) the request carried tangents.

    Output and gradients are always required: a value is never partial. Whether the arrays
    have the request's shapes and dtype, and whether ``tangent`` is present exactly when the
    request asked for it, is :func:`check_form`'s question (a backend may answer garbage, and
    resverify reports it as a ``bad_result`` rather than failing to build the answer).
    """

    output: np.ndarray
    grads: Mapping[str, np.ndarray]
    tangent: np.ndarray | None = None


@dataclass(frozen=True)
class ResultError:
    """A typed failure: a rejected shape pair, an op the backend lacks, or anything else.

    ``shapes`` holds both operands' shapes for ``shape_mismatch``, and only for it.
    """

    kind: ErrorKind
    message: str
    shapes: tuple[Shape, Shape] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise BadResult(f"unknown error kind {self.kind!r}; known: {list(ERROR_KINDS)}")
        if (self.kind == "shape_mismatch") != (self.shapes is not None):
            raise BadResult("shape_mismatch errors, and only they, carry both shapes")

    @classmethod
    def mismatch(cls, exc: ShapeMismatch) -> ResultError:
        """The ``shape_mismatch`` answer to the :class:`ShapeMismatch` shape inference raised."""
        return cls("shape_mismatch", str(exc), (exc.left, exc.right))


Result: TypeAlias = Value | ResultError
"""What a backend's ``run`` returns: a :class:`Value` or a :class:`ResultError`. Match on it
(``match result: case Value(output, grads): ...``) or test ``isinstance(result, Value)``;
``isinstance(x, Result)`` tells whether ``x`` is either."""


def check_form(request: Request, value: Value) -> None:
    """Raise :class:`BadResult` unless ``value`` has the form ``request`` declares: the output
    and one gradient per input (no other key), plus the output tangent exactly when the
    request carried tangents, each a NumPy array of the declared shape in the storage dtype
    of its own dtype: the request's for the gradients, the output's for the output and the
    tangent (the request's, unless the program ends in a ``cast``).

    The message names the array and both sides, e.g. ``grads['w']: gives shape [2], spec
    declares [2, 2]``; callers add who answered and the request.
    """
    shape = output_shape(request.program)
    if shape is None:
        raise BadResult("gives a value, spec gives shape_mismatch (the shapes do not fit)")
    grads = value.grads
    if not isinstance(grads, Mapping):
        raise BadResult(f"grads: gives a {type(grads).__name__}, spec declares a mapping "
                        "from input names to arrays")
    if set(grads) != set(request.inputs):
        raise BadResult(f"grads: gives keys {sorted(grads)}, spec has {sorted(request.inputs)}")
    if request.forward_mode and value.tangent is None:
        raise BadResult("tangent: gives none, spec declares the output tangent "
                        "(the request carried input tangents)")
    if not request.forward_mode and value.tangent is not None:
        raise BadResult("tangent: gives one, spec declares none (the request carried no "
                        "input tangents)")
    ends = infer_dtypes(request.program, request.dtype)[request.program.output]
    declared = [("output", value.output, shape, ends)] + [
        (f"grads[{k!r}]", grads[k], request.inputs[k].shape, request.dtype)
        for k in sorted(grads)]
    if value.tangent is not None:
        declared.append(("tangent", value.tangent, shape, ends))
    for what, raw, expected, dtype in declared:
        want = storage_dtype(dtype)
        if not isinstance(raw, np.ndarray | np.generic):
            raise BadResult(f"{what}: gives a {type(raw).__name__}, spec declares an array")
        array = np.asarray(raw)
        if array.shape != tuple(expected):
            raise BadResult(f"{what}: gives shape {list(array.shape)}, "
                            f"spec declares {list(expected)}")
        if array.dtype != want:
            raise BadResult(f"{what}: gives dtype {array.dtype}, spec declares {want} "
                            f"(the storage dtype of {dtype})")
