"""The optional adapters reproduce the seed fixtures exactly and keep the protocol's rules.

Eager (torch, jax, autograd, tensorflow), compiled (torch-compile, jax-jit, tinygrad,
pytensor): each is skipped where its library (or, for tinygrad, clang) is missing; CI
installs them all (see .ci/run) and sets CI=true, where a missing library is a failure,
not a skip (the rule of tests/installed.py). The adapters whose library takes seconds to
import or whose programs compile for seconds run only with the slow tests
(``make test-slow``); every one of them runs in CI.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resverify.impl import Capabilities, NumpyBackend, resolve_backend
from resverify.impl.backend import Backend
from resverify.spec import Input, InvalidProgram, Node, Program, Request, UsageError
from resverify.spec.fixtures import linear_block_request, seed_cases, shared_operand_request
from resverify.spec.request import ResultError, Value, storage_dtype
from tests.installed import backend_params, installed_backend, require_installed

ADAPTERS = ("torch", "jax", "autograd", "jax-jit", "tensorflow", "torch-compile", "tinygrad",
            "pytensor")
SLOW = {"tensorflow", "torch-compile", "tinygrad", "pytensor"}
"""Ten seconds to import, or seconds to compile each program."""


@pytest.fixture(scope="module", params=backend_params(ADAPTERS, SLOW))
def adapter(request: pytest.FixtureRequest) -> Backend:
    return installed_backend(request.param)


def as_fractions(array: np.ndarray) -> tuple[Fraction, ...]:
    return tuple(Fraction(float(v)) for v in np.ravel(array))


@pytest.mark.parametrize("case", sorted(seed_cases()))
def test_seed_fixture_on_adapter_matches_exactly_in_every_claimed_dtype(
        adapter: Backend, case: str) -> None:
    request, output, grads = seed_cases()[case]
    for dtype in adapter.capabilities.dtypes:
        result = adapter.run(Request(request.program, request.inputs, dtype, request.cotangent))
        call = f"[{adapter.name} {dtype} {case}: {request.program.describe()}]"
        assert isinstance(result, Value), f"{result} {call}"
        assert as_fractions(result.output) == output, f"output {call}"
        dtypes = {a.dtype for a in (result.output, *result.grads.values())}
        assert dtypes == {storage_dtype(dtype)}, f"dtypes {dtypes} {call}"
        for name, want in grads.items():
            got = as_fractions(result.grads[name])
            assert got == want, f"grad[{name}]={got}, but should be {want} {call}"


def test_adapter_residual_add_rejects_a_pair_that_plus_would_broadcast(adapter: Backend) -> None:
    program = Program((Input("x", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("x", "b")),), "y")
    request = Request(program, {"x": np.ones((2, 2)), "b": np.ones(2)}, "float64", None)
    result = adapter.run(request)
    assert isinstance(result, ResultError) and result.kind == "shape_mismatch"
    assert result.shapes == ((2, 2), (2,))


def test_adapter_gives_zero_gradient_to_an_unused_input_and_keeps_float32(adapter: Backend) -> None:
    program = Program((Input("x", (2,)), Input("u", ())), (Node("y", "tanh", ("x",)),), "y")
    request = Request(program, {"x": np.zeros(2), "u": np.array(3.0)}, "float32", np.ones(2))
    result = adapter.run(request)
    assert isinstance(result, Value)
    assert result.grads["u"].tolist() == 0.0 and result.grads["x"].tolist() == [1.0, 1.0]
    assert {a.dtype for a in (result.output, *result.grads.values())} == {np.dtype("float32")}


RELU_AT_ZERO = {"pytensor": 1.0}
"""Adapters whose relu has another derivative at 0 than the declared 0 (docs/findings.md:
PyTensor's relu is ``maximum(x, 0)``, which passes a tie's gradient to ``x``)."""


def test_adapter_relu_has_zero_derivative_at_zero(adapter: Backend) -> None:
    program = Program((Input("x", (3,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([-1.0, 0.0, 2.0])}, "float64", np.ones(3))
    result = adapter.run(request)
    want = [0.0, RELU_AT_ZERO.get(adapter.name, 0.0), 1.0]
    assert isinstance(result, Value), f"{result} [{adapter.name} relu'(-1, 0, 2)]"
    got = result.grads["x"].tolist()
    assert got == want, f"relu'={got}, but should be {want} [{adapter.name} relu'(-1, 0, 2)]"


def test_torch_cuda_without_a_device_is_a_usage_error() -> None:
    require_installed("torch-cuda")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present here")
    with pytest.raises(UsageError, match="no CUDA device"):
        resolve_backend("torch-cuda")


def test_adapter_answers_an_unclaimed_dtype_with_unsupported(adapter: Backend) -> None:
    unclaimed = [d for d in ("float64", "float32", "float16", "bfloat16")
                 if d not in adapter.capabilities.dtypes]
    if not unclaimed:
        pytest.skip(f"{adapter.name} claims every dtype")
    for dtype in unclaimed:
        result = adapter.run(linear_block_request(dtype=dtype))
        assert isinstance(result, ResultError) and result.kind == "unsupported", (
            f"{adapter.name} on an unclaimed {dtype} request gave {result}")


def test_adapter_answers_an_unclaimed_op_with_unsupported(
        adapter: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    claims = Capabilities(dtypes=adapter.capabilities.dtypes, ops=("linear",),
                          device=adapter.capabilities.device)
    monkeypatch.setattr(adapter, "capabilities", claims)
    result = adapter.run(shared_operand_request())
    assert isinstance(result, ResultError) and result.kind == "unsupported", result
    assert "residual_add" in result.message, result


def test_reference_answers_bfloat16_with_unsupported() -> None:
    result = NumpyBackend().run(linear_block_request(dtype="bfloat16"))
    assert isinstance(result, ResultError) and result.kind == "unsupported", result


def test_adapter_refuses_a_scale_node_without_alpha(adapter: Any) -> None:
    node = Node("s", "scale", ("x",), Fraction(2))
    object.__setattr__(node, "alpha", None)  # as a careless caller might build it
    with pytest.raises(InvalidProgram, match="scale needs an alpha"):
        adapter._apply(node, [adapter_value(adapter, np.ones(2))])


def adapter_value(adapter: Any, values: np.ndarray) -> Any:
    """``values`` in the adapter's own array type (its private helpers, not the protocol)."""
    if adapter.name.startswith("torch"):
        return adapter._tensor(values, "float64", False)
    if adapter.name == "pytensor":
        return adapter.pt.as_tensor_variable(values)
    return adapter.array(values, "float64")


def test_module_that_raises_on_import_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="boom at import") as info:
        resolve_backend("explodes_on_import:Backend")
    assert "\n" not in str(info.value)
