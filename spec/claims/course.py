"""Claims S01–S14 of the course chapter (seed ``000_…``): the merge, its gradient, the report.

Why: the chapter fixes the fixture values every other part of the project reuses (the square
linear block at x=[2,-1]), the shape rule of the merge, and the deterministic report.
Each claim is one block: its declaration (:mod:`~resverify.spec.claims.register`) on the
function that observes it.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np
import sympy as sp

from resverify.spec import fixtures
from resverify.spec import symbolic as sym
from resverify.spec.claims.build import (
    frac,
    fracs,
    is_zero,
    make_program,
    make_request,
    residual_pair,
)
from resverify.spec.claims.model import (
    Claim,
    Interpreter,
    Runner,
    exact_run,
    flat,
    value_of,
)
from resverify.spec.claims.register import SeedClaims
from resverify.spec.errors import Shape
from resverify.spec.ir import Program
from resverify.spec.request import Request, Result, Value

__all__ = []

COURSE = "000_0ed21ebc8dc36f9a.txt"
SEED = SeedClaims(COURSE)

_PREDICT = SEED.section("Предскажите, что сохраняет тождественный путь",
                        "Predict what the identity path preserves", "ru")
_ADD_UPDATE = SEED.section("Добавьте обучаемое обновление к неизменённому потоку",
                           "Add a learned update to the unchanged stream", "ru")
_ROLES = SEED.section("Не смешивайте роли потока и обновления",
                      "Do not mix up the roles of the stream and the update", "ru")
_REJECT = SEED.section("Перед сложением отклоните несовпадающие формы",
                       "Reject mismatched shapes before adding", "ru")
_CHECK_PREDICTIONS = SEED.section("Проверить предсказания", "Check the predictions", "ru")
_COMPARE = SEED.section("Сравните повторяющиеся обычные и остаточные преобразования",
                        "Compare repeated plain and residual transformations", "ru")
_FULL_REPORT = SEED.section("Сформируйте полный отчёт по главе 24",
                            "Build the full report of chapter 24", "ru")
_PRINT_REPORT = SEED.section("Выведите детерминированный отчёт",
                             "Print the deterministic report", "ru")


def _same_bits(first: Result, second: Result) -> bool:
    """Two value answers with bit-identical outputs and gradients."""
    def blob(result: Value) -> bytes:
        parts = [np.asarray(result.output).tobytes()]
        parts += [np.asarray(v).tobytes() for _, v in sorted(result.grads.items())]
        return b"".join(parts)

    return isinstance(first, Value) and isinstance(second, Value) and blob(first) == blob(second)


def _branch_only() -> Program:
    """``F(x) = xW`` alone, without the merge."""
    return make_program({"x": (2,), "w": (2, 2)}, [("f", "linear", ("x", "w"))], "f")


# --- S01–S07b: what the merge computes and what its gradient is made of ---------------------

@SEED.claim("S01", _PREDICT,
            "The merge adds element by element: x=[2,-1] with F(x)=[-1,-2.25] gives "
            "y=[1,-3.25], still of shape [2].",
            expected={"output": fracs("1", "-13/4"), "shape": (2,)})
def _s01(interp: Interpreter) -> object:
    request = make_request(residual_pair((2,), (2,)), {"x": [2.0, -1.0], "f": [-1.0, -2.25]},
                           [1.0, 1.0])
    run = interp(request)
    return {"output": run.output, "shape": run.shape}


_MISMATCH_CASE = ({"x": np.ones((2, 2)), "f": np.array([1.0, 2.0])}, (2, 2), (2,))
_EQUAL_SHAPES: tuple[Shape, ...] = ((), (0, 2), (2, 3, 1))


def _equal_shapes_accepted(interp: Interpreter) -> tuple[Shape, ...]:
    accepted = []
    for shape in _EQUAL_SHAPES:
        values = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
        run = interp(make_request(residual_pair(shape, shape), {"x": values, "f": values},
                                  np.ones(shape)))
        if run.error is None and run.shape == shape:
            accepted.append(shape)
    return tuple(accepted)


def _spec_message_names_both() -> bool:
    """The spec's own message names both shapes (a backend's message text is free-form, the
    protocol says so: only its typed ``shapes`` are judged)."""
    inputs, left, right = _MISMATCH_CASE
    message = exact_run(make_request(residual_pair(left, right), inputs, None)).message
    return str(list(left)) in message and str(list(right)) in message


def _refusal_changes_nothing(run: Runner) -> bool:
    """A refused merge leaves the inputs and later results unchanged."""
    valid = fixtures.linear_block_request()
    before = run(valid)
    inputs, left, right = _MISMATCH_CASE
    mutable = {k: np.array(v, copy=True) for k, v in inputs.items()}
    run(make_request(residual_pair(left, right), mutable, None))
    after = run(valid)
    return _same_bits(before, after) and all(
        np.array_equal(mutable[k], v) for k, v in inputs.items())


@SEED.claim("S02", _ADD_UPDATE,
            "The residual merge demands identical shapes: a [2] branch on a [2,2] stream, "
            "fine for broadcasting addition, is refused with both shapes named, while equal "
            "shapes of any rank (scalars and empty axes too) are accepted and a refusal "
            "changes nothing.",
            expected={"add_shape": (2, 2), "residual_error": "shape_mismatch",
                      "error_shapes": ((2, 2), (2,)), "equal_shapes_accepted": _EQUAL_SHAPES,
                      "message_names_both": True, "unchanged_after_rejection": True},
            exact_also={"message_names_both": _spec_message_names_both},
            backend_also={"unchanged_after_rejection": _refusal_changes_nothing})
def _s02(interp: Interpreter) -> dict[str, object]:
    inputs, left, right = _MISMATCH_CASE
    added = interp(make_request(residual_pair(left, right, "add"), inputs, np.ones(left)))
    refused = interp(make_request(residual_pair(left, right), inputs, None))
    return {"add_shape": added.shape, "residual_error": refused.error,
            "error_shapes": refused.error_shapes,
            "equal_shapes_accepted": _equal_shapes_accepted(interp)}


@SEED.claim("S03", _ADD_UPDATE,
            "The input gradient sums the identity edge and the branch's VJP, "
            "x̄ = ȳ + J_Fᵀȳ, and the two parts can reinforce, cancel or overshoot.",
            expected={"law_holds": True, "reinforce w=1": frac("2"), "cancel w=-1": frac("0"),
                      "amplify w=-3": frac("-2")})
def _s03(interp: Interpreter) -> dict[str, object]:
    law = is_zero(sym.vjp_law_difference(sym.symbolic_branch(2), sp.Integer(1)))
    program = make_program({"x": (1,), "w": (1, 1)},
                           [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f"))], "y")

    def grad(weight: float) -> Fraction:
        grads = interp(make_request(program, {"x": [2.0], "w": [[weight]]}, [1.0])).grads
        return grads["x"][0]

    return {"law_holds": law, "reinforce w=1": grad(1.0), "cancel w=-1": grad(-1.0),
            "amplify w=-3": grad(-3.0)}


def _alpha_block(alpha: Fraction) -> Program:
    return make_program({"x": (2,), "w": (2, 2)},
                        [("f", "linear", ("x", "w")), ("s", "scale", ("f",), alpha),
                         ("y", "residual_add", ("x", "s"))], "y")


@SEED.claim("S04", _ADD_UPDATE,
            "With y = x + αF(x), α=0 leaves only the identity (y=x, x̄=ȳ), α=1 is the "
            "plain residual block, and α is a constant that receives no gradient.",
            expected={"alpha=0 output": fracs("2", "-1"), "alpha=0 grad x": fracs("1", "1"),
                      "alpha=1 output": fracs("1", "-13/4"), "gradient names": ("w", "x")})
def _s04(interp: Interpreter) -> dict[str, object]:
    values = {"x": fixtures.SEED_X, "w": fixtures.SEED_W}
    off = interp(make_request(_alpha_block(Fraction(0)), values, fixtures.SEED_COT))
    on = interp(make_request(_alpha_block(Fraction(1)), values, fixtures.SEED_COT))
    return {"alpha=0 output": off.output, "alpha=0 grad x": off.grads["x"],
            "alpha=1 output": on.output, "gradient names": tuple(sorted(off.grads))}


@SEED.claim("S05", _ROLES,
            "The merge neither concatenates (the width stays 2) nor normalizes (the output "
            "keeps a nonzero mean and a variance other than 1).",
            expected={"output_shape": (2,), "output_mean": frac("-9/8"),
                      "output_variance": frac("289/64")})
def _s05(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.linear_block_request())
    mean = sum(run.output, Fraction(0)) / len(run.output)
    return {"output_shape": run.shape, "output_mean": mean,
            "output_variance": sym.sample_variance(run.output)}


@SEED.claim("S06", _REJECT,
            "For the bias-free square linear branch W=[[0.5,-1],[2,0.25]] at x=[2,-1] and "
            "ȳ=[1,1]: F(x)=[-1,-2.25], the identity part [1,1] plus the branch part "
            "[-0.5,2.25] gives x̄=[0.5,3.25], and the weight gradient is [2,2,-1,-1] "
            "row-major.",
            expected={"branch output": fracs("-1", "-9/4"), "identity part": fracs("1", "1"),
                      "branch part": fracs("-1/2", "9/4"), "grad x": fracs("1/2", "13/4"),
                      "grad w": fracs("2", "2", "-1", "-1")},
            note="The course names the weight residual.branch.weight; our IR calls it w.")
def _s06(interp: Interpreter) -> dict[str, object]:
    full = interp(fixtures.linear_block_request())
    identity = interp(make_request(make_program({"x": (2,)}, [], "x"), {"x": fixtures.SEED_X},
                                   fixtures.SEED_COT))
    branch = interp(make_request(_branch_only(), {"x": fixtures.SEED_X, "w": fixtures.SEED_W},
                                 fixtures.SEED_COT))
    return {"branch output": branch.output, "identity part": identity.grads["x"],
            "branch part": branch.grads["x"], "grad x": full.grads["x"],
            "grad w": full.grads["w"]}


def _zero_branch_everywhere() -> bool:
    branch = sym.linear_branch(2)
    zero = dict.fromkeys(sym.linear_weights(2), 0)
    return bool(branch.values.subs(zero) == sp.zeros(2, 1))


@SEED.claim("S07a", _REJECT,
            "Zero weights make the branch vanish for every input, so y = x = [2,-1] and "
            "x̄ = ȳ = [1,1], yet the weight gradient stays [2,2,-1,-1]: the branch can "
            "still learn.",
            expected={"branch zero for every x": True, "output": fracs("2", "-1"),
                      "grad x": fracs("1", "1"), "grad w": fracs("2", "2", "-1", "-1")},
            exact_also={"branch zero for every x": _zero_branch_everywhere})
def _s07a(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.linear_block_request(w=np.zeros((2, 2))))
    return {"output": run.output, "grad x": run.grads["x"], "grad w": run.grads["w"]}


def _signed_zero_request() -> Request:
    return make_request(residual_pair((2,), (2,)), {"x": [-0.0, -1.0], "f": [0.0, 0.0]},
                        [1.0, 1.0])


def _s07b_exact() -> bool:
    request = _signed_zero_request()
    return exact_run(request).output == flat(request.inputs["x"])


@SEED.backend_claim("S07b", _REJECT,
                    "'The output equals x' for a zero branch holds as values, not as bit "
                    "patterns: x=-0.0 plus a +0.0 branch gives +0.0 under IEEE rounding to "
                    "nearest.",
                    expected=True, exact=_s07b_exact,
                    backend_expected={"equal as values": True, "equal bitwise": False},
                    note="Open in the seed. Decision: equality of outputs means equality of "
                         "values (-0.0 == +0.0); the exact interpreter has a single zero, and "
                         "backends are never compared on the sign of a zero.")
def _s07b(run: Runner) -> dict[str, bool]:
    request = _signed_zero_request()
    result = value_of(run, request)
    out, x = np.asarray(result.output), np.asarray(request.inputs["x"])
    return {"equal as values": bool(np.array_equal(out, x)),
            "equal bitwise": out.tobytes() == x.tobytes()}


# --- S08–S14: checking the gradient, deep stacks, and the deterministic report ----------------

@SEED.claim("S08", _REJECT,
            "A branch that outputs zero at one input can still have a nonzero Jacobian "
            "there: F(x)=xW with x=[1,-1], W all ones gives F=0 but J_Fᵀȳ=[2,2].",
            expected={"F(x)": fracs("0", "0"), "J_F(x)^T ybar": fracs("2", "2")})
def _s08(interp: Interpreter) -> dict[str, object]:
    run = interp(make_request(_branch_only(), {"x": [1.0, -1.0], "w": [[1.0, 1.0], [1.0, 1.0]]},
                              [1.0, 1.0]))
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


@SEED.claim("S09", _REJECT,
            "Central differences (step 1e-6) of an independent Σ(x+xW)² agree with the "
            "gradient within 2e-6 on both input and all four weight coordinates.",
            expected={"checks": 6, "passed": True})
def _s09(interp: Interpreter) -> dict[str, object]:
    program = make_program({"x": (2,), "w": (2, 2)},
                           [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f")),
                            ("q", "mul", ("y", "y")), ("s", "sum", ("q",))], "s")
    grads = interp(make_request(program, {"x": fixtures.SEED_X, "w": fixtures.SEED_W}, 1.0)).grads
    analytic = [float(v) for v in grads["x"] + grads["w"]]
    numeric = _central_differences()
    passed = all(abs(a - b) <= _GRADCHECK_TOLERANCE
                 for a, b in zip(analytic, numeric, strict=True))
    return {"checks": len(numeric), "passed": passed}


@SEED.claim("S10", _CHECK_PREDICTIONS,
            "One tensor on both sides of the merge collects the cotangent twice: "
            "ȳ=[1.5,-2] gives [3,-4].",
            expected={"output": fracs("4", "-2"), "grad x": fracs("3", "-4")})
def _s10(interp: Interpreter) -> dict[str, object]:
    run = interp(fixtures.shared_operand_request())
    return {"output": run.output, "grad x": run.grads["x"]}


@SEED.claim("S11", _COMPARE,
            "Four layers of W=diag(-0.25,-0.25) from x=[2,-1]: the plain stack shrinks by "
            "-1/4 per layer (input gradient (1/4)^4 = 1/256), the residual stack by 3/4 "
            "(81/256), and every layer's weight gradient is nonzero.",
            expected={"plain values": (fracs("2", "-1"), fracs("-1/2", "1/4"),
                                       fracs("1/8", "-1/16"), fracs("-1/32", "1/64"),
                                       fracs("1/128", "-1/256")),
                      "plain grad x": fracs("1/256", "1/256"),
                      "plain weight grads nonzero": True,
                      "residual values": (fracs("2", "-1"), fracs("3/2", "-3/4"),
                                          fracs("9/8", "-9/16"), fracs("27/32", "-27/64"),
                                          fracs("81/128", "-81/256")),
                      "residual grad x": fracs("81/256", "81/256"),
                      "residual weight grads nonzero": True},
            note="A property of this fixture, not a bound on optimization in general.")
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


@SEED.backend_claim("S12", _FULL_REPORT,
                    "Running the same fixture twice gives bit-for-bit identical outputs and "
                    "gradients.",
                    expected=True, exact=_s12_exact)
def _s12(run: Runner) -> bool:
    cases = fixtures.seed_cases().values()
    return all(_same_bits(run(request), run(request)) for request, _, _ in cases)


@SEED.claim("S13", _CHECK_PREDICTIONS,
            "An identity path does not guarantee learning: a residual stack whose first "
            "branch is F(x)=-x sends exactly zero gradient to the input and every weight.",
            expected={"grad x": fracs("0", "0"), "every weight grad zero": True})
def _s13(interp: Interpreter) -> dict[str, object]:
    values: dict[str, object] = {"x": fixtures.SEED_X}
    values.update({f"w{i}": [[-1.0, 0.0], [0.0, -1.0]] for i in range(4)})
    run = interp(make_request(fixtures.stack_program(4, True), values, fixtures.SEED_COT))
    return {"grad x": run.grads["x"],
            "every weight grad zero": all(v == 0 for i in range(4) for v in run.grads[f"w{i}"])}


def _report_lines(interp: Interpreter) -> tuple[str, ...]:
    """A key=value report of the S06 fixture, each value an exact fraction."""
    run = interp(fixtures.linear_block_request())
    items = [("output", run.output)] + [(f"grad.{k}", v) for k, v in sorted(run.grads.items())]
    return tuple(f"{key}={' '.join(str(v) for v in values)}" for key, values in items)


_GOLDEN_REPORT = ("output=1 -13/4", "grad.w=2 2 -1 -1", "grad.x=1/2 13/4")


@SEED.claim("S14", _PRINT_REPORT,
            "The fixture's key=value report is deterministic and matches its golden text.",
            expected={"lines": _GOLDEN_REPORT,
                      "sha256": hashlib.sha256("\n".join(_GOLDEN_REPORT).encode()).hexdigest()})
def _s14(interp: Interpreter) -> object:
    first, second = _report_lines(interp), _report_lines(interp)
    if first != second:
        return {"differs between runs": (first, second)}
    return {"lines": first, "sha256": hashlib.sha256("\n".join(first).encode()).hexdigest()}


CLAIMS: tuple[Claim, ...] = SEED.claims
