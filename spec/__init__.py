"""resverify's specification layer.

Where an op is defined: :mod:`resverify.spec.ops`, one entry per op holding its arity,
shape rule, exact, error, budget, SymPy, reference NumPy and array-library rules.

Public API: the program IR (:class:`Program`, :class:`Input`, :class:`Node`, ``OPS``,
``DTYPES``, :func:`infer_shapes`), requests and results (:class:`Request`,
:data:`Result` = :class:`Value` | :class:`ResultError`), their lossless JSON (:func:`dumps`,
:func:`loads_request`, :func:`loads_result`; :func:`round_to_dtype` rounds an exact α or ε
once to a dtype, as the wire format rounds every number), the exact interpreter (:func:`evaluate`,
:func:`evaluate_exact`, :class:`ExactResult`), error budgets (:func:`error_budget`,
:class:`Budget`) and the error types rooted at :class:`ResverifyError` (the tree and
where each is raised: :mod:`resverify.spec.errors`), among them the
faults an adapter raises when its engine hangs, dies or answers garbage
(:class:`BackendFault`: :class:`BackendTimeout`, :class:`BackendCrash`, :class:`BadResult`).
The SymPy derivations live in ``resverify.spec.derive`` (imported on demand: SymPy is slow to load).
"""

from resverify.spec.budget import UNIT_ROUNDOFF, Budget, error_budget
from resverify.spec.codec import (
    FORMAT_VERSION,
    dumps,
    loads_request,
    loads_result,
    round_to_dtype,
)
from resverify.spec.errors import (
    BackendCrash,
    BackendFault,
    BackendTimeout,
    BadResult,
    InvalidDocument,
    InvalidInput,
    InvalidProgram,
    InvalidRequest,
    ResverifyError,
    ShapeMismatch,
    UsageError,
)
from resverify.spec.exact import (
    TANH_PRECISION_BITS,
    ExactResult,
    as_fractions,
    evaluate,
    evaluate_exact,
)
from resverify.spec.ir import DTYPES, OPS, Input, Node, Program, infer_shapes
from resverify.spec.request import Request, Result, ResultError, Value, check_form

__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "OPS",
    "TANH_PRECISION_BITS",
    "UNIT_ROUNDOFF",
    "BackendCrash",
    "BackendFault",
    "BackendTimeout",
    "BadResult",
    "Budget",
    "ExactResult",
    "Input",
    "InvalidDocument",
    "InvalidInput",
    "InvalidProgram",
    "InvalidRequest",
    "Node",
    "Program",
    "Request",
    "Result",
    "ResultError",
    "ResverifyError",
    "ShapeMismatch",
    "UsageError",
    "Value",
    "as_fractions",
    "check_form",
    "dumps",
    "error_budget",
    "evaluate",
    "evaluate_exact",
    "infer_shapes",
    "loads_request",
    "loads_result",
    "round_to_dtype",
]
