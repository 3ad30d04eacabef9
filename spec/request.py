"""Requests (program + values + dtype + cotangent) and results (values or a typed error)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from resverify.spec.errors import InvalidProgram, Shape, ShapeMismatch
from resverify.spec.ir import DTYPES, Program, infer_shapes

ErrorKind = Literal["shape_mismatch", "unsupported", "backend_error"]
ERROR_KINDS: tuple[str, ...] = ("shape_mismatch", "unsupported", "backend_error")


def storage_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that holds values of ``dtype`` exactly (bfloat16 lives in float32)."""
    if dtype not in DTYPES:
        raise InvalidProgram(f"unknown dtype {dtype!r}; known: {list(DTYPES)}")
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
            raise InvalidProgram(f"{where}: values are not representable in bfloat16")
    same = (out.astype(np.float64) == raw.astype(np.float64)) | (np.isnan(out) & np.isnan(raw))
    if not np.all(same):
        raise InvalidProgram(f"{where}: values are not exactly representable in {dtype}")
    out = np.array(out, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Request:
    """Everything needed to run a program once: the values of each input and the output cotangent.

    ``cotangent`` may be None only when the program is shape-invalid (the request then
    asks the backend to reject it).
    """

    program: Program
    inputs: Mapping[str, np.ndarray]
    dtype: str
    cotangent: np.ndarray | None

    def __post_init__(self) -> None:
        storage_dtype(self.dtype)
        declared = {i.name: i.shape for i in self.program.inputs}
        given = set(self.inputs)
        if given != set(declared):
            raise InvalidProgram(
                f"request inputs {sorted(given)} do not match program inputs {sorted(declared)}"
            )
        values = {}
        for name, shape in declared.items():
            array = as_values(self.inputs[name], self.dtype, f"input {name!r}")
            if array.shape != shape:
                raise InvalidProgram(
                    f"input {name!r} has shape {list(array.shape)}, declared {list(shape)}"
                )
            values[name] = array
        object.__setattr__(self, "inputs", values)
        try:
            out_shape: Shape | None = infer_shapes(self.program)[self.program.output]
        except ShapeMismatch:
            out_shape = None
        if self.cotangent is None:
            if out_shape is not None:
                raise InvalidProgram("a shape-valid program needs a cotangent for its output")
            return
        cot = as_values(self.cotangent, self.dtype, "cotangent")
        if out_shape is not None and cot.shape != out_shape:
            raise InvalidProgram(
                f"cotangent has shape {list(cot.shape)}, output has {list(out_shape)}"
            )
        object.__setattr__(self, "cotangent", cot)


@dataclass(frozen=True)
class ResultError:
    """A typed failure: a rejected shape pair, an op the backend lacks, or anything else."""

    kind: ErrorKind
    message: str
    shapes: tuple[Shape, Shape] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise InvalidProgram(f"unknown error kind {self.kind!r}; known: {list(ERROR_KINDS)}")
        if (self.kind == "shape_mismatch") != (self.shapes is not None):
            raise InvalidProgram("shape_mismatch errors, and only they, carry both shapes")


@dataclass(frozen=True)
class Result:
    """The output value and the gradient of every input, or a typed error."""

    output: np.ndarray | None = None
    grads: Mapping[str, np.ndarray] | None = None
    error: ResultError | None = None

    def __post_init__(self) -> None:
        if (self.error is None) == (self.output is None or self.grads is None):
            raise InvalidProgram("a result has either an output with grads, or an error")

    @classmethod
    def failure(cls, kind: ErrorKind, message: str,
                shapes: tuple[Shape, Shape] | None = None) -> Result:
        return cls(error=ResultError(kind, message, shapes))

    @classmethod
    def mismatch(cls, exc: ShapeMismatch) -> Result:
        return cls.failure("shape_mismatch", str(exc), (exc.left, exc.right))
