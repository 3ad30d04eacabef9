"""Tests that pin what mutation testing found unpinned in the reference autograd.

Each test here kills mutants of ``impl/tensor.py``, ``impl/ops.py`` or
``impl/numpy_backend.py`` that survived ``tests/impl/test_reference.py`` and
``tests/impl/test_jvp_reference.py`` (``tools/mutation.py``; figures in docs/strength.md §3).
Through a :class:`~resverify.spec.request.Request` every array already has the request's
dtype, so those tests never met what the Tensor API promises on its own: a tensor's
gradient and tangent are in its own dtype (the reference never widens), an argument
without a tangent counts as a zero tangent, and each tensor names the op that made it.
"""

from __future__ import annotations

import numpy as np
import pytest

from resverify.impl import NumpyBackend, Tensor
from resverify.impl.ops import apply_op, mul
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, ResultError

WIDE = np.array([1 + 2.0**-40, -3.0])
"""float64 values that float32 cannot hold exactly."""


def test_a_leaf_gradient_is_the_seed_in_the_leaf_dtype() -> None:
    x = Tensor(np.array([2.0, 5.0], dtype=np.float32))
    x.backward(WIDE)
    assert x.grad is not None and x.grad.dtype == np.float32, x.grad
    assert np.array_equal(x.grad, WIDE.astype(np.float32)), (x.grad, WIDE)


def test_each_tensor_gets_its_gradient_in_its_own_dtype() -> None:
    """mul of a float32 and a float64 tensor: the product (and its cotangent) is float32,
    and the float64 factor's gradient ``ḡ x`` is computed from them but kept float64 while
    the float32 factor's ``ḡ w`` is rounded to float32."""
    x = Tensor(np.array([3.0, -1.0], dtype=np.float32))
    w = Tensor(WIDE)
    y = mul(x, w)
    y.backward(np.ones(2, dtype=np.float32))
    got = {"x": x.grad, "w": w.grad}
    assert got["x"] is not None and got["w"] is not None
    assert (got["x"].dtype, got["w"].dtype) == (np.float32, np.float64), got
    assert np.array_equal(got["x"], WIDE.astype(np.float32)), got


def test_a_tangent_is_stored_in_its_tensor_dtype() -> None:
    x = Tensor(np.array([2.0, 5.0], dtype=np.float32), tangent=WIDE)
    assert x.tangent is not None and x.tangent.dtype == np.float32, x.tangent
    assert np.array_equal(x.tangent, WIDE.astype(np.float32)), x.tangent


def test_an_argument_without_a_tangent_counts_as_a_zero_tangent() -> None:
    a = Tensor(np.array([2.0, -3.0]), tangent=np.array([1.0, 10.0]))
    b = Tensor(np.array([5.0, 7.0]))
    w = Tensor(np.array([[1.0], [2.0]]))
    for op, args, expected in (("mul", (a, b), [5.0, 70.0]), ("mul", (b, a), [5.0, 70.0]),
                               ("linear", (a, w), [21.0])):
        y = apply_op(op, args)
        assert y.tangent is not None and y.tangent.tolist() == expected, (op, args, y.tangent)


def test_each_tensor_names_the_op_that_made_it() -> None:
    a = Tensor(np.array([2.0]))
    y = apply_op("scale", (a,), 0.5)
    assert (a.op, y.op) == ("leaf", "scale"), (a.op, y.op)
    assert repr(y) == "Tensor(array([1.]), op=scale)", repr(y)


@pytest.mark.parametrize(("dtype", "message"), [
    ("bfloat16", "numpy: dtype bfloat16 not claimed (claims ['float64', 'float32', 'float16'])"),
])
def test_the_reference_names_itself_when_it_refuses(dtype: str, message: str) -> None:
    program = Program((Input("x", (1,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([1.0])}, dtype, np.array([1.0]))
    got = NumpyBackend().run(request)
    assert isinstance(got, ResultError) and got.message == message, got
