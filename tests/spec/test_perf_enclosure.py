"""The fast oracle is sound: its balls hold the exact values, its verdicts are the exact ones.

Every test compares :mod:`resverify.spec.enclosure` with the exact interpreter
(:mod:`resverify.spec.exact`, Fractions) on small generated programs: residual stacks of
every branch family the enclosure covers, broadcasting add and mul, pre-norm and post-norm
stacks, single norms, and norms of rows whose variance is far below ε (a constant row
plus a few ulps, around a large mean), in float64 and float16.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

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
from resverify.spec import enclosure
from resverify.spec.budget import error_budget
from resverify.spec.compare import within
from resverify.spec.enclosure import Ball, NotEnclosed, decide, enclose, verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Op
from resverify.spec.ops import layer_norm as norm_rules
from resverify.spec.ops import tanh as tanh_rules
from resverify.spec.request import Request

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
    output = np.array([float(v) for v in exact.output.ravel()]).reshape(exact.output.shape)
    grads = {n: np.array([float(v) for v in g.ravel()]).reshape(g.shape)
             for n, g in exact.grads.items()}
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
    output = np.array([float(v) for v in exact.output.ravel()]).reshape(exact.output.shape)
    grads = {n: np.array([float(v) for v in g.ravel()]).reshape(g.shape)
             for n, g in exact.grads.items()}
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
    output = np.array([float(v) for v in exact.output.ravel()]).reshape(exact.output.shape)
    grads = {n: np.array([float(v) for v in g.ravel()]).reshape(g.shape)
             for n, g in exact.grads.items()}
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
    rounded = norm_rules.from_fractions
    monkeypatch.setattr(norm_rules, "from_fractions", lambda v: dataclasses.replace(
        rounded(v), rad=np.zeros(np.shape(v))))
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
