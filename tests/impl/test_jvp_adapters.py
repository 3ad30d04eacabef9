"""Forward mode in the adapters: each library's own JVP (``torch.func.jvp``, ``jax.jvp``,
``jax.jit`` around it, autograd's ``make_jvp``, TensorFlow's ``ForwardAccumulator``, the
compiled ``torch.func.jvp``) gives the output tangent ``J·t`` of the exact specification.

The seed fixtures' values are small dyadic rationals chosen so that every product and sum
is exact in every dtype; a tangent that is a unit vector picks one column of the Jacobian,
whose entries are sums of products of those values, so each adapter's answer must equal
the exact oracle's tangent (``resverify.spec.exact.evaluate``) bit for bit, in every dtype
it claims (the default run: each input's first column in the widest and the narrowest
dtype; the slow run: every column in every dtype). Programs with tanh, the norms and long
sums have no exact tangent in floating point: there each adapter's tangent is judged
within its budget (``resverify.spec.budget``), seeded (the default run: float32, one
seed; the slow run: every dtype, three seeds; jax compiles each primitive per dtype). The properties
(properties/test_jvp.py) check random programs; this checks that each adapter wires its
library's JVP to the right inputs and outputs.
Missing libraries skip, except under CI=true (tests/installed.py); the adapters that take
seconds to import or compile are slow tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.impl.backend import Backend
from resverify.impl.registry import BUILTINS
from resverify.spec import Input, Node, Program, Request
from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate
from resverify.spec.fixtures import linear_block_request, seed_cases
from resverify.spec.request import (
    Result,
    ResultError,
    Value,
    check_form,
    output_shape,
    storage_dtype,
)
from tests.installed import backend_params, installed_backend

JVP_ADAPTERS = ("torch", "jax", "autograd", "jax-jit", "tensorflow", "torch-compile")
SLOW = {"tensorflow", "torch-compile"}


@pytest.fixture(scope="module", params=backend_params(JVP_ADAPTERS, SLOW))
def adapter(request: pytest.FixtureRequest) -> Backend:
    return installed_backend(request.param)


def forward(request: Request, dtype: str, tangents: dict[str, np.ndarray]) -> Request:
    """``request`` in ``dtype``, asking for the output tangent along ``tangents``."""
    return Request(request.program, request.inputs, dtype, request.cotangent, tangents)


def unit_tangents(request: Request, dtype: str,
                  every: bool) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """One tangent per element of every input (``every``), else per input for its first
    element: 1 there, 0 everywhere else."""
    for name, value in request.inputs.items():
        indices = list(np.ndindex(value.shape))
        for index in indices if every else indices[:1]:
            tangents = {n: np.zeros(v.shape, storage_dtype(dtype))
                        for n, v in request.inputs.items()}
            tangents[name][index] = 1
            yield f"d/d{name}{list(index)}", tangents


def fractions(array: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in np.ravel(array)]


@pytest.mark.parametrize("every", [
    pytest.param(False, id="first-columns-widest-narrowest-dtype"),
    pytest.param(True, id="every-column-every-dtype", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sorted(seed_cases()))
def test_adapter_tangent_is_each_exact_jacobian_column_of_the_seed_fixtures(
        adapter: Backend, case: str, every: bool) -> None:
    base = seed_cases()[case][0]
    dtypes = adapter.capabilities.dtypes
    for dtype in dtypes if every else sorted({dtypes[0], dtypes[-1]}):  # widest, narrowest
        wrong = column_mismatches(adapter, base, dtype, every)
        assert not wrong, f"{len(wrong)} columns differ, first {wrong[:2]} [{case}]"


def column_mismatches(backend: Backend, base: Request, dtype: str, every: bool) -> list[str]:
    """Each Jacobian column (unit tangent) whose tangent differs from the exact one."""
    wrong = []
    for column, tangents in unit_tangents(base, dtype, every):
        request = forward(base, dtype, tangents)
        result = backend.run(request)
        call = f"[{backend.name} {dtype} {column}: {base.program.describe()}]"
        assert isinstance(result, Value) and result.tangent is not None, f"{result} {call}"
        check_form(request, result)
        exact = evaluate(request)
        assert exact.tangent is not None and exact.slack == 0, call
        got, want = fractions(result.tangent), list(np.ravel(exact.tangent))
        if got != want:
            wrong.append(f"tangent={got}, but should be {want} {call}")
    return wrong


EPS = Fraction(1, 1000)
SMOOTH = {
    "pre_norm_tanh_block": Program(
        (Input("x", (3, 4)), Input("w", (4, 4))),
        (Node("n", "layer_norm", ("x",), eps=EPS), Node("h", "linear", ("n", "w")),
         Node("t", "tanh", ("h",)), Node("f", "scale", ("t",), alpha=Fraction(1, 3)),
         Node("y", "residual_add", ("x", "f"))), "y"),
    "post_norm_gated_block": Program(
        (Input("x", (2, 3)), Input("g", (3,)), Input("w", (3, 3))),
        (Node("h", "linear", ("x", "w")), Node("r", "relu", ("h",)),
         Node("m", "mul", ("r", "g")), Node("s", "add", ("x", "m")),
         Node("y", "rms_norm", ("s",), eps=EPS)), "y"),
    "summed_residual_stack": Program(
        (Input("x", (5,)), Input("w", (5, 5))),
        (Node("h1", "linear", ("x", "w")), Node("t1", "tanh", ("h1",)),
         Node("x1", "residual_add", ("x", "t1")), Node("h2", "linear", ("x1", "w")),
         Node("x2", "residual_add", ("x1", "h2")), Node("y", "sum", ("x2",))), "y"),
}
"""Programs whose tangents are not exact in any dtype (tanh, the norms' square roots, long
sums): judged against the exact tangent within the tangent budget."""


def smooth_request(name: str, dtype: str, seed: int) -> Request:
    """``SMOOTH[name]`` with seeded normal inputs, cotangent and tangents in ``dtype``."""
    program, rng = SMOOTH[name], np.random.default_rng(seed)

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        values = rng.standard_normal(shape).astype(storage_dtype(dtype))
        if dtype == "bfloat16":  # keep the top 16 bits: exactly a bfloat16 value
            values = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        return values

    shapes = {i.name: i.shape for i in program.inputs}
    inputs = {n: draw(s) for n, s in shapes.items()}
    tangents = {n: draw(s) for n, s in shapes.items()}
    out = output_shape(program)
    assert out is not None, program.describe()
    return Request(program, inputs, dtype, draw(out), tangents)


def budget_misses(backend: Backend, request: Request) -> list[str]:
    """Every element of the backend's output, gradients and output tangent outside its
    budget around the exact answer (an error answer is one miss)."""
    result = backend.run(request)
    if not isinstance(result, Value):
        return [f"no value: {result}"]
    check_form(request, result)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    return [str(m) for m in budget.misses(exact, result.output, result.grads, result.tangent)]


@pytest.mark.parametrize("every", [
    pytest.param(False, id="float32-one-seed"),
    pytest.param(True, id="every-dtype-three-seeds", marks=pytest.mark.slow)])
@pytest.mark.parametrize("program", sorted(SMOOTH))
def test_adapter_tangent_of_tanh_and_norm_programs_is_within_budget_of_the_exact_tangent(
        adapter: Backend, program: str, every: bool) -> None:
    for dtype in adapter.capabilities.dtypes if every else ("float32",):
        for seed in range(3 if every else 1):
            request = smooth_request(program, dtype, seed)
            missed = budget_misses(adapter, request)
            call = f"[{adapter.name} {dtype} seed {seed}: {request.program.describe()}]"
            assert not missed, f"{len(missed)} outside the budget, first {missed[:3]} {call}"


class DropsTheWeightTangent(NumpyBackend):
    """A broken forward mode: the weight's tangent never reaches the output."""

    def run(self, request: Request) -> Result:
        if request.tangents is None or "w" not in request.tangents:
            return super().run(request)
        tangents = {**request.tangents, "w": np.zeros_like(request.tangents["w"])}
        asked = Request(request.program, request.inputs, request.dtype, request.cotangent,
                        tangents)
        return super().run(asked)


def test_column_check_catches_a_dropped_weight_tangent_and_passes_the_reference() -> None:
    base = seed_cases()["S06.linear_block"][0]
    assert not column_mismatches(NumpyBackend(), base, "float32", every=True)
    wrong = column_mismatches(DropsTheWeightTangent(), base, "float32", every=True)
    assert len(wrong) == 4 and all("d/dw" in m for m in wrong), wrong  # each w column


def test_budget_check_of_the_tangent_catches_a_dropped_weight_tangent() -> None:
    """The check above can fail: a backend that loses ``ẇ`` misses the tangent budget
    (only the tangent: the output and gradients are the reference's), while the reference
    passes the same requests."""
    for name in sorted(SMOOTH):
        request = smooth_request(name, "float32", 0)
        assert not budget_misses(NumpyBackend(), request), name
        missed = budget_misses(DropsTheWeightTangent(), request)
        assert missed and all(m.startswith("tangent") for m in missed), (name, missed)


def test_adapter_answers_a_reverse_mode_request_without_a_tangent(adapter: Backend) -> None:
    result = adapter.run(linear_block_request())
    assert isinstance(result, Value) and result.tangent is None, (
        f"{adapter.name} answered a reverse-mode request with tangent {result}")


def test_adapter_forward_mode_keeps_the_output_and_gradients_of_reverse_mode(
        adapter: Backend) -> None:
    """The tangents ask for more, never for something else: same output, same gradients."""
    base = linear_block_request(dtype="float32")
    tangents = {n: np.full(v.shape, 0.5, np.float32) for n, v in base.inputs.items()}
    both, reverse = adapter.run(forward(base, "float32", tangents)), adapter.run(base)
    assert isinstance(both, Value) and isinstance(reverse, Value), (both, reverse)
    assert both.output.tobytes() == reverse.output.tobytes(), (both.output, reverse.output)
    for name, grad in reverse.grads.items():
        assert both.grads[name].tobytes() == grad.tobytes(), (name, both.grads, reverse.grads)


def test_adapter_relu_tangent_has_zero_derivative_at_zero(adapter: Backend) -> None:
    program = Program((Input("x", (3,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([-1.0, 0.0, 2.0])}, "float64", np.ones(3),
                      {"x": np.array([3.0, 5.0, 7.0])})
    result = adapter.run(request)
    call = f"[{adapter.name} relu'(-1, 0, 2)·(3, 5, 7)]"
    assert isinstance(result, Value) and result.tangent is not None, f"{result} {call}"
    assert result.tangent.tolist() == [0.0, 0.0, 7.0], f"tangent={result.tangent} {call}"


def test_adapter_tangent_of_a_program_without_nodes_is_the_input_tangent(
        adapter: Backend) -> None:
    program = Program((Input("x", (2,)), Input("u", (3,))), (), "x")
    tangents = {"x": np.array([-0.0, 2.0**-1074]), "u": np.ones(3)}
    request = Request(program, {"x": np.ones(2), "u": np.zeros(3)}, "float64", np.ones(2),
                      tangents)
    result = adapter.run(request)
    assert isinstance(result, Value) and result.tangent is not None, result
    assert result.tangent.tobytes() == tangents["x"].tobytes(), (
        f"tangent={result.tangent.tolist()}, but should be [-0.0, 5e-324] [{adapter.name}]")


def test_adapter_answers_a_shape_mismatch_in_forward_mode_too(adapter: Backend) -> None:
    program = Program((Input("x", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("x", "b")),), "y")
    inputs = {"x": np.ones((2, 2)), "b": np.ones(2)}
    result = adapter.run(Request(program, inputs, "float64", None, inputs))
    assert isinstance(result, ResultError) and result.kind == "shape_mismatch", result
    assert result.shapes == ((2, 2), (2,)), result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tinygrad", "pytensor"])
def test_adapter_without_forward_mode_refuses_tangents_as_unsupported(name: str) -> None:
    """tinygrad and PyTensor claim reverse mode only; a forward-mode request is refused."""
    backend = installed_backend(name)
    assert backend.capabilities.modes == BUILTINS[name].capabilities.modes == ("vjp",)
    base = linear_block_request()
    result = backend.run(forward(base, "float64", dict(base.inputs)))
    assert isinstance(result, ResultError) and result.kind == "unsupported", result
    assert "mode jvp not claimed" in result.message, result


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_adapter_tangent_of_a_rank_0_input_keeps_the_request_dtype(adapter: Backend,
                                                                   dtype: str) -> None:
    """x of rank 0 through (x + x)·(1/2): torch.func.jvp returns this tangent in float64
    (docs/findings.md); the answer must be in the request's dtype and equal t exactly."""
    if dtype not in adapter.capabilities.dtypes:
        pytest.skip(f"{adapter.name} does not claim {dtype}")
    program = Program((Input("x", ()),), (
        Node("s", "residual_add", ("x", "x")),
        Node("y", "scale", ("s",), alpha=Fraction(1, 2))), "y")
    request = Request(program, {"x": np.array(1.5)}, dtype, np.array(1.0),
                      {"x": np.array(-0.75)})
    result = adapter.run(request)
    call = f"[{adapter.name} {dtype} d/dt ((x + x)·1/2) at x = 1.5, t = -0.75]"
    assert isinstance(result, Value) and result.tangent is not None, f"{result} {call}"
    check_form(request, result)
    assert result.tangent.tolist() == -0.75, f"tangent={result.tangent}, expected -0.75 {call}"
