"""The budget interpreter (:mod:`resverify.spec.budget`: ``error_budget``, ``Budget``): its
bounds hold for every correct run and are tight enough to catch real errors.

Residual stacks (``h + α·F(h)``, F linear, g·relu, a·h, tanh or tanh∘linear): the
reference backend lies inside the budget, a result just beyond it is a miss, and float32
arithmetic, a wrong relu'(0), a missing gradient are caught.

Pinned by mutation testing (docs/strength.md, "The mutation score of resverify's own
code"): each test of that section kills mutants of ``tools/mutation.py`` that survived the
rest of the tests, a changed behaviour no test noticed (the zero budget of an unused input,
what ``Budget.misses`` reports, the ``gamma_{k-1}`` charged for a value used k times, the
rounding of the cotangent to a narrower dtype, the backward pass going past a dead node).
Exact values are compared exactly.

Overflow: where a NaN can be right: only where an overflow a correct engine may meet
reaches it. The budget of an element is infinite (anything, NaN included, is accepted) only
where some value on the way to it may round past the dtype's largest finite value, and the
overflow can reach the element through arithmetic (``inf - inf``, ``0 · inf``). A value
below the largest finite one is not an overflow, however close to it; and relu's
derivative below 0 is exactly 0 by the spec (a selection), so an overflowed cotangent
stops there: a select-based engine gives a finite x̄, and a mask-multiply one
(``g * (a > 0)``, ``inf · 0 = NaN``) is wrong.

The norms' budget, both ways: correct runs land well inside, a value just beyond is
refused, and the largest ratio of observed error to budget says how tight it is. The rows
cover what the derivation in docs/error-budget.md names: widths 1 to 384, rows of unit
size, tiny ones (variance far below ε: the centred values cancel) and large ones, shifted
far from 0 or not, in float64, float32 and float16 (bfloat16 on the adapters that claim
it). Each run is judged by ``Budget.misses`` (the one comparison rule); the ratio
``|actual - exact| / budget`` is measured exactly in rationals.

A norm's argument gradient, delivered in parts, lies inside the budget wherever the
argument has other uses. Automatic differentiation through a norm's composition (JAX, HIPS
autograd, a user's own engine) does not hand back ``ā = r (ḡ - mean(ḡ) - y mean(ḡ y))`` as
one array: the direct term, the statistics term (in two halves when the square is
``c * c``) and, for layer_norm, the mean's share arrive as separate parts, each added on
its own into the argument's other gradient parts: the identity path's cotangent, in a
residual block ``x + F(x)``. Each addition rounds at the size of the running sum. The
budget counts those parts (docs/error-budget.md, "The argument's gradient arrives in
parts"): ``LayerNorm.grad_parts`` and the size of their sum in the norm's ``budget_vjp``,
read by the "value used k times" rule. A JAX flake count (seed 7109) found the case where
counting the norm as one part fell short: ``grad x[1, 5]`` off by 8.68e-16 (two roundings,
one ulp) against 8.59e-16. That vector is kept in ``tests/data/`` and judged on every
adapter; the law of that section builds the parts as the composition does, in NumPy, and
adds them in every order Hypothesis picks.

Forward mode: the output tangent's budget, both ways: correct forward-mode runs land
inside it, a tangent just beyond it is refused, and the largest observed error/budget ratio
says how tight it is. Why: ``Budget.tangent`` is what every forward-mode property judges a
backend by, so it must hold for every correct implementation (the reference, and each
adapter that claims ``jvp``) and still catch a wrong one. The requests are the residual
stacks and the norm rows above, each given one random tangent per input; ratios are
measured exactly in rationals. The fast verdict
(:func:`resverify.spec.enclosure.verify`) judges a forward-mode request on this exact
budget.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.extra.numpy import arrays

from resverify.impl import resolve_backend
from resverify.impl.backend import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.impl.tensor import Tensor
from resverify.properties.cases import round_to_dtype
from resverify.properties.judge import expected_from_spec, judge
from resverify.reports.verdicts import vector_verdict
from resverify.spec.budget import Budget, error_budget
from resverify.spec.codec import request_from_dict
from resverify.spec.compare import cells
from resverify.spec.enclosure import verify
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.fixtures import linear_block_request, seed_cases, shared_operand_request
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request, Result, Value
from resverify.spec.rounding import LARGEST, TINY, UNIT_ROUNDOFF, Ctx, gamma
from tests.installed import installed_backend
from tests.mutants.base import Mutant as Reference

F = Fraction
BACKEND = NumpyBackend()
SETTINGS = settings(max_examples=40, deadline=None)
ADAPTERS = [name for name, module in (("torch", "torch"), ("jax", "jax"),
                                      ("autograd", "autograd"))
            if importlib.util.find_spec(module) is not None]


# --- residual stacks: the reference inside the budget, a result just beyond it a miss ---


BRANCHES = ("linear", "relu", "ax", "tanh", "tanh_linear")


def values(dtype: str, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    floats = {"float16": st.floats(-4, 4, width=16), "float32": st.floats(-4, 4, width=32),
              "float64": st.floats(-4, 4)}[dtype]
    elements = st.one_of(floats, st.sampled_from([0.0, 1.0, -0.5]))
    return arrays(np.dtype(dtype), shape, elements=elements)


@st.composite
def residual_requests(draw: st.DrawFn, dtype: str) -> Request:
    """Stacks of ``h + α·F(h)`` with F linear, g·relu, a·h, tanh or tanh∘linear."""
    width = draw(st.integers(1, 8))
    shape = draw(st.sampled_from([(width,), (draw(st.integers(0, 3)), width)]))
    inputs, nodes, prev = [Input("x", shape)], [], "x"
    for i in range(draw(st.integers(1, 3))):
        branch = draw(st.sampled_from(BRANCHES))
        if branch in ("linear", "tanh_linear"):
            inputs.append(Input(f"w{i}", (width, width)))
            nodes.append(Node(f"f{i}", "linear", (prev, f"w{i}")))
            if branch == "tanh_linear":
                nodes.append(Node(f"t{i}", "tanh", (f"f{i}",)))
        elif branch == "relu":
            nodes.append(Node(f"r{i}", "relu", (prev,)))
            gain = draw(st.fractions(-2, 2, max_denominator=12))
            nodes.append(Node(f"f{i}", "scale", (f"r{i}",), gain))
        elif branch == "ax":
            inputs.append(Input(f"a{i}", ()))
            nodes.append(Node(f"f{i}", "mul", (f"a{i}", prev)))
        else:
            nodes.append(Node(f"f{i}", "tanh", (prev,)))
        last = nodes[-1].name
        if draw(st.booleans()):
            nodes.append(Node(f"s{i}", "scale", (last,), draw(st.sampled_from(
                [F(1, 2), F(1, 3), F(1, 10), F(-3, 4), F(2)]))))
            last = f"s{i}"
        nodes.append(Node(f"h{i}", "residual_add", (prev, last)))
        prev = f"h{i}"
    out_shape: tuple[int, ...] = shape
    if draw(st.booleans()):
        nodes.append(Node("total", "sum", (prev,)))
        prev, out_shape = "total", ()
    data = {i.name: draw(values(dtype, i.shape)) for i in inputs}
    return Request(Program(tuple(inputs), tuple(nodes), prev), data, dtype,
                   draw(values(dtype, out_shape)))


def backend_misses(request: Request) -> tuple[list[str], ExactResult, Budget]:
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    result = BACKEND.run(request)
    assert isinstance(result, Value), result
    return [str(m) for m in budget.misses(exact, result.output, result.grads)], exact, budget


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@SETTINGS
@given(data=st.data())
def test_reference_backend_lies_inside_the_budget(dtype: str, data: st.DataObject) -> None:
    request = data.draw(residual_requests(dtype))
    misses, _, _ = backend_misses(request)
    assert not misses, f"{misses[:3]} [{request.program.describe()}, {dtype}]"


def beyond(expected: Fraction, bound: float, sign: int) -> float:
    """The first float64 farther than ``1.01 * bound`` from ``expected`` on one side."""
    target = expected + sign * F(bound) * F(101, 100)
    value = float(target)
    while sign * (F(value) - target) <= 0:
        value = float(np.nextafter(value, sign * np.inf))
    return value


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@SETTINGS
@given(data=st.data())
def test_a_result_just_beyond_the_budget_is_a_miss(dtype: str, data: st.DataObject) -> None:
    request = data.draw(residual_requests(dtype))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    names = [n for n in ["output", *exact.grads]
             if (exact.output if n == "output" else exact.grads[n]).size]
    assume(names)
    where = data.draw(st.sampled_from(names))
    want = exact.output if where == "output" else exact.grads[where]
    bound = budget.output if where == "output" else budget.grads[where]
    flat = data.draw(st.integers(0, want.size - 1))
    sign = data.draw(st.sampled_from([-1, 1]))
    output = exact.output.astype(np.float64)
    grads = {n: g.astype(np.float64) for n, g in exact.grads.items()}
    moved = output if where == "output" else grads[where]
    moved.reshape(-1)[flat] = beyond(want.reshape(-1)[flat], float(bound.reshape(-1)[flat]), sign)
    misses = budget.misses(exact, output, grads)
    label = "output" if where == "output" else f"grad[{where}]"
    assert any(m.where == label for m in misses), (
        f"{label} moved to {moved.reshape(-1)[flat]!r}, 1.01 x budget "
        f"{bound.reshape(-1)[flat]:.3g} away, was accepted [{request.program.describe()}]")


@SETTINGS
@given(data=st.data())
def test_float64_linear_block_budget_is_within_32_roundoffs_of_its_magnitude(
        data: st.DataObject) -> None:
    width, rows = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8))
    program = Program((Input("x", (rows, width)), Input("w", (width, width))),
                      (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
                      "y")
    request = Request(program, {"x": data.draw(values("float64", (rows, width))),
                                "w": data.draw(values("float64", (width, width)))},
                      "float64", data.draw(values("float64", (rows, width))))
    budget = error_budget(request)
    u = float(UNIT_ROUNDOFF["float64"])
    # the absolute-value interpretation (Budget.magnitude may be the smaller exact size)
    x, w = (np.abs(np.asarray(request.inputs[n], dtype=np.float64)) for n in ("x", "w"))
    g = np.abs(np.asarray(request.cotangent, dtype=np.float64))
    sizes = {"output": x + x @ w, "grad[x]": g + g @ w.T, "grad[w]": x.T @ g}
    pairs = [("output", budget.output, sizes["output"])] + [
        (f"grad[{n}]", budget.grads[n], sizes[f"grad[{n}]"]) for n in budget.grads]
    for label, bound, size in pairs:
        ratio = np.max(bound / np.maximum(u * size, np.finfo(float).tiny), initial=0.0)
        assert ratio <= 32, f"{label}: budget is {ratio:.1f} u x magnitude [{width=}, {rows=}]"


def _in_float32(request: Request) -> Request:
    """The same program and values rounded to float32 (what a float32 backend computes on)."""
    return Request(request.program,
                   {k: v.astype(np.float32) for k, v in request.inputs.items()},
                   "float32", np.asarray(request.cotangent).astype(np.float32))


def test_float32_arithmetic_is_caught_by_the_float64_budget() -> None:
    """A backend that silently computes a float64 request in float32 is outside the budget."""
    rng = np.random.default_rng(7)
    program = Program((Input("x", (4, 8)), Input("w", (8, 8))),
                      (Node("l", "linear", ("x", "w")), Node("t", "tanh", ("l",)),
                       Node("y", "residual_add", ("x", "t"))), "y")
    request = Request(program, {"x": rng.normal(size=(4, 8)), "w": rng.normal(size=(8, 8))},
                      "float64", rng.normal(size=(4, 8)))
    narrow = _in_float32(request)
    result = BACKEND.run(narrow)
    assert isinstance(result, Value)
    exact = evaluate(request)
    misses = error_budget(request, exact=exact).misses(exact, result.output, result.grads)
    assert len(misses) > 0.9 * (32 + 32 + 64), f"only {len(misses)} misses"


def test_relu_derivative_one_at_zero_is_caught() -> None:
    """relu'(0) = 1 instead of the declared 0: the budget at an exact zero is zero."""
    request = Request(Program((Input("x", (2,)),), (Node("r", "relu", ("x",)),), "r"),
                      {"x": np.array([0.0, 2.0])}, "float64", np.ones(2))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    wrong = {"x": np.array([1.0, 1.0])}
    assert [m.index for m in budget.misses(exact, np.array([0.0, 2.0]), wrong)] == [(0,)]
    assert budget.grads["x"][0] == 0


def test_narrower_dtype_budget_covers_rounding_the_inputs() -> None:
    rng = np.random.default_rng(3)
    program = Program((Input("x", (3, 4)), Input("w", (4, 4))),
                      (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
                      "y")
    request = Request(program, {"x": rng.normal(size=(3, 4)), "w": rng.normal(size=(4, 4))},
                      "float64", rng.normal(size=(3, 4)))
    narrow = _in_float32(request)
    result = BACKEND.run(narrow)
    assert isinstance(result, Value)
    exact = evaluate(request)
    budget = error_budget(request, "float32", exact=exact)
    assert not budget.misses(exact, result.output, result.grads)
    assert np.all(budget.output > error_budget(request, exact=exact).output)


@pytest.mark.parametrize("name", sorted(seed_cases()))
def test_seed_fixtures_are_inside_their_budget(name: str) -> None:
    request, _, _ = seed_cases()[name]
    misses, _, budget = backend_misses(request)
    assert not misses, f"{misses} [{name}]"
    assert all(np.all(b >= 0) for b in [budget.output, *budget.grads.values()])


def test_shapes_follow_the_request_for_rank_zero_and_empty_axes() -> None:
    program = Program((Input("x", (0, 3)), Input("w", (3, 2)), Input("k", ())),
                      (Node("f", "linear", ("x", "w")), Node("s", "sum", ("f",)),
                       Node("y", "mul", ("s", "k"))), "y")
    request = Request(program, {"x": np.zeros((0, 3)), "w": np.ones((3, 2)), "k": np.array(2.0)},
                      "float64", np.array(1.0))
    budget = error_budget(request)
    assert budget.output.shape == ()
    assert {n: g.shape for n, g in budget.grads.items()} == {"x": (0, 3), "w": (3, 2), "k": ()}
    misses, _, _ = backend_misses(request)
    assert not misses


def test_shared_operand_budget_covers_twice_the_cotangent() -> None:
    request = shared_operand_request(cotangent=(0.1, 1 / 3))
    misses, exact, budget = backend_misses(request)
    assert not misses
    assert exact.grads is not None and exact.grads["x"][0] == 2 * F(0.1)
    # the accumulation adds the two copies once: one rounding of their sum
    u = UNIT_ROUNDOFF["float64"]
    assert F(float(budget.grads["x"][1])) >= u * 2 * F(1 / 3)


def test_bfloat16_budget_is_wider_than_float16() -> None:
    request = linear_block_request(w=np.array([[0.5, -1.0], [2.0, 0.25]]), dtype="float32")
    wide, narrow = error_budget(request, "bfloat16"), error_budget(request, "float16")
    assert np.all(wide.output > narrow.output)


def test_no_budget_for_a_rejected_program() -> None:
    program = Program((Input("a", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    request = Request(program, {"a": np.zeros((2, 2)), "b": np.zeros(2)}, "float64", None)
    with pytest.raises(InvalidRequest, match="rejects"):
        error_budget(request)


def test_a_missing_gradient_is_reported_as_a_miss() -> None:
    request = linear_block_request()
    misses, exact, budget = backend_misses(request)
    assert not misses and exact.output is not None and exact.grads is not None
    found = budget.misses(exact, exact.output.astype(np.float64),
                          {"x": exact.grads["x"].astype(np.float64)})
    assert [m.where for m in found] == ["grad[w] missing"]


def test_budget_near_overflow_is_inf_without_numpy_warnings() -> None:
    """Magnitudes past float64's range give an inf (unchecked) bound, silently: pytest turns
    warnings into errors, so a RuntimeWarning here would break the extremes profile."""
    program = Program((Input("x", (2,)), Input("w", (2, 2))),
                      (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
                      "y")
    huge = 1e308
    request = Request(program, {"x": np.array([huge, -huge]),
                                "w": np.array([[huge, 0.0], [1.0, huge]])},
                      "float64", np.array([huge, 0.0]))
    budget = error_budget(request)
    assert np.all(np.isinf(budget.output)), budget.output
    assert not np.any(np.isnan(budget.grads["w"])), budget.grads["w"]


def test_budget_is_never_nan_where_an_overflowed_magnitude_meets_zero() -> None:
    """inf·0 inside the analysis (a linear layer's magnitude overflows to inf, then meets
    the exact zero error of an input in a product) gives an infinite bound, never NaN:
    a NaN bound would bound nothing (resverify.spec.compare rejects every value against it)."""
    program = Program((Input("x", (2,)), Input("w", (2, 2)), Input("k", ())),
                      (Node("l", "linear", ("x", "w")), Node("m", "mul", ("l", "k"))), "m")
    huge = np.full(2, 1e308)
    request = Request(program, {"x": huge, "w": np.full((2, 2), 1e308), "k": np.array(0.0)},
                      "float64", huge)
    budget = error_budget(request)
    arrays = {"output": budget.output, **{f"grad[{n}]": g for n, g in budget.grads.items()}}
    nans = {name: int(np.isnan(a).sum()) for name, a in arrays.items() if np.isnan(a).any()}
    assert not nans, f"NaN bounds {nans} [{program.describe()}, float64]"


def test_product_of_a_subnormal_and_a_huge_value_is_inside_its_budget() -> None:
    """The rounding error of x·w scales with the product, not with u·x first (which
    underflows to 0 when x is subnormal): 3·2**-1074 · 1e30 needs 55 bits, so it rounds."""
    program = Program((Input("x", (1,)), Input("w", (1,))), (Node("y", "mul", ("x", "w")),), "y")
    request = Request(program, {"x": np.array([3 * 5e-324]), "w": np.array([1e30])}, "float64",
                      np.array([1.0]))
    misses, exact, budget = backend_misses(request)
    assert exact.output is not None
    error = abs(Fraction(float(np.float64(3 * 5e-324) * np.float64(1e30))) - exact.output[0])
    assert error > 0, "the case must round, or it shows nothing"
    assert not misses, f"{misses}: budget {budget.output[0]!r}, actual error {float(error)!r}"


# --- pinned by mutation testing (docs/strength.md): misses, parts, a dead node ---


def _pair_request(cotangent: tuple[float, float] = (0.5, 0.25)) -> Request:
    """``y = residual_add(x, x)`` with an unused input u: x gets two gradient parts."""
    program = Program((Input("x", (2,)), Input("u", (3,))),
                      (Node("y", "residual_add", ("x", "x")),), "y")
    return Request(program, {"x": np.array([1.0, -3.0]), "u": np.array([1.0, 2.0, 4.0])},
                   "float64", np.array(cotangent))


def test_an_unused_input_has_a_zero_budget_of_its_shape() -> None:
    budget = error_budget(_pair_request())
    assert np.array_equal(budget.grads["u"], np.zeros(3)), budget.grads["u"]


def test_misses_names_a_wrong_shape_and_every_missing_gradient() -> None:
    request = _pair_request()
    exact, budget = evaluate(request), error_budget(request)
    found = budget.misses(exact, np.zeros(3), {})
    assert [(m.where, m.index, m.expected, m.bound) for m in found] == [
        ("output.shape[3]", (), Fraction(0), 0.0), ("grad[x] missing", (), Fraction(0), 0.0),
        ("grad[u] missing", (), Fraction(0), 0.0)], found
    assert all(math.isnan(m.actual) for m in found), found


def test_misses_reports_each_element_beyond_its_budget() -> None:
    request = _pair_request()
    exact, budget = evaluate(request), error_budget(request)
    assert exact.output is not None and exact.grads is not None
    grads = {"x": np.array([1.0, 0.5]), "u": np.zeros(3)}
    found = budget.misses(exact, np.array([2.0, -6.5]), grads)
    assert [(m.where, m.index, m.actual, m.expected) for m in found] == [
        ("output", (1,), -6.5, Fraction(-6))], found
    assert found[0].bound == budget.output[1], found


def test_misses_needs_an_exact_output_and_gradients() -> None:
    request = _pair_request()
    exact = evaluate(request)
    half = dataclasses.replace(exact, grads=None)
    with pytest.raises(InvalidRequest, match="an exact result with an output and gradients"):
        error_budget(request).misses(half, np.zeros(2), {})


def test_two_gradient_parts_are_charged_gamma_1() -> None:
    c = Ctx("float64", float(UNIT_ROUNDOFF["float64"]), float(TINY["float64"]))
    request = _pair_request()
    assert request.cotangent is not None
    cot = np.abs(request.cotangent)
    expected = c.done(2 * cot, gamma(1, "float64") * (2 * cot), 2).err
    final = np.nextafter(expected * (1 + 2.0**-50), np.inf)  # the last addition, rounded up
    got = error_budget(request).grads["x"]
    assert np.array_equal(got, final), (got, final)


def test_a_narrower_dtype_charges_one_rounding_of_the_cotangent() -> None:
    """Judged in float32, the float64 cotangent is first rounded to float32: one rounding
    of ``|ȳ|`` plus a subnormal (all there is where ȳ = 0), then the two parts of x's
    gradient are summed."""
    c = Ctx("float32", float(UNIT_ROUNDOFF["float32"]), float(TINY["float32"]))
    request = _pair_request((0.5, 0.0))
    assert request.cotangent is not None
    cot = np.abs(request.cotangent)
    leaf = c.done(cot, c.u * cot + c.tiny)
    total = c.done(2 * leaf.mag, 2 * leaf.err + gamma(1, "float32") * (2 * leaf.hat), 2).err
    final = np.nextafter(total * (1 + 2.0**-50), np.inf)
    got = error_budget(request, "float32").grads["x"]
    assert np.array_equal(got, final), (got, final)


def test_a_node_that_feeds_nothing_does_not_stop_the_backward_budget() -> None:
    """The last node in order is dead (nothing reads it): the backward budget skips it and
    still charges x's gradient, which is 1 + 1/2 per element, not zero."""
    program = Program((Input("x", (2,)),), (
        Node("f", "scale", ("x",), alpha=Fraction(1, 2)),
        Node("y", "residual_add", ("x", "f")),
        Node("dead", "scale", ("x",), alpha=Fraction(3))), "y")
    request = Request(program, {"x": np.array([0.75, 3.0])}, "float32",
                      np.array([1.0, -1.0]))
    got = error_budget(request).grads["x"]
    assert np.all(got > 0), f"error_budget(...).grads['x'] = {got}, expected > 0 everywhere"


# --- overflow: where a NaN can be right ---


def _relu_branch(alpha: Fraction, cotangent: float, x: float = -1.0) -> Request:
    """``residual_add(x, scale(relu(x), α))`` in float16 (exact x̄ = ȳ for x < 0)."""
    program = Program((Input("x", (1,)),), (
        Node("r", "relu", ("x",)), Node("f", "scale", ("r",), alpha),
        Node("y", "residual_add", ("x", "f"))), "y")
    return Request(program, {"x": np.array([x], np.float16)}, "float16",
                   np.array([cotangent], np.float16))


class MaskedReluGrad(Reference):
    """relu's backward multiplies by the mask, ``g * (a > 0)``: right in exact arithmetic,
    NaN where the cotangent reaching it overflowed (``inf · 0``)."""

    name = "broken-masked-relu-grad"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != "relu":
            return super().apply(node, args)
        (a,) = args
        mask = (a.value > 0).astype(a.dtype)
        with np.errstate(invalid="ignore"):
            return Tensor(a.value * mask, (a,), lambda g: (g * mask,), "relu")


def _judged_grads(backend: NumpyBackend, request: Request) -> list[tuple[str, float, float, bool]]:
    with np.errstate(all="ignore"):  # as the suite runs a backend: IEEE overflow is no error
        result: Result = backend.run(request)
    assert isinstance(result, Value), result
    exact = evaluate(request)
    assert exact.grads is not None
    budget = error_budget(request, exact=exact)
    return [("x", float(c.actual), c.bound, c.ok)
            for c in cells(result.grads["x"], exact.grads["x"], budget.grads["x"])]


@pytest.mark.parametrize("alpha", [Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4)])
@pytest.mark.parametrize("cotangent", [32000.0, 32752.0, 32760.0, 40000.0, 65000.0])
def test_a_gradient_below_the_largest_float16_has_a_finite_budget(
        alpha: Fraction, cotangent: float) -> None:
    """x̄ = ȳ ≤ 65504 is never an overflow, whatever α does in the dead relu branch."""
    request = _relu_branch(alpha, cotangent)
    bound = error_budget(request).grads["x"][0]
    assert np.isfinite(bound), (f"budget of grad x[0] = {bound}, want finite "
                                f"[α = {alpha}, ȳ = {cotangent}, float16]")


@pytest.mark.parametrize(("alpha", "cotangent"), [(Fraction(2), 40000.0),
                                                  (Fraction(4), 20000.0)])
def test_a_nan_from_relu_of_an_overflowed_cotangent_fails(
        alpha: Fraction, cotangent: float) -> None:
    """α ȳ overflows float16 inside the dead branch; the select engine (the reference)
    gives x̄ = ȳ exactly and passes, the mask engine gives NaN and fails."""
    request = _relu_branch(alpha, cotangent)
    assert abs(float(alpha) * cotangent) > LARGEST["float16"]  # the branch does overflow
    good = _judged_grads(NumpyBackend(), request)
    bad = _judged_grads(MaskedReluGrad(), request)
    assert good == [("x", cotangent, good[0][2], True)], good
    assert np.isnan(bad[0][1]) and not bad[0][3], (
        f"mask engine: grad x[0] = {bad[0][1]} judged ok={bad[0][3]} against budget "
        f"{bad[0][2]}, want NaN judged FAIL [α = {alpha}, ȳ = {cotangent}]")


def test_a_nan_from_zero_times_an_overflowed_value_passes() -> None:
    """``y = x + mul(scale(x, 4), z)`` at x = 20000, z = 0 in float16: 4x overflows to inf
    and inf · 0 = NaN in every IEEE engine, so the output's budget is infinite and the
    reference's NaN passes (exact y = x)."""
    program = Program((Input("x", (1,)), Input("z", (1,))), (
        Node("s", "scale", ("x",), Fraction(4)), Node("m", "mul", ("s", "z")),
        Node("y", "residual_add", ("x", "m"))), "y")
    request = Request(program, {"x": np.array([20000.0], np.float16),
                                "z": np.array([0.0], np.float16)}, "float16",
                      np.array([1.0], np.float16))
    with np.errstate(all="ignore"):
        result = NumpyBackend().run(request)
    assert isinstance(result, Value)
    exact = evaluate(request)
    assert exact.output is not None
    budget = error_budget(request, exact=exact)
    (cell,) = cells(result.output, exact.output, budget.output)
    assert np.isnan(result.output[0]) and cell.bound == np.inf and cell.ok, (
        f"output[0] = {result.output[0]} against budget {cell.bound} ok={cell.ok}; want "
        "NaN accepted under an infinite budget")


# --- the norms: well inside, a value just beyond refused, the largest ratio ---


NORMS = ("layer_norm", "rms_norm")
WIDTHS = (1, 2, 3, 8, 64, 384)
SCALES = (1.0, 1e-2, 8.0, 1e-4, 1e-6)  # 1e-4 and 1e-6: variance far below ε = 1e-5


def norm_request(op: str, dtype: str, seed: int, eps: Fraction = Fraction(1, 10**5),
                 scale: float | None = None) -> Request:
    """``op(x, eps)`` on one or two random rows of a random width, scale and shift."""
    rng = np.random.default_rng(seed)
    width = int(rng.choice(WIDTHS))
    shape = (int(rng.integers(1, 3)), width)
    size = float(rng.choice(SCALES)) if scale is None else scale
    shift = float(rng.choice([0.0, 0.0, 3.0]))
    x = round_to_dtype(rng.uniform(-1, 1, shape) * size + shift, dtype).astype(np.float64)
    g = round_to_dtype(rng.uniform(-8, 8, shape), dtype).astype(np.float64)
    program = Program((Input("x", shape),), (Node("y", op, ("x",), eps=eps),), "y")
    return Request(program, {"x": x}, dtype, g)


def ratios(exact: ExactResult, budget: Budget, value: Value) -> Iterator[float]:
    """``|actual - exact| / budget`` for every element with a finite, non-zero budget."""
    assert exact.output is not None and exact.grads is not None
    pairs = [(value.output, exact.output, budget.output),
             (value.grads["x"], exact.grads["x"], budget.grads["x"])]
    for actual, want, bound in pairs:
        for a, e, b in zip(np.asarray(actual).flat, want.flat, bound.flat, strict=True):
            if np.isfinite(b) and b > 0:
                yield float(abs(Fraction(float(a)) - e) / Fraction(float(b)))


def largest_ratio(backend: str, dtypes: tuple[str, ...], runs: int) -> float:
    """The largest observed error/budget ratio of ``backend`` over ``runs`` seeded rows per
    norm and dtype; fails on the first miss."""
    runner = NumpyBackend() if backend == "numpy" else resolve_backend(backend)
    worst = 0.0
    for op in NORMS:
        for dtype in dtypes:
            if dtype not in runner.capabilities.dtypes:
                continue
            for seed in range(runs):
                request = norm_request(op, dtype, seed)
                exact = evaluate(request)
                budget = error_budget(request, exact=exact)
                value = runner.run(request)
                assert isinstance(value, Value), value
                misses = budget.misses(exact, value.output, value.grads)
                assert not misses, f"{backend} [{dtype}] seed {seed} {op}: {misses[:2]}"
                worst = max(worst, max(ratios(exact, budget, value), default=0.0))
    return worst


@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
def test_correct_norms_land_well_inside_their_budget(backend: str,
                                                    record_property: object) -> None:
    """A quick run: 6 seeds per norm and dtype on the reference, 2 on the adapters (JAX
    compiles every new shape)."""
    worst = largest_ratio(backend, ("float64", "float32", "float16", "bfloat16"),
                          6 if backend == "numpy" else 2)
    record_property("largest_error_to_budget", worst)  # type: ignore[operator]
    assert worst < 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
def test_largest_error_to_budget_ratio_over_many_runs(backend: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """200 seeds per norm and dtype: every run inside, the largest ratio printed (``-s``;
    docs/error-budget.md lists the measured ones, about 0.37 to 0.49) and above 1/100 (the
    budget is not orders of magnitude loose)."""
    worst = largest_ratio(backend, ("float64", "float32", "float16", "bfloat16"), 200)
    with capsys.disabled():
        print(f"\n{backend}: largest observed error / budget = {worst:.3f}")
    assert 0.01 < worst < 1


@settings(max_examples=40, deadline=None)
@example(op="layer_norm", dtype="float16", seed=2048, where="x", sign=1, pick=0)  # inf budget
@given(op=st.sampled_from(NORMS), dtype=st.sampled_from(["float64", "float32", "float16"]),
       seed=st.integers(0, 2**16), where=st.sampled_from(["output", "x"]),
       sign=st.sampled_from([-1, 1]), pick=st.integers(0, 2**16))
def test_a_norm_result_just_beyond_its_budget_is_a_miss(op: str, dtype: str, seed: int,
                                                        where: str, sign: int,
                                                        pick: int) -> None:
    request = norm_request(op, dtype, seed)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    output, grads = exact.output.astype(np.float64), {"x": exact.grads["x"].astype(np.float64)}
    want = exact.output if where == "output" else exact.grads["x"]
    bound = (budget.output if where == "output" else budget.grads["x"]).reshape(-1)
    moved = (output if where == "output" else grads["x"]).reshape(-1)
    flat = pick % moved.size
    # a float16 row whose variance overflows has an infinite budget: nothing lies beyond it
    assume(np.isfinite(bound[flat]))
    moved[flat] = beyond(want.reshape(-1)[flat], float(bound[flat]), sign)
    label = "output" if where == "output" else "grad[x]"
    assert any(m.where == label for m in budget.misses(exact, output, grads)), (
        f"{label}[{flat}] moved 1.01 x budget {bound[flat]:.3g} away was accepted "
        f"[{request.program.describe()}, {dtype}]")


def test_tiny_variance_against_eps_is_where_the_budget_is_wide() -> None:
    """Rows at 3 whose variance is far below ε: the allowance relative to the output's size
    is far larger than for a unit spread (the centred values cancel: the mean's rounding,
    ``u·3``, is then of the size of the centred values), as docs/error-budget.md says."""
    def relative(spread: float) -> float:
        x = 3 + spread * np.random.default_rng(0).uniform(-1, 1, (1, 16))
        program = Program((Input("x", x.shape),),
                          (Node("y", "layer_norm", ("x",), eps=Fraction(1, 10**5)),), "y")
        budget = error_budget(Request(program, {"x": x}, "float64", np.ones_like(x)))
        assert budget.magnitude is not None
        return float(np.max(budget.output / budget.magnitude))

    assert relative(1e-6) > 100 * relative(1.0)


def test_one_pass_variance_is_outside_the_budget() -> None:
    """``mean(x²) - mean(x)²`` (jax.nn.standardize's variance) on rows shifted to 3 with a
    spread of 1e-2 cancels: the budget refuses it, while the two-pass reference is inside."""
    rng = np.random.default_rng(0)
    x = 3 + 1e-2 * rng.uniform(-1, 1, (1, 64))
    program = Program((Input("x", x.shape),),
                      (Node("y", "layer_norm", ("x",), eps=Fraction(1, 10**5)),), "y")
    request = Request(program, {"x": x}, "float64", np.ones_like(x))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.grads is not None
    mean = x.mean(axis=-1, keepdims=True)
    one_pass = (x - mean) / np.sqrt((x * x).mean(axis=-1, keepdims=True) - mean * mean + 1e-5)
    assert budget.misses(exact, one_pass, {"x": exact.grads["x"].astype(np.float64)})
    value = NumpyBackend().run(request)
    assert isinstance(value, Value)
    assert not budget.misses(exact, value.output, value.grads)


# --- a norm's argument gradient delivered in parts ---


DATA = Path(__file__).resolve().parents[1] / "data"
VECTOR = DATA / "rms-norm-gradient-accumulated-in-parts.json"
EPS = Fraction(1, 1024)
COMPOSED_PARTS = {"layer_norm": 6, "rms_norm": 3}
"""How many parts :func:`_parts` delivers."""


def _judged(request: Request, backend: str = "numpy") -> tuple[str, str]:
    """The one comparison rule (as a known-failures vector is judged)."""
    verdict = vector_verdict(judge(installed_backend(backend), request,
                                   expected_from_spec(request)))
    return verdict["status"], verdict["message"]


def _verdict(backend: str) -> tuple[str, str]:
    doc = json.loads(VECTOR.read_text())
    doc.pop("vector")
    return _judged(request_from_dict(doc), backend)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax", "autograd"])
def test_norm_gradient_in_one_part_or_in_parts_lies_inside_the_budget_on_the_kept_vector(
        backend: str) -> None:
    """numpy and torch compute the norm's VJP fused (one part); jax and autograd through
    the composition (three parts for rms_norm): all inside."""
    status, message = _verdict(backend)
    assert status == "pass", f"{backend} on {VECTOR.name}: {status}: {message}"


def _parts(op: str, x: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    """``op``'s argument gradient as autodiff through ``c / sqrt(mean(c c) + ε)`` leaves it
    at ``x``, in ``x``'s dtype: the centred values recomputed for the numerator and each
    factor of the square, each split again by its mean (layer_norm: six parts; rms_norm,
    ``c = x``: three)."""
    one, n = x.dtype.type(1), x.shape[-1]
    centred = op == "layer_norm"
    c = x - x.mean(axis=-1, keepdims=True) if centred else x
    s = np.sqrt((c * c).mean(axis=-1, keepdims=True) + x.dtype.type(float(EPS)))
    s_bar = -(g * c).sum(axis=-1, keepdims=True) / (s * s)
    q_bar = (s_bar / (x.dtype.type(2) * s)) / x.dtype.type(n)  # through the mean of c c
    c_parts = [g * (one / s), q_bar * c, q_bar * c]  # numerator, each factor of c c
    if not centred:
        return c_parts
    return [piece for part in c_parts
            for piece in (part, np.broadcast_to(-part.mean(axis=-1, keepdims=True), x.shape))]


def _residual_norm_program(op: str, width: int) -> Program:
    """``residual_add(x, op(x, eps=EPS))`` on one row of ``width``."""
    return Program((Input("x", (width,)),),
                   (Node("n", op, ("x",), eps=EPS), Node("h", "residual_add", ("x", "n"))), "h")


def _composed(request: Request, g: np.ndarray, order: list[int]) -> np.ndarray:
    """The identity's part (0) and the norm's parts added one at a time in ``order``."""
    kind = np.dtype(request.dtype).type
    x, cot = request.inputs["x"].astype(kind), g.astype(kind)
    total = np.zeros_like(x)
    with np.errstate(all="ignore"):  # squares that overflow: the bound is inf there
        pieces = [cot, *_parts(request.program.nodes[0].op, x[None, :], cot[None, :])]
        for i in order:
            total = (total + np.reshape(pieces[i], x.shape)).astype(kind)
    return total


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_a_norm_counts_at_least_the_parts_its_composition_delivers(op: str) -> None:
    x = np.array([[1.0, -2.0, 4.0]])
    parts = _parts(op, x, np.ones_like(x))
    declared = getattr(OP_TABLE[op], "grad_parts", 1)
    assert len(parts) == COMPOSED_PARTS[op] <= declared, (
        f"{op}: the composition delivers {len(parts)} parts, the op declares {declared}")


@st.composite
def _residual_norm(draw: st.DrawFn) -> tuple[Request, np.ndarray, list[int]]:
    """``residual_add(x, norm(x))`` on a random row, its cotangent, and an order in which
    autodiff adds the identity's part (0) and the norm's parts."""
    op = draw(st.sampled_from(["layer_norm", "rms_norm"]))
    dtype = draw(st.sampled_from(["float64", "float32"]))  # float16: see the last test
    width = draw(st.integers(1, 12))
    values = st.floats(-8, 8, width=16, allow_subnormal=False)
    # a large x has a small r: the norm's parts, and its own rounding, fall far below the
    # identity's cotangent, whose size every addition of a part then rounds at
    size = 2.0 ** draw(st.integers(0, 40))
    x = round_to_dtype(draw(hnp.arrays(np.float64, (width,), elements=values)) * size, dtype)
    g = round_to_dtype(draw(hnp.arrays(np.float64, (width,), elements=values)), dtype)
    request = Request(_residual_norm_program(op, width), {"x": x.astype(np.float64)}, dtype,
                      g.astype(np.float64))
    order = draw(st.permutations(range(1 + COMPOSED_PARTS[op])))
    return request, g, order


@settings(max_examples=300, deadline=None)
@given(case=_residual_norm())
def test_norm_gradient_added_part_by_part_to_the_identity_lies_inside_the_budget(
        case: tuple[Request, np.ndarray, list[int]]) -> None:
    request, g, order = case
    total = _composed(request, g, order)
    exact = evaluate(request)
    assert exact.grads is not None
    bound = error_budget(request, exact=exact).grads["x"]
    misses = [c for c in cells(total, exact.grads["x"], bound) if not c.ok]
    assert not misses, (
        f"grad x{list(misses[0].index)}={misses[0].actual!r}, but should be "
        f"{float(misses[0].exact)!r} ± {misses[0].bound:.3g} [{request.dtype}] "
        f"{request.program.nodes[0].op} parts added in order {order}, "
        f"x={request.inputs['x'].tolist()}, g={g.tolist()}")


def test_a_float16_composition_that_loses_the_statistics_term_to_underflow_is_a_miss() -> None:
    """Not excused, like the composition's ``r³`` overflowing float16 (docs/error-budget.md):
    for a row [0, 64] and a cotangent [2⁻¹⁴, 0], ``q̄ = ḡ·c / (2 n s³)`` is 2⁻²⁶, below
    float16's smallest subnormal, so the statistics parts vanish: grad x[0] is off by 16
    ulps, and x[1]'s, nearly 0, comes out -2⁻²⁰. The same composition in float32, and the
    fused VJP (the reference) in float16, stay inside."""
    g = np.array([2.0**-14, 0.0])
    requests = {dtype: Request(_residual_norm_program("layer_norm", 2),
                               {"x": np.array([0.0, 64.0])}, dtype, g)
                for dtype in ("float16", "float32")}
    for dtype, inside in (("float16", False), ("float32", True)):
        request = requests[dtype]
        exact = evaluate(request)
        assert exact.grads is not None
        bound = error_budget(request, exact=exact).grads["x"]
        composed = _composed(request, g, list(range(7)))
        ok = [c.ok for c in cells(composed, exact.grads["x"], bound)]
        assert ok == [inside, inside], (
            f"layer_norm composed in {dtype} on x=[0, 64], g={g.tolist()}: "
            f"{composed.tolist()} judged {ok}, but should be {[inside, inside]}")
    status, message = _judged(requests["float16"])
    assert status == "pass", f"numpy on layer_norm [float16] x=[0, 64]: {status}: {message}"


# --- forward mode: the output tangent's budget ---


def with_tangents(request: Request, tangents: dict[str, np.ndarray]) -> Request:
    return Request(request.program, request.inputs, request.dtype, request.cotangent, tangents)


@st.composite
def forward_requests(draw: st.DrawFn, dtype: str) -> Request:
    """A residual stack (:func:`residual_requests`) with a random tangent for every input."""
    request = draw(residual_requests(dtype))
    return with_tangents(request, {n: draw(values(dtype, v.shape))
                                   for n, v in request.inputs.items()})


def seeded_tangents(request: Request, seed: int) -> Request:
    """``request`` with seeded tangents of the sizes :func:`norm_request` draws."""
    rng = np.random.default_rng(seed + 7919)
    return with_tangents(request, {
        n: round_to_dtype(rng.uniform(-4, 4, v.shape), request.dtype).astype(np.float64)
        for n, v in request.inputs.items()})


def judged(runner: Backend, request: Request) -> tuple[ExactResult, Budget, Value]:
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    value = runner.run(request)
    assert isinstance(value, Value), f"{runner.name}: {value}"
    return exact, budget, value


def tangent_ratios(exact: ExactResult, budget: Budget, value: Value) -> Iterator[float]:
    """``|actual - exact| / budget`` for every tangent element with a finite, non-zero budget."""
    assert exact.tangent is not None and budget.tangent is not None
    for a, e, b in zip(np.asarray(value.tangent).flat, exact.tangent.flat, budget.tangent.flat,
                       strict=True):
        if np.isfinite(b) and b > 0:
            yield float(abs(F(float(a)) - e) / F(float(b)))


def runner_for(backend: str) -> Backend:
    runner = NumpyBackend() if backend == "numpy" else resolve_backend(backend)
    if "jvp" not in runner.capabilities.modes:
        pytest.skip(f"backend {backend}: mode jvp not claimed")
    return runner


KNOWN_TANGENT_FAILURES = {
    ("torch", "layer_norm", "float16"): 4,
}
"""(backend, norm, dtype) whose forward mode is known to miss, with a seed that shows it:
PyTorch's layer_norm tangent in float16 is NaN or -inf where a row's variance is far below
ε (its ``r³`` overflows), though the true tangent is representable (docs/error-budget.md).
The ratio runs leave these out; ``test_known_tangent_failures_still_reproduce`` pins them."""


def largest_norm_ratio(backend: str, runs: int) -> float:
    """The largest tangent error/budget ratio of ``backend`` over ``runs`` seeded norm rows
    per norm and dtype (known failures left out); fails on the first miss."""
    runner, worst = runner_for(backend), 0.0
    for op in NORMS:
        for dtype in ("float64", "float32", "float16", "bfloat16"):
            if dtype not in runner.capabilities.dtypes or (backend, op, dtype) in \
                    KNOWN_TANGENT_FAILURES:
                continue
            for seed in range(runs):
                request = seeded_tangents(norm_request(op, dtype, seed), seed)
                exact, budget, value = judged(runner, request)
                misses = budget.misses(exact, value.output, value.grads, value.tangent)
                assert not misses, f"{backend} [{dtype}] seed {seed} {op}: {misses[:2]}"
                worst = max(worst, max(tangent_ratios(exact, budget, value), default=0.0))
    return worst


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@SETTINGS
@given(data=st.data())
def test_reference_tangent_lies_inside_the_budget(dtype: str, data: st.DataObject) -> None:
    request = data.draw(forward_requests(dtype))
    exact, budget, value = judged(NumpyBackend(), request)
    misses = budget.misses(exact, value.output, value.grads, value.tangent)
    assert not misses, f"{[str(m) for m in misses[:3]]} [{request.program.describe()}, {dtype}]"


@pytest.mark.parametrize("backend", ["numpy", *(
    pytest.param(name, marks=pytest.mark.slow) if name == "jax" else name for name in ADAPTERS)])
def test_correct_norm_tangents_land_well_inside_their_budget(backend: str) -> None:
    """A quick run: 6 seeds per norm and dtype on the reference, 1 on the adapters (JAX,
    which compiles every new shape for seconds, only in the slow run)."""
    assert largest_norm_ratio(backend, 6 if backend == "numpy" else 1) < 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
def test_largest_tangent_error_to_budget_ratio_over_many_runs(
        backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    """200 seeds per norm and dtype on the reference, 40 on the adapters: every run inside,
    the largest ratio printed (``-s``; docs/error-budget.md lists the measured ones) and
    above 1/100 (the budget is not orders of magnitude loose)."""
    worst = largest_norm_ratio(backend, 200 if backend == "numpy" else 40)
    with capsys.disabled():
        print(f"\n{backend}: largest observed tangent error / budget = {worst:.3f}")
    assert 0.01 < worst < 1


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "op", "dtype"), sorted(KNOWN_TANGENT_FAILURES))
def test_known_tangent_failures_still_reproduce(backend: str, op: str, dtype: str) -> None:
    """Strict: a known failure that no longer reproduces must leave the list."""
    if backend not in ADAPTERS:
        pytest.skip(f"{backend} is not installed")
    seed = KNOWN_TANGENT_FAILURES[(backend, op, dtype)]
    request = seeded_tangents(norm_request(op, dtype, seed), seed)
    exact, budget, value = judged(runner_for(backend), request)
    misses = budget.misses(exact, value.output, value.grads, value.tangent)
    assert any(m.where == "tangent" for m in misses), (
        f"{backend} {op} {dtype} seed {seed}: the tangent is now inside its budget (fixed): "
        "remove it from KNOWN_TANGENT_FAILURES")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@SETTINGS
@given(data=st.data())
def test_a_tangent_just_beyond_the_budget_is_a_miss(dtype: str, data: st.DataObject) -> None:
    request = data.draw(forward_requests(dtype))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    assert exact.tangent is not None and budget.tangent is not None
    assume(exact.tangent.size)
    flat = data.draw(st.integers(0, exact.tangent.size - 1))
    sign = data.draw(st.sampled_from([-1, 1]))
    tangent = exact.tangent.astype(np.float64)
    bound = float(budget.tangent.reshape(-1)[flat])
    tangent.reshape(-1)[flat] = beyond(exact.tangent.reshape(-1)[flat], bound, sign)
    grads = {n: g.astype(np.float64) for n, g in exact.grads.items()}
    misses = budget.misses(exact, exact.output.astype(np.float64), grads, tangent)
    assert [m.where for m in misses] == ["tangent"], (
        f"tangent[{flat}] moved to {tangent.reshape(-1)[flat]!r}, 1.01 x budget {bound:.3g} "
        f"away: misses {[str(m) for m in misses]} [{request.program.describe()}]")


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from(NORMS), dtype=st.sampled_from(["float64", "float32", "float16"]),
       seed=st.integers(0, 2**16), sign=st.sampled_from([-1, 1]), pick=st.integers(0, 2**16))
def test_a_norm_tangent_just_beyond_its_budget_is_a_miss(op: str, dtype: str, seed: int,
                                                         sign: int, pick: int) -> None:
    request = seeded_tangents(norm_request(op, dtype, seed), seed)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert exact.output is not None and exact.grads is not None
    assert exact.tangent is not None and budget.tangent is not None
    tangent = exact.tangent.astype(np.float64)
    flat = pick % tangent.size
    bound = float(budget.tangent.reshape(-1)[flat])
    assume(np.isfinite(bound))  # a float16 row of equal values may round past eps: no bound
    tangent.reshape(-1)[flat] = beyond(exact.tangent.reshape(-1)[flat], bound, sign)
    misses = budget.misses(exact, exact.output.astype(np.float64),
                           {"x": exact.grads["x"].astype(np.float64)}, tangent)
    assert any(m.where == "tangent" for m in misses), (
        f"tangent[{flat}] moved 1.01 x budget {bound:.3g} away was accepted "
        f"[{request.program.describe()}, {dtype}]")


def block_request(dtype: str, tangents: bool = True) -> Request:
    program = Program((Input("x", (4,)), Input("w", (4, 4))), (
        Node("f", "linear", ("x", "w")), Node("t", "tanh", ("f",)),
        Node("y", "residual_add", ("x", "t"))), "y")
    rng = np.random.default_rng(3)
    x, w, t = (round_to_dtype(rng.uniform(-1, 1, shape), dtype).astype(np.float64)
               for shape in ((4,), (4, 4), (4,)))
    return Request(program, {"x": x, "w": w}, dtype, np.ones(4),
                   {"x": t, "w": np.zeros((4, 4))} if tangents else None)


def test_float32_tangent_arithmetic_is_caught_by_the_float64_budget() -> None:
    """Tight enough to matter: the reference run in float32 on the same values (all float32
    numbers) has a tangent the float64 budget refuses, while the float64 run is inside."""
    narrow = block_request("float32")
    request = with_tangents(Request(narrow.program, narrow.inputs, "float64", narrow.cotangent),
                            dict(narrow.tangents or {}))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    wide, low = NumpyBackend().run(request), NumpyBackend().run(narrow)
    assert isinstance(wide, Value) and isinstance(low, Value) and low.tangent is not None
    assert budget.allows(exact, wide.output, wide.grads, wide.tangent)
    misses = budget.misses(exact, wide.output, wide.grads, low.tangent.astype(np.float64))
    assert any(m.where == "tangent" for m in misses), (
        f"float32 tangent {low.tangent} accepted by the float64 budget {budget.tangent}")


def test_narrower_dtype_budget_covers_rounding_the_tangents() -> None:
    """A float64 request judged as float16: the tangents' rounding to float16 is charged."""
    request = block_request("float64")
    exact = evaluate(request)
    wide, narrow = error_budget(request, exact=exact), error_budget(request, "float16",
                                                                    exact=exact)
    assert wide.tangent is not None and narrow.tangent is not None
    assert np.all(narrow.tangent > wide.tangent)
    rounded = with_tangents(request, {n: round_to_dtype(np.asarray(v), "float16")
                                      for n, v in (request.tangents or {}).items()})
    shifted = evaluate(rounded)
    assert shifted.tangent is not None and exact.tangent is not None
    gaps = [abs(a - b) for a, b in zip(shifted.tangent.flat, exact.tangent.flat, strict=True)]
    assert all(g <= F(float(b)) for g, b in zip(gaps, narrow.tangent.flat, strict=True))


def test_no_tangent_budget_without_tangents_and_a_missing_tangent_is_a_miss() -> None:
    plain = block_request("float64", tangents=False)
    budget = error_budget(plain)
    assert budget.tangent is None and budget.tangent_magnitude is None
    exact = evaluate(plain)
    assert exact.output is not None and exact.grads is not None
    output = exact.output.astype(np.float64)
    grads = {n: g.astype(np.float64) for n, g in exact.grads.items()}
    with pytest.raises(InvalidRequest, match="no tangent budget"):
        budget.misses(exact, output, grads, output)
    forward = block_request("float64")
    fexact = evaluate(forward)
    fbudget = error_budget(forward, exact=fexact)
    assert [m.where for m in fbudget.misses(fexact, output, grads)] == ["tangent missing"]
    with pytest.raises(InvalidRequest, match="exact result with a tangent"):
        fbudget.misses(exact, output, grads, output)


def test_tangent_budget_has_the_output_shape_and_is_scaled_from_its_magnitude() -> None:
    request = block_request("float32")
    budget = error_budget(request)
    assert budget.tangent is not None and budget.tangent_magnitude is not None
    assert budget.tangent.shape == budget.tangent_magnitude.shape == (4,)
    units = budget.tangent / (2.0**-24 * budget.tangent_magnitude)
    assert np.all((units > 1) & (units < 64)), f"tangent budget in roundoffs: {units}"


def test_the_fast_verdict_judges_a_forward_mode_request_on_the_exact_path() -> None:
    request = block_request("float64")
    value = NumpyBackend().run(request)
    assert isinstance(value, Value) and value.tangent is not None
    verdict = verify(request, value.output, value.grads, value.tangent)
    assert verdict.exact_path and not verdict.misses
    wrong = value.tangent.copy()
    wrong[0] += 2.0**-20
    assert [m.where for m in verify(request, value.output, value.grads, wrong).misses] == [
        "tangent"]
