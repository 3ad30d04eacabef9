"""The claim catalog: every checkable fact of the seed documents, with the check that computes it.

Why: the seeds state facts (fixture values, Jacobians, depth and variance laws) that the
project was built from. Each is kept here as a :class:`Claim` with a stable id (``S01`` …
``S30`` of ``SEEDS.md``; ``S07a``/``S07b`` and ``S17a``/``S17b`` where one item holds a
settled fact and an open one), the seed file and section it comes from, a statement in our
own words, the exact expected value, and a zero-argument check that recomputes it with the
exact interpreter (:mod:`spec.exact`) or the symbolic model (:mod:`spec.symbolic`).

Claims about an implementation also carry a ``backend`` check that takes a backend's
``run(request) -> Result``; :mod:`spec` imports no backend, so ``reports`` supplies it.
Observations are written once against an *interpreter* (request -> flat :class:`Run`), so
the exact and the backend sides compute the same thing. Claims the seeds get subtly wrong
or leave open carry a ``note`` with the project's decision.

Section headings are quoted in the seed's own language (``ru`` or ``zh``) with our English
translation beside them.

Public API: :data:`CLAIMS`, :data:`SEED_FILES`, :class:`Claim`, :class:`Section`,
:class:`ClaimOutcome`, :func:`check_claim`, :func:`outcome_dict`, :func:`jsonable`,
:class:`BackendSkip`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from spec import exact, fixtures
from spec import symbolic as sym
from spec.budget import error_budget
from spec.errors import Shape
from spec.ir import Input, Node, Program
from spec.request import Request, Result

__all__ = [
    "CLAIMS",
    "SEED_FILES",
    "BackendSkip",
    "Claim",
    "ClaimOutcome",
    "Run",
    "Section",
    "check_claim",
    "jsonable",
    "outcome_dict",
]

COURSE = "000_0ed21ebc8dc36f9a.txt"
LECTURE = "001_47336aab8f275adc.txt"
NOTES = "004_d56be5c065187336.txt"
SEED_FILES = (COURSE, LECTURE, NOTES)

Runner = Callable[[Request], Result]


class BackendSkip(Exception):
    """A backend does not claim what a check needs (an op or dtype): skipped, not failed."""


@dataclass(frozen=True)
class Section:
    """Where a claim comes from: the seed file, its heading as written, and our translation."""

    file: str
    heading: str
    english: str
    language: str


@dataclass(frozen=True)
class Claim:
    """One checkable fact: ``check()`` must return ``expected``; ``backend(run)`` likewise."""

    id: str
    source: Section
    statement: str
    expected: object
    check: Callable[[], object]
    backend: Callable[[Runner], object] | None = None
    backend_expected: object = None
    note: str = ""

    @property
    def expected_from_backend(self) -> object:
        return self.expected if self.backend_expected is None else self.backend_expected


@dataclass(frozen=True)
class ClaimOutcome:
    """What a check found: the observed value(s) and the verdict."""

    claim: Claim
    observed: object
    status: str
    backend_observed: object = None
    backend_status: str | None = None


# --- running requests: one flat view for the exact interpreter and for backends ------------

@dataclass(frozen=True)
class Run:
    """A result flattened to exact Fractions (row-major), or the error's kind and shapes."""

    output: tuple[Fraction, ...] = ()
    shape: Shape = ()
    grads: Mapping[str, tuple[Fraction, ...]] | None = None
    error: str | None = None
    error_shapes: tuple[Shape, ...] = ()
    message: str = ""


Interpreter = Callable[[Request], Run]


def _flat(array: object) -> tuple[Fraction, ...]:
    return tuple(Fraction(v) if isinstance(v, Fraction) else Fraction(float(v))
                 for v in np.asarray(array).reshape(-1).tolist())


def _run_of(output: object, grads: Mapping[str, object] | None, error: Any) -> Run:
    if error is not None:
        return Run(error=error.kind, error_shapes=tuple(error.shapes or ()), message=error.message)
    flat_grads = {k: _flat(v) for k, v in grads.items()} if grads is not None else None
    return Run(_flat(output), tuple(np.asarray(output).shape), flat_grads)


def exact_run(request: Request) -> Run:
    """Interpret ``request`` with the exact interpreter (every claim here is rational)."""
    result = exact.evaluate(request)
    if result.slack != 0:
        raise ArithmeticError(f"claims need exact results, got slack {result.slack}")
    return _run_of(result.output, result.grads, result.error)


def backend_interpreter(run: Runner) -> Interpreter:
    """Wrap a backend's ``run``; an ``unsupported`` answer becomes :class:`BackendSkip`."""

    def interpret(request: Request) -> Run:
        result = run(request)
        if result.error is not None and result.error.kind == "unsupported":
            raise BackendSkip(result.error.message)
        return _run_of(result.output, result.grads, result.error)

    return interpret


def _both(observe: Callable[[Interpreter], object]
          ) -> tuple[Callable[[], object], Callable[[Runner], object]]:
    """The exact check and the backend check of one observation."""
    return (lambda: observe(exact_run)), (lambda run: observe(backend_interpreter(run)))


# --- small builders -----------------------------------------------------------------------

def _program(shapes: Mapping[str, Shape], nodes: list[tuple[Any, ...]], output: str) -> Program:
    return Program(tuple(Input(n, s) for n, s in shapes.items()),
                   tuple(Node(*spec) for spec in nodes), output)


def _request(program: Program, inputs: Mapping[str, object], cotangent: object | None,
             dtype: str = "float64") -> Request:
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    cot = None if cotangent is None else np.asarray(cotangent, dtype=np.float64)
    return Request(program, arrays, dtype, cot)


def _jacobian(interp: Interpreter, request_for_row: Callable[[int], Request], n: int
              ) -> tuple[tuple[Fraction, ...], ...]:
    """Rows of a Jacobian, one unit cotangent each: ``x̄ = Jᵀ e_i`` is row i of J."""
    rows = []
    for i in range(n):
        grads = interp(request_for_row(i)).grads
        assert grads is not None
        rows.append(grads["x"])
    return tuple(rows)


def _unit(i: int, n: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(n)]


def _residual_pair(x_shape: Shape, f_shape: Shape, op: str = "residual_add") -> Program:
    """``op(x, f)`` with both operands given as inputs: the merge alone."""
    return _program({"x": x_shape, "f": f_shape}, [("y", op, ("x", "f"))], "y")


def _scalar_stack(depth: int, slope: Fraction) -> Program:
    """``depth`` scalar residual blocks ``x ← x + a·x`` (the notes' ``F(x) = a·x``)."""
    nodes: list[tuple[Any, ...]] = []
    prev = "x"
    for layer in range(depth):
        nodes += [(f"s{layer}", "scale", (prev,), slope),
                  (f"h{layer}", "residual_add", (prev, f"s{layer}"))]
        prev = f"h{layer}"
    return _program({"x": (1,)}, nodes, prev)


def _relu_block(gain: Fraction, residual: bool) -> Program:
    nodes: list[tuple[Any, ...]] = [("r", "relu", ("x",)), ("f", "scale", ("r",), gain)]
    if residual:
        nodes.append(("y", "residual_add", ("x", "f")))
    return _program({"x": (2,)}, nodes, "y" if residual else "f")


def _is_zero(matrix: sp.Matrix) -> bool:
    return all(sp.simplify(entry) == 0 for entry in matrix)


# --- 000: the course chapter ----------------------------------------------------------------

_PREDICT = Section(COURSE, "Предскажите, что сохраняет тождественный путь",
                   "Predict what the identity path preserves", "ru")
_ADD_UPDATE = Section(COURSE, "Добавьте обучаемое обновление к неизменённому потоку",
                      "Add a learned update to the unchanged stream", "ru")
_ROLES = Section(COURSE, "Не смешивайте роли потока и обновления",
                 "Do not mix up the roles of the stream and the update", "ru")
_REJECT = Section(COURSE, "Перед сложением отклоните несовпадающие формы",
                  "Reject mismatched shapes before adding", "ru")
_CHECK_PREDICTIONS = Section(COURSE, "Проверить предсказания", "Check the predictions", "ru")
_COMPARE = Section(COURSE, "Сравните повторяющиеся обычные и остаточные преобразования",
                   "Compare repeated plain and residual transformations", "ru")
_FULL_REPORT = Section(COURSE, "Сформируйте полный отчёт по главе 24",
                       "Build the full report of chapter 24", "ru")
_PRINT_REPORT = Section(COURSE, "Выведите детерминированный отчёт",
                        "Print the deterministic report", "ru")


def _s01(interp: Interpreter) -> object:
    request = _request(_residual_pair((2,), (2,)), {"x": [2.0, -1.0], "f": [-1.0, -2.25]},
                       [1.0, 1.0])
    run = interp(request)
    return {"output": run.output, "shape": run.shape}


_MISMATCH_CASE = ({"x": np.ones((2, 2)), "f": np.array([1.0, 2.0])}, (2, 2), (2,))
_EQUAL_SHAPES: tuple[Shape, ...] = ((), (0, 2), (2, 3, 1))


def _equal_shapes_accepted(interp: Interpreter) -> tuple[Shape, ...]:
    accepted = []
    for shape in _EQUAL_SHAPES:
        values = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
        run = interp(_request(_residual_pair(shape, shape), {"x": values, "f": values},
                              np.ones(shape)))
        if run.error is None and run.shape == shape:
            accepted.append(shape)
    return tuple(accepted)


def _s02(interp: Interpreter) -> dict[str, object]:
    inputs, left, right = _MISMATCH_CASE
    added = interp(_request(_residual_pair(left, right, "add"), inputs, np.ones(left)))
    refused = interp(_request(_residual_pair(left, right), inputs, None))
    names_both = str(list(left)) in refused.message and str(list(right)) in refused.message
    return {"add_shape": added.shape, "residual_error": refused.error,
            "error_shapes": refused.error_shapes, "message_names_both": names_both,
            "equal_shapes_accepted": _equal_shapes_accepted(interp)}


def _s02_backend(run: Runner) -> dict[str, object]:
    """As the exact check, plus: a refused merge leaves inputs and later results unchanged."""
    observed = _s02(backend_interpreter(run))
    valid = fixtures.linear_block_request()
    before = run(valid)
    inputs, left, right = _MISMATCH_CASE
    mutable = {k: np.array(v, copy=True) for k, v in inputs.items()}
    run(_request(_residual_pair(left, right), mutable, None))
    after = run(valid)
    same = _same_bits(before, after) and all(
        np.array_equal(mutable[k], v) for k, v in inputs.items())
    return {**observed, "unchanged_after_rejection": same}


def _same_bits(first: Result, second: Result) -> bool:
    def blob(result: Result) -> bytes:
        parts = [np.asarray(result.output).tobytes()]
        parts += [np.asarray(v).tobytes() for _, v in sorted((result.grads or {}).items())]
        return b"".join(parts)

    return first.error is None and second.error is None and blob(first) == blob(second)


def _s03(interp: Interpreter) -> dict[str, object]:
    law = _is_zero(sym.vjp_law_difference(sym.symbolic_branch(2), sp.Integer(1)))
    program = _program({"x": (1,), "w": (1, 1)},
                       [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f"))], "y")

    def grad(weight: float) -> Fraction:
        grads = interp(_request(program, {"x": [2.0], "w": [[weight]]}, [1.0])).grads
        assert grads is not None
        return grads["x"][0]

    return {"law_holds": law, "reinforce w=1": grad(1.0), "cancel w=-1": grad(-1.0),
            "amplify w=-3": grad(-3.0)}


def _alpha_block(alpha: Fraction) -> Program:
    return _program({"x": (2,), "w": (2, 2)},
                    [("f", "linear", ("x", "w")), ("s", "scale", ("f",), alpha),
                     ("y", "residual_add", ("x", "s"))], "y")


def _s04(interp: Interpreter) -> dict[str, object]:
    values = {"x": fixtures.SEED_X, "w": fixtures.SEED_W}
    off = interp(_request(_alpha_block(Fraction(0)), values, fixtures.SEED_COT))
    on = interp(_request(_alpha_block(Fraction(1)), values, fixtures.SEED_COT))
    assert off.grads is not None
    return {"alpha=0 output": off.output, "alpha=0 grad x": off.grads["x"],
            "alpha=1 output": on.output, "gradient names": tuple(sorted(off.grads))}


def _s05(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.linear_block_request())
    mean = sum(run.output, Fraction(0)) / len(run.output)
    return {"output_shape": run.shape, "output_mean": mean,
            "output_variance": sym.sample_variance(run.output)}


def _s06(interp: Interpreter) -> dict[str, object]:
    full = interp(fixtures.linear_block_request())
    identity = interp(_request(_program({"x": (2,)}, [], "x"), {"x": fixtures.SEED_X},
                               fixtures.SEED_COT))
    branch_only = _program({"x": (2,), "w": (2, 2)}, [("f", "linear", ("x", "w"))], "f")
    branch = interp(_request(branch_only, {"x": fixtures.SEED_X, "w": fixtures.SEED_W},
                             fixtures.SEED_COT))
    assert full.grads is not None and identity.grads is not None and branch.grads is not None
    return {"branch output": branch.output, "identity part": identity.grads["x"],
            "branch part": branch.grads["x"], "grad x": full.grads["x"],
            "grad w": full.grads["w"]}


def _zero_branch_everywhere() -> bool:
    branch = sym.linear_branch(2)
    zero = dict.fromkeys(sym.linear_weights(2), 0)
    return bool(branch.values.subs(zero) == sp.zeros(2, 1))


def _s07a(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.linear_block_request(w=np.zeros((2, 2))))
    assert run.grads is not None
    return {"output": run.output, "grad x": run.grads["x"], "grad w": run.grads["w"]}


def _s07a_exact() -> dict[str, object]:
    return {"branch zero for every x": _zero_branch_everywhere(), **_s07a(exact_run)}


def _signed_zero_request() -> Request:
    return _request(_residual_pair((2,), (2,)), {"x": [-0.0, -1.0], "f": [0.0, 0.0]},
                    [1.0, 1.0])


def _s07b_exact() -> bool:
    request = _signed_zero_request()
    return exact_run(request).output == _flat(request.inputs["x"])


def _s07b_backend(run: Runner) -> dict[str, bool]:
    request = _signed_zero_request()
    result = run(request)
    if result.error is not None:
        raise BackendSkip(result.error.message)
    out, x = np.asarray(result.output), np.asarray(request.inputs["x"])
    return {"equal as values": bool(np.array_equal(out, x)),
            "equal bitwise": out.tobytes() == x.tobytes()}


def _s08(interp: Interpreter) -> dict[str, object]:
    branch_only = _program({"x": (2,), "w": (2, 2)}, [("f", "linear", ("x", "w"))], "f")
    run = interp(_request(branch_only, {"x": [1.0, -1.0], "w": [[1.0, 1.0], [1.0, 1.0]]},
                          [1.0, 1.0]))
    assert run.grads is not None
    return {"F(x)": run.output, "J_F(x)^T ybar": run.grads["x"]}


_GRADCHECK_STEP = 1e-6
_GRADCHECK_TOLERANCE = 2e-6


def _objective(x: list[float], w: list[list[float]]) -> float:
    """``Σ_i (x + xW)_i²`` written directly, independent of every interpreter."""
    y = [x[j] + sum(x[i] * w[i][j] for i in range(2)) for j in range(2)]
    return sum(v * v for v in y)


def _central_differences() -> list[float]:
    x = [float(v) for v in fixtures.SEED_X]
    w = [[float(v) for v in row] for row in fixtures.SEED_W]
    slopes = []
    for row, k in [(x, 0), (x, 1), (w[0], 0), (w[0], 1), (w[1], 0), (w[1], 1)]:
        keep = row[k]
        row[k] = keep + _GRADCHECK_STEP
        up = _objective(x, w)
        row[k] = keep - _GRADCHECK_STEP
        down = _objective(x, w)
        row[k] = keep
        slopes.append((up - down) / (2 * _GRADCHECK_STEP))
    return slopes


def _s09(interp: Interpreter) -> dict[str, object]:
    program = _program({"x": (2,), "w": (2, 2)},
                       [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f")),
                        ("q", "mul", ("y", "y")), ("s", "sum", ("q",))], "s")
    grads = interp(_request(program, {"x": fixtures.SEED_X, "w": fixtures.SEED_W}, 1.0)).grads
    assert grads is not None
    analytic = [float(v) for v in grads["x"] + grads["w"]]
    numeric = _central_differences()
    passed = all(abs(a - b) <= _GRADCHECK_TOLERANCE
                 for a, b in zip(analytic, numeric, strict=True))
    return {"checks": len(numeric), "passed": passed}


def _s10(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.shared_operand_request())
    assert run.grads is not None
    return {"output": run.output, "grad x": run.grads["x"]}


def _s11(interp: Interpreter) -> dict[str, object]:
    observed: dict[str, object] = {}
    for kind in ("plain", "residual"):
        runs = [interp(fixtures.stack_request(d, kind == "residual")) for d in range(5)]
        deepest = runs[-1].grads
        assert deepest is not None
        observed[f"{kind} values"] = tuple(r.output for r in runs)
        observed[f"{kind} grad x"] = deepest["x"]
        observed[f"{kind} weight grads nonzero"] = all(
            any(v != 0 for v in deepest[f"w{i}"]) for i in range(4))
    return observed


def _s12_exact() -> bool:
    cases = fixtures.seed_cases().values()
    return all(exact_run(request) == exact_run(request) for request, _, _ in cases)


def _s12_backend(run: Runner) -> bool:
    cases = fixtures.seed_cases().values()
    return all(_same_bits(run(request), run(request)) for request, _, _ in cases)


def _s13(interp: Interpreter) -> dict[str, object]:
    """A residual stack whose first branch cancels its input: every gradient is exactly 0."""
    values: dict[str, object] = {"x": fixtures.SEED_X}
    values.update({f"w{i}": [[-1.0, 0.0], [0.0, -1.0]] for i in range(4)})
    run = interp(_request(fixtures.stack_program(4, True), values, fixtures.SEED_COT))
    assert run.grads is not None
    return {"grad x": run.grads["x"],
            "every weight grad zero": all(v == 0 for i in range(4) for v in run.grads[f"w{i}"])}


def _report_lines(interp: Interpreter) -> tuple[str, ...]:
    """A key=value report of the S06 fixture, each value an exact fraction."""
    run = interp(fixtures.linear_block_request())
    assert run.grads is not None
    items = [("output", run.output)] + [(f"grad.{k}", v) for k, v in sorted(run.grads.items())]
    return tuple(f"{key}={' '.join(str(v) for v in values)}" for key, values in items)


_GOLDEN_REPORT = ("output=1 -13/4", "grad.w=2 2 -1 -1", "grad.x=1/2 13/4")


def _s14(interp: Interpreter) -> object:
    first, second = _report_lines(interp), _report_lines(interp)
    if first != second:
        return {"differs between runs": (first, second)}
    return {"lines": first, "sha256": hashlib.sha256("\n".join(first).encode()).hexdigest()}


# --- 001: the lecture page --------------------------------------------------------------------

_KEEP_PATH = Section(LECTURE, "Учить поправку и сохранять прямой путь",
                     "Learn the correction and keep the straight path", "ru")
_EXPERIMENT = Section(LECTURE, "Эксперимент", "Experiment", "ru")


def _s15(interp: Interpreter) -> dict[str, object]:
    zero = sym.Branch("zero", sym.symbolic_branch(2).xs, sp.zeros(2, 1))
    identity = (sym.block_output(zero, sp.Integer(1)) == sp.Matrix(zero.xs)
                and sym.block_jacobian(zero, sp.Integer(1)) == sp.eye(2))
    pair = {"x": [1.0, 2.0], "f": [3.0]}
    broadcast = interp(_request(_residual_pair((2,), (1,)), pair, None))
    projected = _program({"x": (3,), "p": (3, 2), "w": (3, 2)},
                         [("i", "linear", ("x", "p")), ("f", "linear", ("x", "w")),
                          ("y", "residual_add", ("i", "f"))], "y")
    ones = np.ones((3, 2))
    run = interp(_request(projected, {"x": [1.0, 2.0, 3.0], "p": ones, "w": ones}, [1.0, 1.0]))
    return {"zero branch is identity": identity,
            "broadcastable pair refused": broadcast.error == "shape_mismatch",
            "explicit projection accepted": run.error is None}


def _s16() -> dict[str, bool]:
    branch, one = sym.symbolic_branch(3), sp.Integer(1)
    return {"J_y = I + J_F": _is_zero(sym.jacobian_law_difference(branch, one)),
            "grad_x = (I + J_F)^T grad_y": _is_zero(sym.vjp_law_difference(branch, one))}


def _relu_request(gain: Fraction, residual: bool, x: list[float], row: int) -> Request:
    """The relu block at ``x`` with the unit cotangent of output ``row``."""
    return _request(_relu_block(gain, residual), {"x": x}, _unit(row, 2))


def _s17a(interp: Interpreter) -> dict[str, object]:
    half, x = Fraction(1, 2), [-1.0, 2.0]
    observed: dict[str, object] = {}
    for kind, residual in (("residual", True), ("plain", False)):
        observed[f"{kind} output"] = interp(_relu_request(half, residual, x, 0)).output
        observed[f"{kind} jacobian"] = _jacobian(
            interp, functools.partial(_relu_request, half, residual, x), 2)
    return observed


def _s17a_exact() -> dict[str, object]:
    branch = sym.relu_branch(2, sp.Rational(1, 2))
    point = dict(zip(branch.xs, (-1, 2), strict=True))
    symbolic = sym.block_jacobian(branch, sp.Integer(1)).subs(point)
    return {**_s17a(exact_run), "symbolic residual jacobian":
            tuple(tuple(Fraction(str(v)) for v in symbolic.row(i)) for i in range(2))}


def _s17b(interp: Interpreter) -> dict[str, object]:
    row = interp(_relu_request(Fraction(1, 2), True, [0.0, 2.0], 0)).grads
    assert row is not None
    return {"residual jacobian row 0 at x=[0,2]": row["x"]}


def _s17b_exact() -> dict[str, object]:
    v = sp.Symbol("v", real=True)
    return {"relu'(0)": Fraction(str(sp.diff(sym.relu(v), v).subs(v, 0))), **_s17b(exact_run)}


def _s18(interp: Interpreter) -> dict[str, object]:
    return {"jacobian g=-1": _jacobian(
        interp, lambda i: _relu_request(Fraction(-1), True, [-1.0, 2.0], i), 2)}


class _CountingFraction(Fraction):
    """A Fraction that counts the additions it takes part in (as left operand)."""

    additions = 0

    def __add__(self, other: Any) -> Fraction:  # type: ignore[override]
        _CountingFraction.additions += 1
        return Fraction(self) + other


def _s19() -> dict[str, object]:
    plain, residual = _relu_block(Fraction(1, 2), False), _relu_block(Fraction(1, 2), True)
    added_inputs = tuple(sorted(set(residual.input_names) - set(plain.input_names)))
    added_ops = tuple(sorted(n.op for n in residual.nodes if n not in plain.nodes))
    width = 5
    values = [_CountingFraction(i) for i in range(width)]
    _CountingFraction.additions = 0
    exact.evaluate_exact(_residual_pair((width,), (width,)), {"x": values, "f": values}, None)
    return {"added inputs": added_inputs, "added ops": added_ops,
            "additions per component": Fraction(_CountingFraction.additions, width)}


def _s20(interp: Interpreter) -> dict[str, object]:
    return {"F": interp(_relu_request(Fraction(1, 2), False, [-1.0, 2.0], 0)).output,
            "y": interp(_relu_request(Fraction(1, 2), True, [-1.0, 2.0], 0)).output}


# --- 004: the study notes ---------------------------------------------------------------------

_COMPOSITE = Section(NOTES, "从复合函数理解残差连接",
                     "Understanding residual connections as composite functions", "zh")
_RECURRENCE = Section(NOTES, "先写递推，再展开公式",
                      "Write the recurrence first, then unroll the formula", "zh")
_LINEAR_CHECK = Section(NOTES, "用一个线性函数检查梯度",
                        "Checking the gradient with a linear function", "zh")
_VARIANCE = Section(NOTES, "残差流的方差为什么会增长",
                    "Why the variance of the residual stream grows", "zh")
_IMPLEMENTATION = Section(NOTES, "实现时应该检查什么",
                          "What to check in an implementation", "zh")
_PYTORCH = Section(NOTES, "展开 PyTorch 示例", "Expand the PyTorch example", "zh")


def _chain(residual: bool, depth: int = 3) -> bool:
    """``d/dx₀`` of a composition of blocks is the product of each block's local derivative,
    ``1 + F_l'(x_l)`` (residual) or ``F_l'(x_l)`` (plain), each taken at its own state."""
    x0, t = sp.Symbol("x_0", real=True), sp.Symbol("t", real=True)
    state: sp.Expr = x0
    factors = []
    for layer in range(depth):
        f = sp.Function(f"F{layer}")
        factors.append((1 if residual else 0) + sp.diff(f(t), t).subs(t, state))
        state = state + f(state) if residual else f(state)
    return bool(sp.simplify(sp.diff(state, x0) - sp.Mul(*factors)) == 0)


def _s21() -> dict[str, bool]:
    branch = sym.symbolic_branch(2)
    module = _is_zero(sym.jacobian_law_difference(branch, sp.Integer(1)))
    return {"residual module J = I + J_F": module,
            "plain chain is product of J_F": _chain(False),
            "residual chain is product of (I + J_F)": _chain(True)}


def _s22() -> dict[str, bool]:
    return {"symbolic L": sym.unrolled_sum_induction().holds,
            "L = 1..5": all(sym.unrolled_sum_difference(d) == 0 for d in range(1, 6))}


def _scalar_grad(interp: Interpreter, depth: int, slope: Fraction) -> Fraction:
    grads = interp(_request(_scalar_stack(depth, slope), {"x": [1.0]}, [1.0])).grads
    assert grads is not None
    return grads["x"][0]


def _s23(interp: Interpreter) -> dict[str, object]:
    return {f"a={a}": _scalar_grad(interp, 1, a)
            for a in (Fraction(-1, 2), Fraction(1), Fraction(-1))}


def _s24() -> dict[str, object]:
    ref = sym.refute_geometric_sum()
    return {"(1+a)^L for symbolic L": sym.depth_induction(True).holds,
            "binomial expansion for symbolic L": sym.binomial_induction().holds,
            "expansion L=3": str(sym.expansion(3)),
            "1+a+...+a^L first differs": {"L": ref.depth, "a": ref.slope,
                                          "(1+a)^L": ref.residual, "sum": ref.geometric},
            "expansion checked for L=1..1000": sym.expansion_sweep(1000) is None}


def _s25(interp: Interpreter) -> dict[str, object]:
    return {f"a={a}": _scalar_grad(interp, 3, a) for a in (Fraction(-1, 2), Fraction(1))}


_SAMPLE_SEED = 20240824


def _s26() -> dict[str, object]:
    variance = sym.noise_variance(100)
    sd = Fraction(str(sp.sqrt(sp.Rational(variance))))
    draws = np.random.default_rng(_SAMPLE_SEED).standard_normal((100, 768)).sum(axis=0)
    sample_sd = float(np.std(draws))
    standard_error = float(sd) / np.sqrt(2 * 768)
    return {"variance": variance, "sd": sd, "sample sd exactly 10": sample_sd == 10.0,
            "sample sd within 4 standard errors": bool(abs(sample_sd - 10) < 4 * standard_error)}


def _s27() -> dict[str, object]:
    scale = Fraction(str(1 / sp.sqrt(100)))
    return {"scale": scale, "variance": sym.noise_variance(100, scale=scale),
            "rescaled variance, symbolic L": str(sym.rescaled_variance())}


def _s28() -> dict[str, object]:
    gap, cov = sym.variance_identity()
    rng = np.random.default_rng(_SAMPLE_SEED)
    xs = [Fraction(int(v), 8) for v in rng.integers(-40, 40, size=64)]
    fs = [Fraction(3, 5) * x + Fraction(int(v), 4) for x, v in
          zip(xs, rng.integers(-9, 9, size=64), strict=True)]
    return {"identity gap": str(gap), "Cov(X, F) for F = cX + Z": str(cov),
            "sample identity gap (rationals)": sym.sample_identity_gap(xs, fs),
            "sample covariance nonzero": sym.sample_covariance(xs, fs) != 0}


def _centered(name: str, source: str) -> list[tuple[Any, ...]]:
    """``v − mean(v)`` over 2 components: a rational stand-in for a normalization layer."""
    return [(f"{name}_s", "sum", (source,)), (f"{name}_m", "scale", (f"{name}_s",),
                                               Fraction(-1, 2)),
            (name, "add", (source, f"{name}_m"))]


def _s29(interp: Interpreter) -> dict[str, object]:
    wide = _program({"x": (3,), "w": (3, 2)},
                    [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f"))], "y")
    refused = interp(_request(wide, {"x": [1.0, 2.0, 3.0], "w": np.ones((3, 2))}, None))
    shapes = {"x": (2,), "w": (2, 2)}
    pre = _program(shapes, [*_centered("n", "x"), ("f", "linear", ("n", "w")),
                            ("y", "residual_add", ("x", "f"))], "y")
    post = _program(shapes, [("f", "linear", ("x", "w")), ("r", "residual_add", ("x", "f")),
                             *_centered("y", "r")], "y")
    values = {"x": fixtures.SEED_X, "w": fixtures.SEED_W}
    return {"width change refused": refused.error, "refused shapes": refused.error_shapes,
            "normalize branch input": interp(_request(pre, values, [1.0, 1.0])).output,
            "normalize after the sum": interp(_request(post, values, [1.0, 1.0])).output}


_U32 = Fraction(1, 2**24)
_TENTH = Fraction(1, 10)


def _float32_stack(slope: Fraction) -> Request:
    return _request(_scalar_stack(3, slope), {"x": [1.0]}, [1.0], "float32")


def _within_budget(request: Request, output: object, grads: Mapping[str, object]) -> bool:
    """Inside the project's float32 error budget (:mod:`spec.budget`) around the exact result."""
    reference = exact.evaluate(request)
    arrays = {k: np.asarray(v) for k, v in grads.items()}
    return error_budget(request, exact=reference).allows(reference, np.asarray(output), arrays)


def _s30_exact() -> dict[str, object]:
    rounded = sym.rounded_depth_product(0.1, 3, "float32")
    exact_value = _scalar_grad(exact_run, 3, _TENTH)
    as_array = np.array([rounded], dtype=np.float32)
    gap = abs(Fraction(rounded) - exact_value)
    return {"exact a=1/10": exact_value, "float32 a=0.1": rounded,
            "float32 equals exact": Fraction(rounded) == exact_value,
            "float32 within budget": _within_budget(_float32_stack(_TENTH), as_array,
                                                    {"x": as_array}),
            "float32 within γ_9·(1+a)^3": gap <= sym.depth_product_bound(_TENTH, 3, _U32),
            "float32 exact at a=-1/2 and a=1": all(
                Fraction(sym.rounded_depth_product(a, 3, "float32")) == (1 + Fraction(a)) ** 3
                for a in (-0.5, 1.0))}


def _s30_backend(run: Runner) -> dict[str, object]:
    request = _float32_stack(_TENTH)
    result = run(request)
    if result.error is not None and result.error.kind == "unsupported":
        raise BackendSkip(result.error.message)
    if result.error is not None or result.grads is None:
        raise ArithmeticError(f"the backend failed the float32 stack: {result.error}")
    interp = backend_interpreter(run)
    got = _flat(result.grads["x"])[0]
    return {"float32 equals exact": got == (1 + _TENTH) ** 3,
            "float32 within budget": _within_budget(request, result.output, result.grads),
            "float32 exact at a=-1/2 and a=1": all(
                _grad_x(interp(_float32_stack(a))) == (1 + a) ** 3
                for a in (Fraction(-1, 2), Fraction(1)))}


def _grad_x(run: Run) -> Fraction:
    assert run.grads is not None
    return run.grads["x"][0]


# --- the catalog ------------------------------------------------------------------------------

def _f(text: str) -> Fraction:
    return Fraction(text)


def _v(*texts: str) -> tuple[Fraction, ...]:
    return tuple(Fraction(t) for t in texts)


_S11_PLAIN = (_v("2", "-1"), _v("-1/2", "1/4"), _v("1/8", "-1/16"), _v("-1/32", "1/64"),
              _v("1/128", "-1/256"))
_S11_RESIDUAL = (_v("2", "-1"), _v("3/2", "-3/4"), _v("9/8", "-9/16"), _v("27/32", "-27/64"),
                 _v("81/128", "-81/256"))


def _claim(id_: str, source: Section, statement: str, expected: object,
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


def _catalog() -> tuple[Claim, ...]:
    return (*_course_claims(), *_lecture_claims(), *_notes_claims())


def _course_claims() -> tuple[Claim, ...]:
    equal_shapes = _EQUAL_SHAPES
    s02 = {"add_shape": (2, 2), "residual_error": "shape_mismatch",
           "error_shapes": ((2, 2), (2,)), "message_names_both": True,
           "equal_shapes_accepted": equal_shapes}
    return (
        _claim("S01", _PREDICT,
               "The merge adds element by element: x=[2,-1] with F(x)=[-1,-2.25] gives "
               "y=[1,-3.25], still of shape [2].",
               {"output": _v("1", "-13/4"), "shape": (2,)}, _s01),
        _claim("S02", _ADD_UPDATE,
               "The residual merge demands identical shapes: a [2] branch on a [2,2] stream, "
               "fine for broadcasting addition, is refused with both shapes named, while equal "
               "shapes of any rank (scalars and empty axes too) are accepted and a refusal "
               "changes nothing.",
               s02, _s02, backend=_s02_backend,
               backend_expected={**s02, "unchanged_after_rejection": True}),
        _claim("S03", _ADD_UPDATE,
               "The input gradient sums the identity edge and the branch's VJP, "
               "x̄ = ȳ + J_Fᵀȳ, and the two parts can reinforce, cancel or overshoot.",
               {"law_holds": True, "reinforce w=1": _f("2"), "cancel w=-1": _f("0"),
                "amplify w=-3": _f("-2")}, _s03),
        _claim("S04", _ADD_UPDATE,
               "With y = x + αF(x), α=0 leaves only the identity (y=x, x̄=ȳ), α=1 is the "
               "plain residual block, and α is a constant that receives no gradient.",
               {"alpha=0 output": _v("2", "-1"), "alpha=0 grad x": _v("1", "1"),
                "alpha=1 output": _v("1", "-13/4"), "gradient names": ("w", "x")}, _s04),
        _claim("S05", _ROLES,
               "The merge neither concatenates (the width stays 2) nor normalizes (the output "
               "keeps a nonzero mean and a variance other than 1).",
               {"output_shape": (2,), "output_mean": _f("-9/8"),
                "output_variance": _f("289/64")}, _s05),
        _claim("S06", _REJECT,
               "For the bias-free square linear branch W=[[0.5,-1],[2,0.25]] at x=[2,-1] and "
               "ȳ=[1,1]: F(x)=[-1,-2.25], the identity part [1,1] plus the branch part "
               "[-0.5,2.25] gives x̄=[0.5,3.25], and the weight gradient is [2,2,-1,-1] "
               "row-major.",
               {"branch output": _v("-1", "-9/4"), "identity part": _v("1", "1"),
                "branch part": _v("-1/2", "9/4"), "grad x": _v("1/2", "13/4"),
                "grad w": _v("2", "2", "-1", "-1")}, _s06,
               note="The course names the weight residual.branch.weight; our IR calls it w."),
        _claim("S07a", _REJECT,
               "Zero weights make the branch vanish for every input, so y = x = [2,-1] and "
               "x̄ = ȳ = [1,1], yet the weight gradient stays [2,2,-1,-1]: the branch can "
               "still learn.",
               {"branch zero for every x": True, "output": _v("2", "-1"),
                "grad x": _v("1", "1"), "grad w": _v("2", "2", "-1", "-1")},
               _s07a, check=_s07a_exact,
               backend_expected={"output": _v("2", "-1"), "grad x": _v("1", "1"),
                                 "grad w": _v("2", "2", "-1", "-1")}),
        _claim("S07b", _REJECT,
               "'The output equals x' for a zero branch holds as values, not as bit patterns: "
               "x=-0.0 plus a +0.0 branch gives +0.0 under IEEE rounding to nearest.",
               True, check=_s07b_exact, backend=_s07b_backend,
               backend_expected={"equal as values": True, "equal bitwise": False},
               note="Open in the seed. Decision: equality of outputs means equality of values "
                    "(-0.0 == +0.0); the exact interpreter has a single zero, and backends are "
                    "never compared on the sign of a zero."),
        _claim("S08", _REJECT,
               "A branch that outputs zero at one input can still have a nonzero Jacobian "
               "there: F(x)=xW with x=[1,-1], W all ones gives F=0 but J_Fᵀȳ=[2,2].",
               {"F(x)": _v("0", "0"), "J_F(x)^T ybar": _v("2", "2")}, _s08),
        _claim("S09", _REJECT,
               "Central differences (step 1e-6) of an independent Σ(x+xW)² agree with the "
               "gradient within 2e-6 on both input and all four weight coordinates.",
               {"checks": 6, "passed": True}, _s09),
        _claim("S10", _CHECK_PREDICTIONS,
               "One tensor on both sides of the merge collects the cotangent twice: "
               "ȳ=[1.5,-2] gives [3,-4].",
               {"output": _v("4", "-2"), "grad x": _v("3", "-4")}, _s10),
        _claim("S11", _COMPARE,
               "Four layers of W=diag(-0.25,-0.25) from x=[2,-1]: the plain stack shrinks by "
               "-1/4 per layer (input gradient (1/4)^4 = 1/256), the residual stack by 3/4 "
               "(81/256), and every layer's weight gradient is nonzero.",
               {"plain values": _S11_PLAIN, "plain grad x": _v("1/256", "1/256"),
                "plain weight grads nonzero": True, "residual values": _S11_RESIDUAL,
                "residual grad x": _v("81/256", "81/256"),
                "residual weight grads nonzero": True}, _s11,
               note="A property of this fixture, not a bound on optimization in general."),
        _claim("S12", _FULL_REPORT,
               "Running the same fixture twice gives bit-for-bit identical outputs and "
               "gradients.", True, check=_s12_exact, backend=_s12_backend),
        _claim("S13", _CHECK_PREDICTIONS,
               "An identity path does not guarantee learning: a residual stack whose first "
               "branch is F(x)=-x sends exactly zero gradient to the input and every weight.",
               {"grad x": _v("0", "0"), "every weight grad zero": True}, _s13),
        _claim("S14", _PRINT_REPORT,
               "The fixture's key=value report is deterministic and matches its golden text.",
               {"lines": _GOLDEN_REPORT,
                "sha256": hashlib.sha256("\n".join(_GOLDEN_REPORT).encode()).hexdigest()},
               _s14),
    )


def _lecture_claims() -> tuple[Claim, ...]:
    return (
        _claim("S15", _KEEP_PATH,
               "A zero branch makes the block the identity; a shape mismatch, even a "
               "broadcastable one, is refused, and an explicit projection makes it valid.",
               {"zero branch is identity": True, "broadcastable pair refused": True,
                "explicit projection accepted": True}, _s15),
        _claim("S16", _KEEP_PATH,
               "For any differentiable branch J_y = I + J_F and ∇_x L = (I + J_F)ᵀ ∇_y L.",
               {"J_y = I + J_F": True, "grad_x = (I + J_F)^T grad_y": True}, check=_s16),
        _claim("S17a", _KEEP_PATH,
               "F(x)=0.5·relu(x) at x=[-1,2]: F=[0,1], y=[-1,3], Jacobian diag(1,1.5); "
               "without the skip the output is [0,1] and the Jacobian diag(0,0.5).",
               {"residual output": _v("-1", "3"),
                "residual jacobian": ((_f("1"), _f("0")), (_f("0"), _f("3/2"))),
                "plain output": _v("0", "1"),
                "plain jacobian": ((_f("0"), _f("0")), (_f("0"), _f("1/2"))),
                "symbolic residual jacobian": ((_f("1"), _f("0")), (_f("0"), _f("3/2")))},
               _s17a, check=_s17a_exact,
               backend_expected={"residual output": _v("-1", "3"),
                                 "residual jacobian": ((_f("1"), _f("0")), (_f("0"), _f("3/2"))),
                                 "plain output": _v("0", "1"),
                                 "plain jacobian": ((_f("0"), _f("0")), (_f("0"), _f("1/2")))}),
        _claim("S17b", _KEEP_PATH,
               "At the kink the project declares relu'(0) = 0, so the residual relu block's "
               "derivative at x=0 is exactly 1.",
               {"relu'(0)": _f("0"), "residual jacobian row 0 at x=[0,2]": _v("1", "0")},
               _s17b, check=_s17b_exact,
               backend_expected={"residual jacobian row 0 at x=[0,2]": _v("1", "0")},
               note="Left open by the seeds. Decision: relu'(0) = 0 everywhere (spec, "
                    "reference, and what backends are checked against)."),
        _claim("S18", _EXPERIMENT,
               "With g=-1 the positive coordinate's derivative is 1 + F' = 0: a residual "
               "block can cancel its gradient, so 'a unit path' is no lower bound of 1.",
               {"jacobian g=-1": ((_f("1"), _f("0")), (_f("0"), _f("0")))}, _s18),
        _claim("S19", _EXPERIMENT,
               "The skip adds no weights, only one residual_add, costing one addition per "
               "component.",
               {"added inputs": (), "added ops": ("residual_add",),
                "additions per component": _f("1")}, check=_s19),
        _claim("S20", _EXPERIMENT,
               "The page's snippet values hold: F=[0,1] and y=[-1,3] for x=[-1,2], g=0.5.",
               {"F": _v("0", "1"), "y": _v("-1", "3")}, _s20),
    )


def _notes_claims() -> tuple[Claim, ...]:
    return (
        _claim("S21", _COMPOSITE,
               "A residual module has Jacobian I + J_F, and the derivative of a composition is "
               "the product of the modules' Jacobians, plain or residual.",
               {"residual module J = I + J_F": True, "plain chain is product of J_F": True,
                "residual chain is product of (I + J_F)": True}, check=_s21),
        _claim("S22", _RECURRENCE,
               "x_{l+1} = x_l + F_l(x_l) unrolls to x_L = x_0 + Σ F_l(x_l), each F_l taken at "
               "its own state (symbolic L by induction, and L=1..5 directly).",
               {"symbolic L": True, "L = 1..5": True}, check=_s22),
        _claim("S23", _RECURRENCE,
               "A block's input gradient (1+a)ȳ for F=a·x is not bounded below by 1: it can "
               "shrink (a=-1/2), grow (a=1) or vanish (a=-1).",
               {"a=-1/2": _f("1/2"), "a=1": _f("2"), "a=-1": _f("0")}, _s23),
        _claim("S24", _LINEAR_CHECK,
               "L blocks of F=a·x have derivative (1+a)^L, not 1+a+…+a^L; at L=3 it is "
               "1+3a+3a²+a³.",
               {"(1+a)^L for symbolic L": True, "binomial expansion for symbolic L": True,
                "expansion L=3": "a**3 + 3*a**2 + 3*a + 1",
                "1+a+...+a^L first differs": {"L": 2, "a": _f("1"), "(1+a)^L": _f("4"),
                                              "sum": _f("3")},
                "expansion checked for L=1..1000": True}, check=_s24),
        _claim("S25", _LINEAR_CHECK,
               "Three blocks: a=-0.5 gives derivative 0.125 and a=1 gives 8.",
               {"a=-1/2": _f("1/8"), "a=1": _f("8")}, _s25),
        _claim("S26", _VARIANCE,
               "100 layers of independent unit normal noise give per-component variance 100 "
               "and sd 10; one run's sample sd over 768 components only approximates 10.",
               {"variance": _f("100"), "sd": _f("10"), "sample sd exactly 10": False,
                "sample sd within 4 standard errors": True}, check=_s26,
               note="The sample part uses a fixed seed; 4 standard errors of an sd estimate "
                    "from 768 values is about ±1.02."),
        _claim("S27", _VARIANCE,
               "Scaling each of the 100 updates by 1/√100 = 0.1 brings the variance of their "
               "sum to 1; for any L the 1/√L scaling keeps it at σ².",
               {"scale": _f("1/10"), "variance": _f("1"),
                "rescaled variance, symbolic L": "sigma**2"}, check=_s27),
        _claim("S28", _VARIANCE,
               "Var(x+F) = Var x + Var F + 2Cov(x,F), and when F depends on x the covariance is "
               "not zero; the same identity holds exactly for sample moments.",
               {"identity gap": "0", "Cov(X, F) for F = cX + Z": "c*sigma_X**2",
                "sample identity gap (rationals)": _f("0"), "sample covariance nonzero": True},
               check=_s28),
        _claim("S29", _IMPLEMENTATION,
               "A branch that changes the width cannot be merged without a projection, and "
               "normalizing the branch input differs from normalizing after the sum.",
               {"width change refused": "shape_mismatch", "refused shapes": ((3,), (2,)),
                "normalize branch input": _v("-1/4", "-23/8"),
                "normalize after the sum": _v("17/8", "-17/8")}, _s29,
               note="Mean-centering stands in for a normalization layer so the values stay "
                    "rational."),
        _claim("S30", _PYTORCH,
               "Three steps y = y + a·y from 1 give (1+a)^3; in float32 a=-0.5 and a=1 are "
               "exact but a=0.1 gives 1.3310000896… ≠ 1.331, inside the float32 error bound.",
               {"exact a=1/10": _f("1331/1000"), "float32 a=0.1": 1.3310000896453857,
                "float32 equals exact": False, "float32 within budget": True,
                "float32 within γ_9·(1+a)^3": True, "float32 exact at a=-1/2 and a=1": True},
               check=_s30_exact, backend=_s30_backend,
               backend_expected={"float32 equals exact": False, "float32 within budget": True,
                                 "float32 exact at a=-1/2 and a=1": True},
               note="The seed's exact-equality comparison would fail at a=0.1. Decision: "
                    "floating-point results are compared with the exact value within the "
                    "dtype's error budget (spec.budget; here about 2.8e-7, and the symbolic "
                    "bound γ_9·1.1³ ≈ 7.1e-7 for u=2⁻²⁴ agrees), never for equality."),
    )


CLAIMS: tuple[Claim, ...] = _catalog()


# --- checking and reporting -------------------------------------------------------------------

def _observe(check: Callable[[], object]) -> tuple[object, bool]:
    try:
        return check(), True
    except Exception as exc:  # a broken check is a failed claim, reported, not a crash
        return f"error: {type(exc).__name__}: {exc}", False


def check_claim(claim: Claim, run: Runner | None = None) -> ClaimOutcome:
    """Recompute ``claim``; with a backend's ``run``, also run its backend check."""
    observed, ok = _observe(claim.check)
    passed = ok and observed == claim.expected
    if run is None or claim.backend is None:
        return ClaimOutcome(claim, observed, "pass" if passed else "fail")
    backend = claim.backend
    try:
        got: object = backend(run)
        backend_status = "pass" if got == claim.expected_from_backend else "fail"
    except BackendSkip as skip:
        got, backend_status = f"skipped: {skip}", "skipped"
    except Exception as exc:  # a crashing backend fails the claim, with the reason shown
        got, backend_status = f"error: {type(exc).__name__}: {exc}", "fail"
    status = "pass" if passed and backend_status != "fail" else "fail"
    return ClaimOutcome(claim, observed, status, got, backend_status)


def jsonable(value: object) -> object:
    """Plain JSON data: Fractions as exact strings ("13/4"), tuples as lists, SymPy as text."""
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    return str(value)


def outcome_dict(outcome: ClaimOutcome) -> dict[str, object]:
    """One claim's outcome as plain JSON data (the ``claims`` entries of reports)."""
    claim = outcome.claim
    out: dict[str, object] = {
        "id": claim.id, "source": claim.source.file, "section": claim.source.heading,
        "section_en": claim.source.english, "section_language": claim.source.language,
        "statement": claim.statement, "expected": jsonable(claim.expected),
        "observed": jsonable(outcome.observed), "status": outcome.status, "note": claim.note,
    }
    if isinstance(claim.expected, Fraction):
        out["expected_float"] = float(claim.expected)
    if outcome.backend_status is not None:
        out["backend_expected"] = jsonable(claim.expected_from_backend)
        out["backend_observed"] = jsonable(outcome.backend_observed)
        out["backend_status"] = outcome.backend_status
    return out
