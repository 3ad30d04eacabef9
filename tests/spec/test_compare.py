"""One comparison: the suite, the budget object and replay judge an element the same way.

The table below is the rule of :func:`resverify.spec.compare.within`, one named case a row; every
consumer (``Context.within``, ``Budget.misses``, ``resverify replay``) must follow it.

The last tests pin what mutation testing found unpinned in :mod:`resverify.spec.compare`
(docs/strength.md, "The mutation score of resverify's own code"): ``decimal``'s digits
beyond the float64 range and the shapes ``cells`` refuses; each kills mutants of
``tools/mutation.py`` that survived the rest of the tests, a changed behaviour no test
noticed. Exact values are compared exactly.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from resverify.cli.main import main
from resverify.cli.replay import compare_array
from resverify.impl.backend import Capabilities
from resverify.properties.assertions import Context, PropertyFailure
from resverify.properties.laws_oracle import check_matches_spec
from resverify.spec.budget import Budget, error_budget
from resverify.spec.codec import dumps
from resverify.spec.compare import cells, decimal, within
from resverify.spec.errors import BadResult
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.fixtures import linear_block_request
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Result, ResultError, Value, storage_dtype

INF, NAN = float("inf"), float("nan")
F = Fraction
TINY = 5e-324

# name: (actual, exact, bound, within?)
TABLE: dict[str, tuple[float, Fraction, float, bool]] = {
    "equal": (0.5, F(1, 2), 0.0, True),
    "inside the bound": (0.5, F(1, 2) + F(1, 2**60), 2.0**-60, True),
    "on the bound": (0.5, F(1, 2) + F(1, 2**60), 2.0**-60, True),
    "just beyond the bound": (0.5, F(1, 2) + F(1, 2**60) + F(1, 2**200), 2.0**-60, False),
    "exact value between floats, bound 0": (1 / 3, F(1, 3), 0.0, False),
    "negative zero equals zero": (-0.0, F(0), 0.0, True),
    "positive zero equals zero": (0.0, F(0), 0.0, True),
    "negative zero against a subnormal, bound one subnormal": (-0.0, F(TINY), TINY, True),
    "negative zero against a subnormal, bound 0": (-0.0, F(TINY), 0.0, False),
    "NaN, finite bound": (NAN, F(1), 1e300, False),
    "inf, finite bound": (INF, F(1), 1e300, False),
    "-inf, finite bound": (-INF, F(-1), 1e300, False),
    "NaN, infinite bound (overflow allowed)": (NAN, F(1), INF, True),
    "inf, infinite bound": (INF, F(10) ** 400, INF, True),
    "-inf, infinite bound": (-INF, F(1), INF, True),
    "finite, infinite bound": (-1e308, F(10) ** 400, INF, True),
    "NaN bound, exact answer": (1.0, F(1), NAN, False),
    "NaN bound, NaN answer": (NAN, F(1), NAN, False),
    "-inf bound": (1.0, F(1), -INF, False),
    "exact value beyond float64, finite bound": (1e308, F(10) ** 400, 1e308, False),
}


@pytest.mark.parametrize("case", sorted(TABLE))
def test_within_follows_the_table(case: str) -> None:
    actual, exact, bound, expected = TABLE[case]
    assert within(actual, exact, bound) is expected, (
        f"within({actual!r}, {exact}, {bound!r}) is {not expected}, table says {expected} "
        f"[{case}]")


def suite_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    try:
        Context("b", linear_block_request()).within("output", actual, exact, bound)
    except PropertyFailure:
        return False
    return True


def budget_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    budget = Budget(output=bound, grads={})
    return not budget.misses(ExactResult(exact, {}, F(0)), actual, {})


def replay_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    return all(row.ok for row in compare_array("output", actual, exact, bound))


CONSUMERS = {"suite": suite_accepts, "budget": budget_accepts, "replay": replay_accepts}


def _one(case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    actual, exact, bound, expected = TABLE[case]
    return (np.array([actual]), np.array([exact], dtype=object), np.array([bound]), expected)


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("case", sorted(TABLE))
def test_suite_budget_and_replay_follow_the_table(consumer: str, case: str) -> None:
    actual, exact, bound, expected = _one(case)
    verdict = CONSUMERS[consumer](actual, exact, bound)
    assert verdict is expected, (
        f"{consumer} {'accepts' if verdict else 'rejects'} actual={actual[0]!r} "
        f"exact={exact[0]} bound={bound[0]!r}, table says within={expected} [{case}]")


# --- the suite's verdict and replay's verdict agree on generated vectors ---


class Answering:
    """A backend that gives whatever answer the test put in ``answer``."""

    name = "answering"
    capabilities = Capabilities()
    answer: Result = ResultError("backend_error", "no answer set")

    def run(self, request: Request) -> Result:
        return Answering.answer


def _values(shape: tuple[int, ...], dtype: str) -> st.SearchStrategy[np.ndarray]:
    sane = st.floats(-4, 4, width=32)
    top = float(np.finfo(dtype).max)
    huge = st.sampled_from([top, -top / 2, top / 64])  # some bounds become infinite
    return arrays(np.dtype(dtype), shape, elements=st.one_of(sane, sane, sane, huge))


@st.composite
def vectors(draw: st.DrawFn) -> Request:
    """``residual_add(x, tanh?(linear(x, w)))``, sometimes summed, in float64 or float32."""
    rows, width = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(["float64", "float32"]))
    nodes = [Node("f", "linear", ("x", "w"))]
    if draw(st.booleans()):
        nodes.append(Node("t", "tanh", ("f",)))
    nodes.append(Node("y", "residual_add", ("x", nodes[-1].name)))
    out_shape: tuple[int, ...] = (rows, width)
    if draw(st.booleans()):
        nodes.append(Node("s", "sum", ("y",)))
        out_shape = ()
    program = Program((Input("x", (rows, width)), Input("w", (width, width))), tuple(nodes),
                      nodes[-1].name)
    data = {"x": draw(_values((rows, width), dtype)), "w": draw(_values((width, width), dtype))}
    return Request(program, data, dtype, draw(_values(out_shape, dtype)))


def _perturbed(draw: Callable[[st.SearchStrategy[Any]], Any], exact: np.ndarray,
               bound: np.ndarray, storage: np.dtype) -> np.ndarray:
    """The exact values rounded, with some elements moved: to NaN, ±inf, -0.0, or near the
    edge of their budget (inside or just outside it)."""
    out = np.array([_float(v) for v in exact.reshape(-1).tolist()], dtype=np.float64)
    limits = bound.reshape(-1).tolist()
    for i in range(out.size):
        move = draw(st.sampled_from(["keep", "keep", "nan", "inf", "-inf", "-0", "edge"]))
        if move in ("nan", "inf", "-inf"):
            out[i] = float(move)
        elif move == "-0":
            out[i] = -0.0
        elif move == "edge" and np.isfinite(limits[i]):
            factor = draw(st.sampled_from([F(1), F(99, 100), F(101, 100), F(2)]))
            sign = draw(st.sampled_from([-1, 1]))
            out[i] = _float(exact.reshape(-1)[i] + sign * factor * F(limits[i]))
    with np.errstate(over="ignore"):  # float32 answers overflow to inf, as a backend's would
        return out.reshape(exact.shape).astype(storage)


def _float(value: Fraction) -> float:
    """The nearest float64, or an infinity of the same sign beyond its range."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


@settings(max_examples=30, deadline=None, database=None)
@given(request=vectors(), data=st.data())
def test_suite_and_replay_give_the_same_verdict_on_a_vector(
        tmp_path_factory: pytest.TempPathFactory, request: Request,
        data: st.DataObject) -> None:
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    storage = storage_dtype(request.dtype)
    Answering.answer = Value(
        _perturbed(data.draw, exact.output, budget.output, storage),
        grads={n: _perturbed(data.draw, exact.grads[n], budget.grads[n], storage)
               for n in request.inputs})
    try:
        check_matches_spec(Answering(), request)
        suite = "accepts"
    except PropertyFailure as failure:
        suite = f"rejects ({failure})"
    path = tmp_path_factory.mktemp("vector") / "vector.json"
    path.write_text(dumps(request), encoding="utf-8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["replay", str(path), "--backend", f"{__name__}:Answering"])
    replay = "accepts" if code == 0 else "rejects"
    event(f"replay {replay}")
    assert code in (0, 1), printed.getvalue()
    assert suite.split()[0] == replay, (
        f"suite {suite}, replay {replay} (exit {code}) [{request.program.describe()}, "
        f"{request.dtype}]\n{printed.getvalue()}")


# --- pinned by mutation testing (docs/strength.md): decimal, cells ---


@pytest.mark.parametrize(("value", "digits", "text"), [
    (0.1, 17, "0.1"),  # within float range: repr, the shortest round-trip text
    (Fraction(-7, 2), 17, "-3.5"),
    (Fraction(1, 3) * 10**400, 17, "3.3333333333333333e+399"),  # 17 digits by default
    (-Fraction(10**400, 7), 5, "-1.4286e+399"),
    (Fraction(2**1100) + 1, 20, "1.3582985290493858493e+331"),  # every digit asked is right
])
def test_decimal_writes_numbers_beyond_float64_to_the_digits_asked(
        value: Fraction | float, digits: int, text: str) -> None:
    got = decimal(value) if digits == 17 else decimal(value, digits)
    assert got == text, f"decimal({value!r}, {digits}) = {got!r}, expected {text!r}"


def test_cells_refuses_unequal_shapes_naming_both() -> None:
    with pytest.raises(BadResult) as caught:
        list(cells(np.zeros((2, 3)), np.zeros(6, dtype=object), np.zeros(6)))
    assert str(caught.value) == "shapes differ: actual [2, 3], exact [6]", caught.value
