"""resverify's specification layer.

Public API: the program IR (:class:`Program`, :class:`Input`, :class:`Node`, ``OPS``,
``DTYPES``, :func:`infer_shapes`), requests and results (:class:`Request`,
:class:`Result`, :class:`ResultError`), their lossless JSON (:func:`dumps`,
:func:`loads_request`, :func:`loads_result`) and the error types rooted at
:class:`ResverifyError`.
"""

from spec.codec import FORMAT_VERSION, dumps, loads_request, loads_result
from spec.errors import (
    InvalidProgram,
    ResverifyError,
    ShapeMismatch,
    Unsupported,
    UsageError,
)
from spec.ir import DTYPES, OPS, Input, Node, Program, infer_shapes
from spec.request import Request, Result, ResultError

__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "OPS",
    "Input",
    "InvalidProgram",
    "Node",
    "Program",
    "Request",
    "Result",
    "ResultError",
    "ResverifyError",
    "ShapeMismatch",
    "Unsupported",
    "UsageError",
    "dumps",
    "infer_shapes",
    "loads_request",
    "loads_result",
]
