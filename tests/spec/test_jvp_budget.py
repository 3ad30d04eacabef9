"""The output tangent's error budget, both ways: correct forward-mode runs land inside it,
a tangent just beyond it is refused, and the largest observed error/budget ratio says how
tight it is.

Why: ``Budget.tangent`` is what every forward-mode property judges a backend by, so it must
hold for every correct implementation (the reference here, and each adapter that claims
``jvp``) and still catch a wrong one. The requests are the residual stacks of
``tests/spec/test_budget.py`` and the norm rows of ``tests/spec/test_norm_budget.py``, each
given one random tangent per input; ratios are measured exactly in rationals.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from resverify.impl import resolve_backend
from resverify.impl.backend import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.cases import round_to_dtype
from resverify.spec.budget import Budget, error_budget
from resverify.spec.enclosure import verify
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Value
from tests.spec.test_budget import beyond, residual_requests, values
from tests.spec.test_norm_budget import NORMS, norm_request

F = Fraction
ADAPTERS = [name for name, module in (("torch", "torch"), ("jax", "jax"),
                                      ("autograd", "autograd"))
            if importlib.util.find_spec(module) is not None]
SETTINGS = settings(max_examples=40, deadline=None)


def with_tangents(request: Request, tangents: dict[str, np.ndarray]) -> Request:
    return Request(request.program, request.inputs, request.dtype, request.cotangent, tangents)


@st.composite
def forward_requests(draw: st.DrawFn, dtype: str) -> Request:
    """A residual stack of ``tests/spec/test_budget.py`` with a random tangent for every input."""
    request = draw(residual_requests(dtype))
    return with_tangents(request, {n: draw(values(dtype, v.shape))
                                   for n, v in request.inputs.items()})


def seeded_tangents(request: Request, seed: int) -> Request:
    """``request`` with seeded tangents of the sizes ``tests/spec/test_norm_budget.py`` draws."""
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
