"""The fast oracle is sound: its balls hold the exact values, its verdicts are the exact ones.

These are the tests of the interpreter :mod:`resverify.spec.enclosure` (the rules of the
single ops, called alone, are in ``tests/spec/ops/test_enclosure_rules.py``).

The generated tests compare :mod:`resverify.spec.enclosure` with the exact interpreter
(:mod:`resverify.spec.exact`, Fractions) on small generated programs: residual stacks of
every branch family the enclosure covers, broadcasting add and mul, pre-norm and post-norm
stacks, single norms, and norms of rows whose variance is far below ε (a constant row
plus a few ulps, around a large mean), in float64 and float16.

The tests after them pin the interpreter's parts for its mutation score (docs/strength.md
§3), on small hand-built programs:

* the verdict: :func:`~resverify.spec.enclosure.verify` judges every element as
  :func:`resverify.spec.compare.within` judges it against the exact value, for values built
  to sit on, just inside and just outside the bound (and
  :func:`~resverify.spec.enclosure.decide` likewise, element by element);
* the slack of relu's sign test (``_least``), the fast budget and the stand-in of the
  spec's slack, against the exact interpreter's; what :func:`~resverify.spec.enclosure.enclose`
  refuses; dead nodes, unused inputs, forward-mode requests and misshapen results;
* ``_trace``, the values and slacks the budget reads, compared with their formulas in
  exact Fractions as the norms' radii are in ``tests/spec/ops/test_enclosure_rules.py``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.properties.cases import Case
from resverify.properties.strategies import (
    Sizes,
    broadcast_cases,
    epsilons,
    norm_cases,
    norm_stack_cases,
    residual_cases,
    single_norm_case,
)
from resverify.spec import enclosure, norm_rows
from resverify.spec.budget import error_budget
from resverify.spec.compare import within
from resverify.spec.enclosure import Ball, Enclosed, NotEnclosed, decide, enclose, verify
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Op
from resverify.spec.ops import layer_norm as norm_rules
from resverify.spec.ops import tanh as tanh_rules
from resverify.spec.request import Request
from tests.spec.ops.test_enclosure_rules import (
    EPS,
    MARGIN,
    NORM_ROWS,
    RELU_ARGS,
    TANH_ARGS,
    TINY,
    F,
    _assert_holds,
    _ball,
    _centre,
    _corners,
    _exact_rows,
    _q,
    _rows,
)

# --- whole generated programs against the exact interpreter ---

ENCLOSED = {name for name, op in OP_TABLE.items() if op.encloses}
"""The ops with an enclosure rule."""

SMALL = Sizes(max_width=12, max_weight=64, wide_percent=35, narrow=4)
NORM_SIZES = Sizes(max_width=8, max_weight=64, wide_percent=35, narrow=4)


@st.composite
def flat_norm_cases(draw: st.DrawFn) -> Case:
    """A norm of rows ``m + k·2**e``: a large or small mean ``m`` and a spread of a few
    ulps (or none), so the variance is far below ε and ε sets the scale."""
    width = draw(st.integers(1, 6))
    mean = draw(st.sampled_from([0.0, 1.0, -3.0, 2.0**20, 1e-3]))
    step = draw(st.sampled_from([0.0, 2.0**-40, np.spacing(max(abs(mean), 1e-300))]))
    ks = draw(st.lists(st.integers(-3, 3), min_size=width, max_size=width))
    x = mean + step * np.array(ks, dtype=np.float64)
    return single_norm_case(draw(st.sampled_from(["layer_norm", "rms_norm"])), x,
                            draw(epsilons()))


cases = st.one_of(residual_cases(ops=ENCLOSED, sizes=SMALL),
                  st.sampled_from(["add", "mul"]).flatmap(broadcast_cases),
                  norm_stack_cases(ops=ENCLOSED, sizes=NORM_SIZES),
                  norm_cases(ops=ENCLOSED, sizes=NORM_SIZES), flat_norm_cases())
dtypes = st.sampled_from(["float64", "float64", "float16"])


def _outside(ball: Ball, exact: np.ndarray) -> list[tuple[int, ...]]:
    """Indices where the exact Fraction is not within ``rad`` of ``mid + lo``."""
    values: list[Fraction] = [Fraction(v) for v in np.asarray(exact, dtype=object).ravel()]
    indices = list(np.ndindex(*np.shape(exact)))
    return [i for i, v in zip(indices, values, strict=True)
            if abs(v - Fraction(float(ball.mid[i])) - Fraction(float(ball.lo[i])))
            > Fraction(float(ball.rad[i]))]


@settings(max_examples=60, deadline=None)
@given(cases, dtypes)
def test_balls_hold_every_exact_value_forward_and_reverse(case: Case, dtype: str) -> None:
    request = case.request(dtype)
    try:
        balls = enclose(request)
    except NotEnclosed:
        return
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None and exact.trace is not None
    program = request.program.describe()
    for name, ball in balls.values.items():
        wrong = _outside(ball, exact.trace.values[name])
        assert not wrong, f"value {name} of {program}: exact outside the ball at {wrong[:3]}"
    for name, ball in balls.grads.items():
        wrong = _outside(ball, exact.grads[name])
        assert not wrong, f"grad[{name}] of {program}: exact outside the ball at {wrong[:3]}"


def _edge(op: str, x: list[float], alpha: Fraction | None = None) -> Request:
    program = Program((Input("x", (len(x),)),), (Node("y", op, ("x",), alpha),), "y")
    cotangent = np.array(1.5) if op == "sum" else np.linspace(1, 2, len(x))
    return Request(program, {"x": np.array(x)}, "float64", cotangent)


EDGES = [
    _edge("relu", [0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0]),
    _edge("tanh", [0.0, 1e-300, -1e-8, 0.5, 19.0, -25.0, 400.0, 5e-324, 1e-200]),
    _edge("scale", [1.0, 3.0, -7.5, 2.0**-900], Fraction(1, 3)),
    _edge("scale", [1e299, -1e-280], Fraction(-2, 7)),
    _edge("sum", [1e16, 1.0, -1e16, 2.0**-60]),
]


NORM_EDGES = [single_norm_case(op, np.array(x)).request("float64")
              for op in ("layer_norm", "rms_norm")
              for x in ([5e-324, 0.0, -5e-324], [1e-200, 2e-200], [7.0, 7.0, 7.0],
                        [2.0**20, 2.0**20 + 2.0**-32, 2.0**20], [1e150, -3e149, 0.5])]
EDGES += NORM_EDGES


@pytest.mark.parametrize("request_", EDGES, ids=lambda r: r.program.describe())
def test_balls_hold_the_exact_values_at_the_edges(request_: Request) -> None:
    balls, exact = enclose(request_), evaluate(request_)
    assert exact.output is not None and exact.grads is not None
    assert not _outside(balls.output, exact.output), request_.program.describe()
    assert not _outside(balls.grads["x"], exact.grads["x"]), request_.program.describe()


@settings(max_examples=40, deadline=None)
@given(cases, dtypes)
def test_fast_budget_is_at_least_the_exact_budget(case: Case, dtype: str) -> None:
    request = case.request(dtype)
    try:
        fast = enclosure.fast_budget(request, enclose(request))
    except NotEnclosed:
        return
    exact = error_budget(request)
    pairs = [("output", fast.output, exact.output)]
    pairs += [(f"grad[{n}]", fast.grads[n], exact.grads[n]) for n in exact.grads]
    for where, got, want in pairs:
        low = ~(got >= want)
        assert not low.any(), (f"{where} of {request.program.describe()}: fast budget "
                                 f"{got[low][:3]} below the exact {want[low][:3]}")


def _near_bound(exact: np.ndarray, bound: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Values at ``exact + where·bound``: on, just inside and just outside each bound
    (the rounded exact value where the bound is infinite: overflow allowed)."""
    flat = [float(Fraction(e) + Fraction(w) * Fraction(float(b) if math.isfinite(b) else 0))
            for e, b, w in zip(np.asarray(exact, dtype=object).ravel().tolist(),
                               np.broadcast_to(bound, exact.shape).ravel().tolist(),
                               where.ravel().tolist(), strict=True)]
    return np.array(flat).reshape(exact.shape)


@settings(max_examples=40, deadline=None)
@given(cases, dtypes, st.data())
def test_fast_verdicts_equal_exact_verdicts_at_the_edge_of_the_budget(
        case: Case, dtype: str, data: st.DataObject) -> None:
    request = case.request(dtype)
    try:
        balls = enclose(request)
    except NotEnclosed:
        return
    budget = enclosure.fast_budget(request, balls)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    steps = st.sampled_from([0.0, 0.5, 1.0, -1.0, 1.0 + 2**-40, -1.0 - 2**-40, 3.0])
    arrays = [("output", exact.output, balls.output, budget.output)]
    arrays += [(n, exact.grads[n], balls.grads[n], budget.grads[n]) for n in exact.grads]
    for where, want, ball, bound in arrays:
        shifts = np.array(data.draw(st.lists(steps, min_size=want.size, max_size=want.size)))
        actual = _near_bound(want, bound, shifts.reshape(want.shape))
        inside, unsure = decide(actual, ball, bound)
        bounds = np.broadcast_to(bound, want.shape)
        for i in map(tuple, np.argwhere(~unsure)):
            expected = within(float(actual[i]), Fraction(want[i]), float(bounds[i]))
            assert inside[i] == expected, (
                f"{where}{list(i)}={actual[i]!r} against {want[i]} ± {bounds[i]!r}: "
                f"fast says inside={inside[i]}, exact says {expected} "
                f"[{request.program.describe()}]")


@settings(max_examples=30, deadline=None)
@given(cases, dtypes, st.integers(0, 3))
def test_verify_finds_exactly_the_misses_the_exact_path_finds(case: Case, dtype: str,
                                                               ulps: int) -> None:
    request = case.request(dtype)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    # a backend off by `ulps` ulps everywhere, plus 2**20 ulps and twice the exact budget
    # on the first element (a norm's budget can exceed 2**20 ulps of a small output)
    first = float(error_budget(request, exact=exact).output.reshape(-1)[:1].sum())
    output = np.array([float(v) for v in exact.output.ravel()]).reshape(exact.output.shape)
    flat = (output + ulps * np.abs(np.spacing(output))).reshape(-1)
    if flat.size:
        flat[0] += 2**20 * abs(np.spacing(flat[0])) + 2**-30 + 2 * first
    output = flat.reshape(exact.output.shape)
    grads = {n: np.array([float(v) for v in g.ravel()]).reshape(g.shape)
             for n, g in exact.grads.items()}
    verdict = verify(request, output, grads)
    by_exact = verdict.budget.misses(exact, output, grads)
    assert {(m.where, m.index) for m in verdict.misses} == {(m.where, m.index) for m in by_exact}
    if output.size:
        assert ("output", (0,) * output.ndim) in {(m.where, m.index) for m in verdict.misses}



@settings(max_examples=30, deadline=None)
@given(cases, dtypes, st.integers(0, 3), st.integers(0, 3))
def test_another_output_is_judged_with_the_first_verdict_as_verify_judges_it(
        case: Case, dtype: str, first_ulps: int, second_ulps: int) -> None:
    request = case.request(dtype)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    rounded = np.array([float(v) for v in exact.output.ravel()]).reshape(exact.output.shape)
    bound = error_budget(request, exact=exact).output
    grads = {n: np.array([float(v) for v in g.ravel()]).reshape(g.shape)
             for n, g in exact.grads.items()}

    def off(ulps: int) -> np.ndarray:  # every element `ulps` ulps off, the first far outside
        flat = (rounded + ulps * np.abs(np.spacing(rounded))).reshape(-1)
        if flat.size:
            flat[0] += 2**20 * abs(np.spacing(flat[0])) + 2**-30 + 2 * float(bound.max())
        return flat.reshape(rounded.shape)

    verdict = verify(request, off(first_ulps), grads)
    second = off(second_ulps)
    counted = enclosure.outside_output(request, verdict, second, grads)
    expected = sum(m.where == "output" for m in verify(request, second, grads).misses)
    assert counted == expected, (
        f"outside_output counted {counted}, verify finds {expected} outside "
        f"[{request.program.describe()}, {dtype}, ulps {first_ulps} then {second_ulps}]")

def _block(width: int, batch: int, tanh: bool) -> Request:
    rng = np.random.default_rng(width)
    branch = [Node("t", "tanh", ("zb",))] if tanh else []
    nodes = (Node("z", "linear", ("x", "w")), Node("zb", "add", ("z", "b")), *branch,
             Node("s", "scale", ("t" if tanh else "zb",), Fraction(1, 3)),
             Node("y", "residual_add", ("x", "s")))
    program = Program((Input("x", (batch, width)), Input("w", (width, width)),
                       Input("b", (width,))), nodes, "y")
    values = {"x": rng.standard_normal((batch, width)),
              "w": rng.standard_normal((width, width)) / np.sqrt(width),
              "b": rng.standard_normal(width)}
    return Request(program, values, "float64", rng.standard_normal((batch, width)))


@pytest.mark.parametrize(("width", "batch"), [(16, 1), (16, 3), (40, 2)])
@pytest.mark.parametrize("tanh", [False, True])
def test_the_residual_block_is_decided_without_the_exact_interpreter(
        width: int, batch: int, tanh: bool) -> None:
    request = _block(width, batch, tanh)
    balls = enclose(request)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output, grads = _rounded_answer(exact)
    verdict = verify(request, output, grads)
    assert verdict.misses == [] and not verdict.exact_path
    assert verdict.decided_exactly == 0, f"{verdict.decided_exactly} elements needed Fractions"
    assert not _outside(balls.output, exact.output)


@pytest.mark.parametrize("request_", NORM_EDGES, ids=lambda r: r.program.describe())
def test_a_norm_at_the_edges_is_decided_without_the_exact_interpreter(request_: Request
                                                                      ) -> None:
    """Subnormal rows, constant rows and a huge mean: the balls stay narrower than the
    budget (the spec's own slack is relative, not an absolute 2**-190)."""
    exact = evaluate(request_)
    assert exact.output is not None and exact.grads is not None
    output = np.array([float(v) for v in exact.output])
    verdict = verify(request_, output, {"x": np.array([float(v) for v in exact.grads["x"]])})
    assert verdict.misses == [] and not verdict.exact_path, request_.program.describe()
    assert verdict.decided_exactly == 0, request_.program.describe()


def _assert_goes_to_the_exact_path(request: Request) -> None:
    """The enclosure refuses ``request``, and :func:`verify`, given the exact answer
    rounded to floats, decides it on the exact path."""
    with pytest.raises(NotEnclosed):
        enclose(request)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output, grads = _rounded_answer(exact)
    assert verify(request, output, grads).exact_path, request.program.describe()


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("x", [[1e300, -1e300, 0.0], [1e200, 3.0]])
def test_a_norm_whose_variance_overflows_goes_to_the_exact_path(op: str, x: list[float]
                                                                ) -> None:
    _assert_goes_to_the_exact_path(single_norm_case(op, np.array(x)).request("float64"))


@pytest.mark.parametrize("x", [1e300, 2.0**-1000, 5e-324])
def test_a_product_beyond_the_safe_range_goes_to_the_exact_path(x: float) -> None:
    _assert_goes_to_the_exact_path(_edge("scale", [x, 1.0], Fraction(1, 3)))


def test_an_op_without_a_rule_goes_to_the_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _block(4, 1, tanh=True)
    monkeypatch.setattr(type(OP_TABLE["tanh"]), "enclose", Op.enclose)
    _assert_goes_to_the_exact_path(request)


def test_the_containment_check_catches_a_tanh_ball_without_its_ulps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: a tanh ball that trusts ``np.tanh`` to be exact misses
    the exact value."""
    x = np.array([0.5, 0.7, 1.3, -2.2, 0.1])
    program = Program((Input("x", (5,)),), (Node("t", "tanh", ("x",)),), "t")
    request = Request(program, {"x": x}, "float64", np.ones(5))
    monkeypatch.setattr(tanh_rules, "LIBM_TANH_ULPS", -1)
    monkeypatch.setattr(tanh_rules, "half_ulp", lambda v: np.zeros(np.shape(v)))
    exact = evaluate(request)
    assert exact.output is not None
    assert _outside(enclose(request).output, exact.output), "np.tanh is exact on all five?"


def _norm_after_linear(op: str) -> Request:
    """``op(x @ w)`` with 5 rows of width 16: the product is long enough for Dot2, so the
    norm's argument is a ball about an ulp wide (its midpoint not the exact value)."""
    rng = np.random.default_rng(3)
    program = Program((Input("x", (5, 16)), Input("w", (16, 16))),
                      (Node("z", "linear", ("x", "w")),
                       Node("y", op, ("z",), eps=Fraction(1, 10**5))), "y")
    return Request(program, {"x": rng.standard_normal((5, 16)),
                             "w": rng.standard_normal((16, 16))}, "float64",
                   rng.standard_normal((5, 16)))


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_a_norm_after_a_linear_is_decided_without_the_exact_interpreter(op: str) -> None:
    request = _norm_after_linear(op)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output, grads = _rounded_answer(exact)
    verdict = verify(request, output, grads)
    assert verdict.misses == [] and not verdict.exact_path, (verdict.misses[:3], op)
    assert verdict.decided_exactly == 0, f"{verdict.decided_exactly} elements needed Fractions"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_the_containment_check_catches_a_norm_ball_without_its_spread(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A norm rule that forgets how far its output moves over the argument's ball (the
    Jacobian's bound ``through`` and the change of ``r``, which reads ``rms(R)``) misses
    the exact values."""
    request = _norm_after_linear(op)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    monkeypatch.setattr(norm_rules.NormSpread, "through",
                        lambda self, rad: np.zeros(np.shape(rad)))
    monkeypatch.setattr(norm_rules, "rms_up", lambda v: np.zeros((*np.shape(v)[:-1], 1)))
    balls = enclose(request)
    assert _outside(balls.output, exact.output), f"{op}: the output is inside without dy?"
    assert _outside(balls.grads["w"], exact.grads["w"]), f"{op}: grad[w] is inside?"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_the_containment_check_catches_a_norm_ball_without_its_remainder(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact arguments: the ball is the spec's value rounded to a double-double, and a
    rule that drops what that rounding leaves (the radius) misses the exact values."""
    request = single_norm_case(op, np.array([[0.5, -1.25, 3.0, 0.0], [1.0, 2.0, 2.0, 7.0]])
                               ).request("float64")
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    rounded = norm_rows.from_ratios
    monkeypatch.setattr(norm_rows, "from_ratios", lambda pairs, shape: dataclasses.replace(
        rounded(pairs, shape), rad=np.zeros(shape)))
    balls = enclose(request)
    assert _outside(balls.output, exact.output), f"{op}: every output a double-double?"
    assert _outside(balls.grads["x"], exact.grads["x"]), f"{op}: every gradient exact?"


def _relu_after_norm() -> Request:
    """``relu(rms_norm(x))`` inside a residual stack, x mostly zeros: the norm's zeros carry
    the spec's slack, so relu's sign is unknown there and the exact interpreter's slack
    takes the whole cotangent (through the norm's VJP, thousands)."""
    eps = Fraction(1, 10**5)
    nodes = (Node("n", "rms_norm", ("x",), eps=eps), Node("r", "relu", ("n",)),
             Node("s", "scale", ("r",), Fraction(1)), Node("h", "residual_add", ("x", "s")),
             Node("m", "rms_norm", ("h",), eps=eps), Node("q", "relu", ("m",)),
             Node("y", "residual_add", ("h", "q")))
    program = Program((Input("x", (5,)),), nodes, "y")
    return Request(program, {"x": np.array([0.0, 0.0, 0.0, 0.0, 1.0])}, "float64",
                   np.array([2.25, -3.5, -7.25, -7.75, 5.0]))


def test_fast_budget_carries_the_slack_of_a_relu_whose_sign_the_spec_does_not_know() -> None:
    request = _relu_after_norm()
    exact = evaluate(request)
    assert exact.slack > 1, f"the case lost its point: exact slack {float(exact.slack)}"
    fast = enclosure.fast_budget(request, enclose(request))
    want = error_budget(request, exact=exact)
    assert np.all(fast.output >= want.output), (fast.output, want.output)


def test_the_budget_check_catches_a_spec_slack_blind_to_relu_signs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in magnitudes alone (every element the largest) say no sign is unknown."""
    request = _relu_after_norm()
    monkeypatch.setattr(enclosure, "_least", lambda ball: enclosure._stand_in(ball.size))
    fast = enclosure.fast_budget(request, enclose(request))
    assert np.any(fast.output < error_budget(request).output), fast.output


# --- the verdict, the spec's slack and what enclose refuses, on hand-built programs ---


@pytest.mark.parametrize("case", sorted(RELU_ARGS) + sorted(TANH_ARGS))
def test_least_is_a_lower_bound_of_every_magnitude_in_the_ball(case: str) -> None:
    ball = _ball(*(RELU_ARGS[case] if case in RELU_ARGS else TANH_ARGS[case]))
    least = enclosure._least(ball)
    low, high = _corners(ball)
    for i in np.ndindex(*ball.mid.shape):
        ends = _q(low[i]), _q(high[i])
        smallest = Fraction(0) if ends[0] <= 0 <= ends[1] else min(map(abs, ends))
        assert 0 <= _q(least[i]) <= smallest, (
            f"_least({case})[{list(i)}] = {least[i]!r}, above the least magnitude "
            f"{float(smallest)!r}")
        size = abs(_q(ball.mid[i])) + abs(_q(ball.lo[i])) + _q(ball.rad[i])
        assert smallest - _q(least[i]) <= size / 2**48 + TINY, (
            f"_least({case})[{list(i)}] = {least[i]!r}, far below {float(smallest)!r}")


def _single(op: str, x: np.ndarray, cotangent: np.ndarray, alpha: Fraction | None = None,
            **attrs: Any) -> Request:
    program = Program((Input("x", x.shape),), (Node("y", op, ("x",), alpha, **attrs),), "y")
    return Request(program, {"x": x}, "float64", cotangent)


def _linear_then(op: str | None) -> Request:
    """``op(x @ w)`` with a long product (Dot2) and rows that cancel."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((9, 24)), rng.standard_normal((24, 8))
    nodes = [Node("z", "linear", ("x", "w"))]
    if op is not None:
        nodes.append(Node("y", op, ("z",)))
    program = Program((Input("x", (9, 24)), Input("w", (24, 8))), tuple(nodes), nodes[-1].name)
    return Request(program, {"x": x, "w": w}, "float64", rng.standard_normal((9, 8)))


VERDICT_REQUESTS = {
    "tanh near 0 and saturated": _single("tanh", np.array([0.0, 1e-9, -3e-5, 0.4, 21.0, -30.0]),
                                         np.linspace(1.0, 2.0, 6)),
    "relu at and near 0": _single("relu", np.array([0.0, 5e-324, -5e-324, 1e-300, -2.0, 3.0]),
                                  np.linspace(-1.0, 2.0, 6)),
    "layer_norm, near constant": _single("layer_norm", np.array(NORM_ROWS["near constant"]),
                                         np.linspace(1.0, 6.0, 6), eps=Fraction(1, 10**5)),
    "rms_norm, large mean": _single("rms_norm", np.array(NORM_ROWS["large mean"]),
                                    np.linspace(1.0, 4.0, 4), eps=Fraction(1, 10**5)),
    "linear, Dot2": _linear_then(None),
    "linear then tanh": _linear_then("tanh"),
    "linear then relu": _linear_then("relu"),
}

STEPS = (0.0, 0.5, 1.0, -1.0, 1.0 + 2.0**-30, -1.0 - 2.0**-30, 1.0 - 2.0**-30, 2.0)


def _steps(shape: tuple[int, ...], shift: int) -> np.ndarray:
    """:data:`STEPS` over the elements of ``shape``, starting at ``STEPS[shift]``."""
    return np.resize(np.roll(np.array(STEPS), -shift), shape)


def _near(exact: np.ndarray, bound: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``exact + step·bound`` rounded to floats (the exact value where the bound is 0)."""
    bounds = np.broadcast_to(bound, exact.shape)
    flat = [float(Fraction(e) + Fraction(step) * Fraction(float(b)))
            for e, b, step in zip(exact.reshape(-1).tolist(), bounds.reshape(-1).tolist(),
                                  steps.reshape(-1).tolist(), strict=True)]
    return np.array(flat).reshape(exact.shape)


@pytest.mark.parametrize("name", sorted(VERDICT_REQUESTS))
def test_verify_decides_every_element_as_the_exact_comparison_does(name: str) -> None:
    """Values on, just inside and just outside the bound that :func:`verify` uses: its
    misses are those :func:`within` finds against the exact values, element by element."""
    request = VERDICT_REQUESTS[name]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    budget = enclosure.fast_budget(request, enclose(request))
    for shift in range(len(STEPS)):  # each call mixes the steps over the elements
        output = _near(exact.output, budget.output, _steps(exact.output.shape, shift))
        grads = {n: _near(g, budget.grads[n], -_steps(g.shape, shift + 3))
                 for n, g in exact.grads.items()}
        verdict = verify(request, output, grads)
        want = {("output", i) for i in np.ndindex(*output.shape) if not within(
            float(output[i]), _q(exact.output[i]), float(np.broadcast_to(
                verdict.budget.output, output.shape)[i]))}
        want |= {(f"grad[{n}]", i) for n, g in grads.items() for i in np.ndindex(*g.shape)
                 if not within(float(g[i]), _q(exact.grads[n][i]), float(np.broadcast_to(
                     verdict.budget.grads[n], g.shape)[i]))}
        got = {(m.where, m.index) for m in verdict.misses}
        assert got == want, (f"verify({name}) steps from {shift}: misses {sorted(got)[:4]}, "
                             f"exact comparison {sorted(want)[:4]}")
        assert verdict.exact_path is False, f"verify({name}) went to the exact path"


@pytest.mark.parametrize("name", sorted(set(VERDICT_REQUESTS) - {"relu at and near 0"}))
def test_the_fast_budget_is_the_exact_budget_up_to_the_balls(name: str) -> None:
    """At least the exact budget (sound), and within ``1 + 2**-20`` of it for rational
    programs, whose arguments are far from relu's kink: the balls are an ulp or two wide,
    far below any budget. With tanh or a norm, the spec's slack is doubled to cover the
    roundings of its stand-in: within 2 (``1 + 2**-20``) of it."""
    request = VERDICT_REQUESTS[name]  # not relu at 0: the radius widens the unsure set
    rational = all(OP_TABLE[n.op].rational for n in request.program.nodes)
    factor = Fraction(1 if rational else 2) * (1 + Fraction(1, 2**20))
    fast = enclosure.fast_budget(request, enclose(request))
    exact = error_budget(request)
    pairs = [("output", fast.output, exact.output)]
    pairs += [(f"grad[{n}]", fast.grads[n], exact.grads[n]) for n in exact.grads]
    for where, got, want in pairs:
        got_, want_ = np.broadcast_arrays(got, want)
        for i in np.ndindex(*got_.shape):
            g, w = Fraction(float(got_[i])), Fraction(float(want_[i]))
            assert w <= g <= w * factor + TINY, (
                f"{where}[{list(i)}] of {name}: fast budget {float(g)!r}, exact {float(w)!r}")


def test_an_element_the_balls_cannot_place_is_decided_exactly() -> None:
    """A ball that straddles ``actual ± bound`` leaves the element undecided; verify then
    asks the exact interpreter: a relu's zero budget, one element an ulp off."""
    ball = Ball(np.array([1.0, 1.0, 1.0]), np.array([2.0**-60, 0.0, 2.0**-60]),
                np.array([0.0, 2.0**-70, 0.0]))
    actual = np.array([1.0 + 2.0**-20, 1.0 + 2.0**-21, 1.0 + 2.0**-10])
    inside, unsure = decide(actual, ball, np.full(3, 2.0**-20))
    assert unsure.tolist() == [True, False, False], f"unsure {unsure.tolist()}"
    assert inside.tolist()[1:] == [True, False], f"inside {inside.tolist()}"
    request = _single("relu", np.array([-1.0, 2.0]), np.array([1.0, 1.0]))
    off = np.array([5e-324, 2.0])  # relu(-1) is 0: off by the least subnormal
    verdict = verify(request, off, {"x": np.array([0.0, 1.0])})
    found = [(m.where, m.index, m.actual, m.expected, m.bound) for m in verdict.misses]
    assert found == [("output", (0,), 5e-324, 0, 0.0)], f"verify(relu, {off}): misses {found}"


@pytest.mark.parametrize("bound", [0.0, 2.0**-30, math.inf])
def test_decide_matches_within_where_it_decides(bound: float) -> None:
    rng = np.random.default_rng(9)
    mid = rng.standard_normal(12)
    lo = np.spacing(mid) * rng.uniform(-0.5, 0.5, 12)
    rad = np.where(np.arange(12) % 3 == 0, 0.0, np.abs(np.spacing(mid)))
    ball = Ball(mid, rad, lo)
    centre = _centre(ball)
    for step in STEPS:
        actual = np.array([float(c + Fraction(step) * Fraction(bound if math.isfinite(bound)
                                                                else 1.0)) for c in centre])
        inside, unsure = decide(actual, ball, np.full(12, bound))
        for i in range(12):
            if unsure[i]:
                continue
            worst = [within(float(actual[i]), centre[i] + s * Fraction(float(rad[i])), bound)
                     for s in (-1, 0, 1)]
            assert all(v == inside[i] for v in worst), (
                f"decide({actual[i]!r}, {float(centre[i])!r} ± {rad[i]!r}, bound {bound}) = "
                f"{inside[i]}, but within over the ball gives {worst}")
        if bound == 0.0:
            exact_rad = rad == 0
            assert not unsure[exact_rad].any(), f"an exact ball left unsure at {step}"


def test_decide_counts_the_double_doubles_tail_before_calling_an_element_exact() -> None:
    """``1 + 2**-52`` against the exact ball ``1 - 2**-110``: their difference rounds to
    ``2**-52``, the bound, but is ``2**-110`` above it. The tail of that subtraction keeps
    the element off the exact branch (unsure: the exact path says outside), where
    reading the rounded difference alone would call it inside."""
    actual, ball = np.array([1 + 2.0**-52]), Ball(np.array([1.0]), np.zeros(1),
                                                  np.array([-(2.0**-110)]))
    inside, unsure = decide(actual, ball, np.array([2.0**-52]))
    exact = Fraction(1) - Fraction(2) ** -110
    assert not within(float(actual[0]), exact, 2.0**-52), "the case is outside by design"
    assert (bool(inside[0]), bool(unsure[0])) == (False, True), (
        f"decide(1 + 2**-52, 1 - 2**-110 ± 0, bound 2**-52) = inside {inside}, unsure "
        f"{unsure}, but should be unsure (|diff| = 2**-52 + 2**-110 > the bound)")


@pytest.mark.parametrize("bad", ["non-finite", "shape", "no rule"])
def test_enclose_refuses_what_it_does_not_cover(bad: str, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    x = np.array([1.0, 2.0])
    request = _single("tanh", np.array([1.0, math.inf]) if bad == "non-finite" else x,
                      np.ones(2))
    if bad == "shape":
        program = Program((Input("x", (2,)), Input("w", (3, 2))),
                          (Node("y", "linear", ("x", "w")),), "y")
        request = Request(program, {"x": x, "w": np.ones((3, 2))}, "float64", None)
    if bad == "no rule":
        monkeypatch.setattr(type(OP_TABLE["tanh"]), "enclose", Op.enclose)
    with pytest.raises(NotEnclosed):
        enclose(request)


def test_a_forward_enclosure_gives_infinite_gradient_bounds() -> None:
    request = VERDICT_REQUESTS["linear then tanh"]
    forward = enclose(request, reverse=False)
    assert forward.grads == {} and forward.cotangents == {}, "reverse=False has no gradients"
    budget = enclosure.fast_budget(request, forward)
    assert all(np.isinf(g).all() for g in budget.grads.values()), "grad bounds not infinite"
    full = enclosure.fast_budget(request, enclose(request))
    assert np.array_equal(budget.output, full.output), (
        f"output bound {budget.output} forward-only, {full.output} with the reverse pass")


def test_the_spec_slack_bounds_the_exact_interpreters_slack() -> None:
    """tanh's enclosure error reaches the output and, through relu's sign test, the
    gradients: the fast oracle's stand-in slack is at least the interpreter's."""
    for name in ("tanh near 0 and saturated", "linear then tanh", "layer_norm, near constant",
                 "rms_norm, large mean"):
        request = VERDICT_REQUESTS[name]
        slack = enclosure._spec_slack(request.program, enclose(request))
        exact = evaluate(request).slack
        assert exact <= slack, (
            f"{name}: stand-in slack {float(slack)!r}, the interpreter's {float(exact)!r}")
    for name in ("relu at and near 0", "linear, Dot2"):
        request = VERDICT_REQUESTS[name]
        slack = enclosure._spec_slack(request.program, enclose(request))
        assert slack == 0, f"{name}: a rational program's slack is 0, got {slack}"


def test_the_spec_slack_adds_the_gradient_slack_of_every_use_of_a_value() -> None:
    """x feeds four tanh nodes under a cotangent of 2**40, so the gradient's slack (four
    tanh VJP parts, added) dominates; the stand-in bound, which doubles its sum, must hold
    all four (keeping only the last part would give half the interpreter's slack)."""
    nodes = (*(Node(f"t{i}", "tanh", ("x",)) for i in range(4)),
             Node("a1", "add", ("t0", "t1")), Node("a2", "add", ("t2", "t3")),
             Node("h", "add", ("a1", "a2")))
    program = Program((Input("x", (2,)),), nodes, "h")
    request = Request(program, {"x": np.array([0.5, 0.5])}, "float64", np.full(2, 2.0**40))
    slack = enclosure._spec_slack(program, enclose(request))
    exact = evaluate(request).slack
    assert exact <= slack, (
        f"_spec_slack(x through four tanh) = {float(slack)!r}, but should be at least the "
        f"interpreter's {float(exact)!r}")


def _rounded(values: np.ndarray) -> np.ndarray:
    return np.array([float(v) for v in values.reshape(-1).tolist()]).reshape(values.shape)


def _rounded_answer(exact: ExactResult) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The exact output and gradients rounded to float64: a backend's best answer."""
    assert exact.output is not None and exact.grads is not None
    return _rounded(exact.output), {n: _rounded(g) for n, g in exact.grads.items()}


def test_a_value_far_outside_its_bound_is_decided_by_the_balls() -> None:
    """A miss by 2**20 bounds needs no exact arithmetic: the miss carries the actual value,
    the ball's midpoint (within its radius of the exact value) and the bound."""
    request = VERDICT_REQUESTS["linear then tanh"]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output, grads = _rounded(exact.output), {n: _rounded(g) for n, g in exact.grads.items()}
    budget = verify(request, output, grads).budget
    output[2, 3] += 2.0**20 * float(budget.output[2, 3]) + 2.0**-40
    verdict = verify(request, output, grads)
    assert verdict.decided_exactly == 0 and verdict.exact_path is False, verdict
    found = [(m.where, m.index, m.actual, m.bound) for m in verdict.misses]
    assert found == [("output", (2, 3), output[2, 3], float(verdict.budget.output[2, 3]))], found
    ball = enclose(request).output
    gap = abs(verdict.misses[0].expected - _q(exact.output[2, 3]))
    assert gap <= _q(ball.rad[2, 3]) + abs(_q(ball.lo[2, 3])), (
        f"expected {float(verdict.misses[0].expected)!r} is {float(gap)!r} from the exact value")


def test_a_missing_or_misshapen_result_is_a_shape_miss_and_the_rest_is_still_judged() -> None:
    request = VERDICT_REQUESTS["linear then tanh"]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    grads = {"x": _rounded(exact.grads["x"]) + 1.0}  # every element off; no grad for w
    verdict = verify(request, _rounded(exact.output)[:, :2], grads)
    shape = [(m.where, m.index, m.expected, m.bound) for m in verdict.misses
             if m.where.endswith(".shape")]
    assert shape == [("output.shape", (), 0, 0.0), ("grad[w].shape", (), 0, 0.0)], shape
    assert all(math.isnan(m.actual) for m in verdict.misses if m.where.endswith(".shape"))
    off = {m.index for m in verdict.misses if m.where == "grad[x]"}
    assert off == set(np.ndindex(*grads["x"].shape)), f"grad[x] misses {sorted(off)[:4]}"


def test_a_forward_mode_request_is_judged_on_the_exact_path() -> None:
    program = Program((Input("x", (3,)),), (Node("y", "tanh", ("x",)),), "y")
    request = Request(program, {"x": np.array([0.1, -2.0, 0.7])}, "float64", np.ones(3),
                      {"x": np.array([1.0, 0.5, -1.0])})
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None and exact.tangent is not None
    tangent = _rounded(exact.tangent) + np.array([0.0, 1.0, 0.0])
    output, grads = _rounded(exact.output), {"x": _rounded(exact.grads["x"])}
    verdict = verify(request, output, grads, tangent)
    want = error_budget(request, exact=exact).misses(exact, output, grads, tangent)
    assert verdict.exact_path is True and verdict.decided_exactly == 0, verdict
    assert np.array_equal(verdict.budget.output, error_budget(request).output), verdict.budget
    assert [(m.where, m.index) for m in verdict.misses] == [(m.where, m.index) for m in want]
    assert [m.where for m in verdict.misses] == ["tangent"], verdict.misses


@pytest.mark.parametrize("actual", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_is_outside_any_finite_bound(actual: float) -> None:
    ball = Ball(np.array([1.0, 1.0]), np.array([2.0**-60, 0.0]), np.array([2.0**-70, 0.0]))
    inside, unsure = decide(np.array([actual, actual]), ball, np.array([1e300, math.inf]))
    assert inside.tolist() == [False, True] and unsure.tolist() == [False, False], (
        f"decide({actual}) against 1 ± (1e300, inf): inside {inside}, unsure {unsure}")


def test_a_dead_node_and_an_unused_input_do_not_stop_the_reverse_pass() -> None:
    """``d = tanh(u)`` does not reach the output and ``v`` is not read: the gradients of
    the others are still enclosed, ``v``'s is an exact zero, and the slack still bounds the
    interpreter's."""
    program = Program((Input("x", (3,)), Input("v", (2,))),
                      (Node("t", "tanh", ("x",)), Node("y", "mul", ("t", "x")),
                       Node("d", "tanh", ("y",))), "y")
    request = Request(program, {"x": np.array([0.3, -1.2, 2.0]), "v": np.array([1.0, 2.0])},
                      "float64", np.array([1.0, -2.0, 0.5]))
    balls, exact = enclose(request), evaluate(request)
    assert exact.grads is not None
    for name in ("x", "v"):
        _assert_holds(balls.grads[name], [exact.grads[name]], f"grad[{name}] with a dead node")
    assert balls.grads["v"].mid.shape == (2,) and not balls.grads["v"].rad.any(), balls.grads
    assert not balls.grads["v"].mid.any(), f"grad[v] = {balls.grads['v'].mid}, want 0"
    slack = enclosure._spec_slack(program, balls)
    assert slack >= exact.slack > 0, f"slack {float(slack)!r}, the interpreter's {exact.slack}"


def test_fast_verdict_at_relus_kink_is_the_exact_one() -> None:
    """An input exactly 0 (a point ball) is surely <= 0: relu's derivative there is the
    declared 0, so a gradient of 1 at the kink misses in the fast verdict as in the exact
    one (a sum of doubles that rounds to 0 is exactly 0: no rounding to allow for)."""
    program = Program((Input("x", (2,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([0.0, 1.0])}, "float64", np.array([1.0, 1.0]))
    output, grads = np.array([0.0, 1.0]), {"x": np.array([1.0, 1.0])}
    exact = evaluate(request)
    want = [str(m) for m in error_budget(request, exact=exact).misses(exact, output, grads)]
    got = [str(m) for m in enclosure.verify(request, output, grads).misses]
    assert want and len(got) == len(want), (
        f"verify(relu at 0, grad 1) misses {got}, the exact path misses {want}")


# --- _trace: the values and slacks the budget reads ---


def _trace_case() -> tuple[Program, Enclosed]:
    """``x`` an input, ``t = tanh(x)``, ``s = add(t, x)`` the argument of
    ``n = layer_norm(s)``: balls with low parts and radii chosen so that the largest
    ``|lo| + rad`` is neither the largest ``|lo|`` nor the largest ``rad``, and is not a
    float (``2**-59 (1 + 2**-53)``: a sum rounded to nearest falls below it); ``n``'s
    radius is infinite."""
    program = Program((Input("x", (2, 3)),),
                      (Node("t", "tanh", ("x",)), Node("s", "add", ("t", "x")),
                       Node("n", "layer_norm", ("s",), eps=EPS)), "n")
    e = 2.0**-60
    lo = np.array([[e, 0.0, -e], [0.0, e / 2, 0.0]])
    rad = np.array([[0.0, 1.5 * e, e * (1 + 2.0**-52)], [0.0, e, 0.0]])  # |lo| + rad: no float
    mid = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    values = {
        "x": Ball.exact(mid),
        "t": Ball.of(np.tanh(mid), rad),
        "s": Ball(mid * 2, rad, lo),
        "n": Ball(mid / 2, np.array([[0.0, math.inf, 1.0], [0.0, 0.0, 0.0]]), lo),
    }
    return program, Enclosed(values, {}, values["n"], {})


def test_trace_values_are_midpoints_tanh_outputs_fractions_and_norm_arguments_exact() -> None:
    program, enclosed = _trace_case()
    trace = enclosure._trace(program, enclosed)
    for name in ("x", "n"):  # plain midpoints, float64
        got = np.asarray(trace.values[name])
        assert got.dtype == np.float64 and np.array_equal(got, enclosed.values[name].mid), (
            f"_trace values[{name}]={got.tolist()}, but should be the midpoints")
    t, s = enclosed.values["t"], enclosed.values["s"]
    for name, want in (("t", [[F(m) for m in row] for row in t.mid.tolist()]),
                       ("s", _exact_rows(s))):
        got = np.asarray(trace.values[name])
        kinds = {type(v) for v in got.reshape(-1)}
        assert kinds == {Fraction} and got.tolist() == want, (
            f"_trace values[{name}]={got.tolist()} of {kinds}, but should be the Fractions "
            f"{want} ({'the midpoints' if name == 't' else 'mid + lo, exactly'})")


def test_trace_slack_is_the_largest_lo_plus_rad_rounded_up_and_2_pow_1100_if_infinite() -> None:
    program, enclosed = _trace_case()
    trace = enclosure._trace(program, enclosed)
    assert trace.slack["x"] == 0, f"slack[x]={trace.slack['x']}, but an exact ball's is 0"
    assert trace.slack["n"] == F(2) ** 1100, (
        f"slack[n]={float(trace.slack['n'])!r}, but an infinite radius gives 2**1100")
    for name in ("t", "s"):
        ball = enclosed.values[name]
        want = max(abs(low) + r for lr, rr in zip(_rows(ball.lo), _rows(ball.rad), strict=True)
                   for low, r in zip(lr, rr, strict=True))
        got = trace.slack[name]
        assert isinstance(got, Fraction) and F(float(got)) == got, (
            f"slack[{name}]={got!r}, but should be a float64 value as a Fraction")
        assert want <= got <= want * (1 + MARGIN), (
            f"slack[{name}]={float(got)!r}, but should be max(|lo| + rad)={float(want)!r} "
            f"rounded up")


def test_trace_slack_of_an_empty_value_is_0() -> None:
    program = Program((Input("x", (0, 3)),), (Node("t", "tanh", ("x",)),), "t")
    values = {"x": Ball.exact(np.zeros((0, 3))), "t": Ball.exact(np.zeros((0, 3)))}
    trace = enclosure._trace(program, Enclosed(values, {}, values["t"], {}))
    assert trace.slack == {"x": 0, "t": 0}, f"slack {trace.slack}, but should be 0 for both"
