"""A case: a program with float64 values, turned into a request for any dtype on demand.

A case with ``tangents`` (one per input) becomes a forward-mode request: the answer then
carries the output tangent ``J·t`` beside the output and the gradients.

A case holds no dtype (the dtype is a pytest parameter), so one strategy serves every
dtype and seed fixtures can be pinned with ``@example(case=...)``. Its values are float64,
which holds every value of the four dtypes exactly: the strategies draw values in the
test's dtype (:func:`resverify.properties.strategies.drawing`), which the request then
takes over unchanged; a pinned value the dtype cannot hold is rounded by
:func:`round_to_dtype` when the request is made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from resverify.spec.ir import Node, Program
from resverify.spec.request import Request, storage_dtype

__all__ = ["Case"]


def numpy_dtype(dtype: str) -> np.dtype[Any]:
    """The NumPy dtype of ``dtype``: NumPy's own, or ml_dtypes' for bfloat16."""
    return np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def round_to_dtype(values: object, dtype: str) -> np.ndarray:
    """``values`` rounded to the nearest value of ``dtype`` (clamped to its finite range),
    by NumPy's cast (ml_dtypes' for bfloat16, which rounds float64 through float32), held in
    :func:`resverify.spec.request.storage_dtype`."""
    target = numpy_dtype(dtype)
    limit = float(ml_dtypes.finfo(target).max)
    clamped = np.clip(np.asarray(values, dtype=np.float64), -limit, limit)
    return np.asarray(clamped.astype(target).astype(storage_dtype(dtype)))


@dataclass(frozen=True)
class Case:
    """A program, float64 values for its inputs, the output cotangent (None if invalid) and,
    for forward mode, one tangent per input (None: a reverse-mode request)."""

    program: Program
    values: Mapping[str, np.ndarray]
    cotangent: np.ndarray | None
    tangents: Mapping[str, np.ndarray] | None = None

    def request(self, dtype: str) -> Request:
        """The request for ``dtype``, every value rounded to that dtype."""
        values = {k: round_to_dtype(v, dtype) for k, v in self.values.items()}
        cot = None if self.cotangent is None else round_to_dtype(self.cotangent, dtype)
        tangents = None if self.tangents is None else {
            k: round_to_dtype(v, dtype) for k, v in self.tangents.items()}
        return Request(self.program, values, dtype, cot, tangents)

    @classmethod
    def from_request(cls, request: Request) -> Case:
        """Pin an existing request (a seed fixture) as a case."""
        cot = request.cotangent
        return cls(request.program, _float64(request.inputs),
                   None if cot is None else np.asarray(cot, dtype=np.float64),
                   None if request.tangents is None else _float64(request.tangents))

    def with_tangents(self, **tangents: np.ndarray) -> Case:
        """The same case as a forward-mode one, with these tangents (one per input)."""
        return dataclasses.replace(self, tangents=_float64(tangents))

    def with_alpha(self, node_name: str, alpha: Fraction) -> Case:
        """The same case with the constant of scale node ``node_name`` replaced by ``alpha``."""
        nodes = tuple(dataclasses.replace(n, alpha=alpha) if n.name == node_name else n
                      for n in self.program.nodes)
        return dataclasses.replace(self, program=Program(self.program.inputs, nodes,
                                                         self.program.output))

    def with_values(self, **values: np.ndarray) -> Case:
        """The same case with some input values replaced."""
        return dataclasses.replace(self, values={**self.values, **values})

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints a failing example with this: the short repr, not every field."""
        printer.text(repr(self))

    def __repr__(self) -> str:
        parts = [f"{k}={_brief(v)}" for k, v in self.values.items()]
        cot = None if self.cotangent is None else _brief(self.cotangent)
        tangents = "" if self.tangents is None else "; tangents " + ", ".join(
            f"{k}={_brief(v)}" for k, v in self.tangents.items())
        return f"Case({self.program.describe()}; {', '.join(parts)}; cotangent={cot}{tangents})"


def _float64(arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def _brief(values: object, most: int = 64) -> str:
    """Every value of a small array; shape and first values of a larger one (the saved
    test vector holds them all)."""
    array = np.asarray(values)
    if array.size <= most:
        return repr(array.tolist())
    return f"<{array.size} values, shape {list(array.shape)}: {array.reshape(-1)[:4].tolist()}...>"


def node(name: str, op: str, *args: str, alpha: Fraction | None = None,
         eps: Fraction | None = None) -> Node:
    """Shorthand for building programs in strategies (``alpha``: scale's, ``eps``: a norm's)."""
    return Node(name, op, tuple(args), alpha, eps)
