"""A case: a program with float64 values, turned into a request for any dtype on demand.

Strategies draw cases without knowing the dtype (a pytest parameter), so one strategy
serves every dtype and seed fixtures can be pinned with ``@example(case=...)``. Values
are rounded to the dtype when the request is made (clamped to its finite range first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ir import Node, Program
from resverify.spec.request import Request, storage_dtype

__all__ = ["Case", "round_to_dtype"]

_BF16_MAX = float.fromhex("0x1.fep+127")


def round_to_dtype(values: object, dtype: str) -> np.ndarray:
    """``values`` rounded to the nearest value of ``dtype`` (clamped to its finite range)."""
    raw = np.asarray(values, dtype=np.float64)
    if dtype == "bfloat16":
        f32 = np.clip(raw, -_BF16_MAX, _BF16_MAX).astype(np.float32)
        bits = f32.view(np.uint32).astype(np.uint64)
        kept = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))
                ) & np.uint64(0xFFFF0000)
        return np.asarray(kept.astype(np.uint32).view(np.float32))
    limit = float(np.finfo(storage_dtype(dtype)).max)
    return np.asarray(np.clip(raw, -limit, limit).astype(storage_dtype(dtype)))


@dataclass(frozen=True)
class Case:
    """A program, float64 values for its inputs, and the output cotangent (None if invalid)."""

    program: Program
    values: Mapping[str, np.ndarray]
    cotangent: np.ndarray | None

    def request(self, dtype: str) -> Request:
        """The request for ``dtype``, every value rounded to that dtype."""
        values = {k: round_to_dtype(v, dtype) for k, v in self.values.items()}
        cot = None if self.cotangent is None else round_to_dtype(self.cotangent, dtype)
        return Request(self.program, values, dtype, cot)

    @classmethod
    def from_request(cls, request: Request) -> Case:
        """Pin an existing request (a seed fixture) as a case."""
        cot = request.cotangent
        return cls(request.program,
                   {k: np.asarray(v, dtype=np.float64) for k, v in request.inputs.items()},
                   None if cot is None else np.asarray(cot, dtype=np.float64))

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
        return f"Case({self.program.describe()}; {', '.join(parts)}; cotangent={cot})"


def _brief(values: object, most: int = 64) -> str:
    """Every value of a small array; shape and first values of a larger one (the saved
    test vector holds them all)."""
    array = np.asarray(values)
    if array.size <= most:
        return repr(array.tolist())
    return f"<{array.size} values, shape {list(array.shape)}: {array.reshape(-1)[:4].tolist()}...>"


def node(name: str, op: str, *args: str, alpha: Fraction | None = None) -> Node:
    """Shorthand for building programs in strategies."""
    return Node(name, op, tuple(args), alpha)
