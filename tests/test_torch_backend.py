"""The PyTorch adapter reproduces the seed fixtures exactly and rejects mismatches like the spec.

Skipped where PyTorch is not installed; CI installs the CPU build (see .ci/run) and sets
CI=true, where a missing torch is a failure, not a skip.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest

from spec import Input, Node, Program, Request, UsageError

if os.environ.get("CI") != "true":
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'resverify[torch]')")

from impl import resolve_backend
from spec.fixtures import seed_cases


@pytest.fixture(scope="module")
def torch_backend():
    return resolve_backend("torch")


@pytest.mark.parametrize("case", sorted(seed_cases()))
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_seed_fixture_on_torch_matches_exactly(torch_backend, case, dtype):
    request, output, grads = seed_cases()[case]
    result = torch_backend.run(Request(request.program, request.inputs, dtype, request.cotangent))
    assert result.output is not None and result.grads is not None, result.error
    got = tuple(Fraction(float(v)) for v in result.output.ravel())
    assert got == output, f"torch {dtype} {case}: output {got} != {output}"
    for name, want in grads.items():
        got = tuple(Fraction(float(v)) for v in result.grads[name].ravel())
        assert got == want, f"torch {dtype} {case}: grad[{name}] {got} != {want}"


def test_torch_residual_add_rejects_a_pair_that_plus_would_broadcast(torch_backend):
    program = Program((Input("x", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("x", "b")),), "y")
    request = Request(program, {"x": np.ones((2, 2)), "b": np.ones(2)}, "float64", None)
    result = torch_backend.run(request)
    assert result.error is not None and result.error.shapes == ((2, 2), (2,))


def test_torch_gives_zero_gradient_to_an_unused_input(torch_backend):
    program = Program((Input("x", (2,)), Input("u", ())), (Node("y", "tanh", ("x",)),), "y")
    request = Request(program, {"x": np.zeros(2), "u": np.array(3.0)}, "float32", np.ones(2))
    result = torch_backend.run(request)
    assert result.grads is not None
    assert result.grads["u"].tolist() == 0.0 and result.grads["x"].tolist() == [1.0, 1.0]


def test_torch_cuda_without_a_device_is_a_usage_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present here")
    with pytest.raises(UsageError, match="no CUDA device"):
        resolve_backend("torch-cuda")
