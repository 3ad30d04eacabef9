"""Error budgets hold for the reference backend and are tight enough to catch real errors."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.budget import UNIT_ROUNDOFF, Budget, error_budget, gamma
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.fixtures import linear_block_request, seed_cases, shared_operand_request
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Value

F = Fraction
BACKEND = NumpyBackend()
SETTINGS = settings(max_examples=40, deadline=None)
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
    assert budget.magnitude is not None and budget.grad_magnitudes is not None
    pairs = [("output", budget.output, budget.magnitude)] + [
        (f"grad[{n}]", budget.grads[n], budget.grad_magnitudes[n]) for n in budget.grads]
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


def test_unit_roundoffs_and_gamma() -> None:
    expected = {"float64": F(1, 2**53), "float32": F(1, 2**24),
                "float16": F(1, 2**11), "bfloat16": F(1, 2**8)}
    assert dict(UNIT_ROUNDOFF) == expected
    assert F(gamma(8, "float32")) >= F(8, 2**24) / (1 - F(8, 2**24))
    assert gamma(0, "float64") == 0 and gamma(1 << 11, "float16") == np.inf


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
