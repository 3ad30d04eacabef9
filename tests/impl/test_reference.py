"""The NumPy reference autograd reproduces the seed fixtures exactly, called directly and via IR.

The last section pins what the Tensor API promises on its own, which a
:class:`~resverify.spec.request.Request` never exercises (through a request every array
already has the request's dtype): a tensor's gradient and tangent are in its own dtype (the
reference never widens), an argument without a tangent counts as a zero tangent, and each
tensor names the op that made it. Mutation testing of ``impl/tensor.py``, ``impl/ops.py`` and
``impl/numpy_backend.py`` found those unpinned (``tools/mutation.py``; figures in
docs/strength.md §3).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.impl import NumpyBackend, Tensor, resolve_backend
from resverify.impl.ops import add, apply_op, linear, mul, relu, residual_add, scale, sum_all, tanh
from resverify.spec import Input, InvalidRequest, Node, Program, Request, ShapeMismatch, UsageError
from resverify.spec.fixtures import SEED_W, STACK_W, seed_cases, stack_request
from resverify.spec.request import ResultError, Value


def exact(array: np.ndarray) -> list[Fraction]:
    return [Fraction(float(v)) for v in np.ravel(array)]


def grad_of(tensor: Tensor) -> np.ndarray:
    """The gradient ``backward`` accumulated into a leaf (None before any backward)."""
    assert tensor.grad is not None, "backward left no gradient on this leaf"
    return tensor.grad


def fr(*values: str) -> list[Fraction]:
    return [Fraction(v) for v in values]


def leaf(values: object, dtype: str = "float64") -> Tensor:
    return Tensor(np.array(values, dtype=dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_linear_residual_block_matches_seed_s01_s06_exactly(dtype: str) -> None:
    x, w = leaf([2, -1], dtype), leaf(SEED_W, dtype)
    branch = linear(x, w)
    y = residual_add(x, branch)
    assert exact(branch.value) == fr("-1", "-2.25"), "S06 F(x)"
    assert exact(y.value) == fr("1", "-3.25"), "S01 y"
    assert y.shape == (2,)
    y.backward(np.array([1.0, 1.0], dtype=dtype))
    assert exact(grad_of(x)) == fr("0.5", "3.25"), "S06 x̄ = identity [1,1] + branch [-0.5,2.25]"
    assert exact(grad_of(w)) == fr("2", "2", "-1", "-1"), "S06 weight gradient, row-major"
    assert grad_of(x).dtype == np.dtype(dtype) and grad_of(w).dtype == np.dtype(dtype)


def test_zero_branch_passes_gradient_and_still_trains_s07() -> None:
    x, w = leaf([2, -1]), leaf(np.zeros((2, 2)))
    y = residual_add(x, linear(x, w))
    y.backward(np.array([1.0, 1.0]))
    assert exact(y.value) == fr("2", "-1")
    assert exact(grad_of(x)) == fr("1", "1")
    assert exact(grad_of(w)) == fr("2", "2", "-1", "-1")


def test_shared_operand_receives_twice_the_cotangent_s10() -> None:
    x = leaf([2, -1])
    residual_add(x, x).backward(np.array([1.5, -2.0]))
    assert exact(grad_of(x)) == fr("3", "-4")


@pytest.mark.parametrize(
    ("residual", "rows", "grad"),
    [
        (False, ["2 -1", "-0.5 0.25", "0.125 -0.0625", "-0.03125 0.015625",
                 "0.0078125 -0.00390625"], "0.00390625"),
        (True, ["2 -1", "1.5 -0.75", "1.125 -0.5625", "0.84375 -0.421875",
                "0.6328125 -0.31640625"], "0.31640625"),
    ],
)
def test_four_layer_stacks_match_seed_s11_at_every_depth(
        residual: bool, rows: list[str], grad: str) -> None:
    x = leaf([2, -1])
    weights = [leaf(STACK_W) for _ in range(4)]
    h, seen = x, [exact(x.value)]
    for w in weights:
        h = residual_add(h, linear(h, w)) if residual else linear(h, w)
        seen.append(exact(h.value))
    assert seen == [fr(*row.split()) for row in rows]
    h.backward(np.array([1.0, 1.0]))
    assert exact(grad_of(x)) == fr(grad, grad)
    assert Fraction(grad) == (Fraction(3, 4) if residual else Fraction(-1, 4)) ** 4
    for i, w in enumerate(weights):
        assert grad_of(w) is not None and np.all(np.isfinite(grad_of(w))), f"layer {i}"
        assert np.any(grad_of(w) != 0), f"layer {i} weight gradient is zero"


def test_scaled_relu_branch_matches_seed_s17() -> None:
    rows_residual, rows_plain = [], []
    for row in np.eye(2):
        x = leaf([-1, 2])
        f = scale(relu(x), Fraction(1, 2))
        y = residual_add(x, f)
        assert exact(f.value) == fr("0", "1") and exact(y.value) == fr("-1", "3")
        y.backward(row)
        rows_residual.append(exact(grad_of(x)))
        x2 = leaf([-1, 2])
        scale(relu(x2), Fraction(1, 2)).backward(row)
        rows_plain.append(exact(grad_of(x2)))
    assert rows_residual == [fr("1", "0"), fr("0", "1.5")], "Jacobian diag(1, 1.5)"
    assert rows_plain == [fr("0", "0"), fr("0", "0.5")], "Jacobian diag(0, 0.5)"


@pytest.mark.parametrize("case", sorted(seed_cases()))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_seed_fixture_through_ir_matches_exactly(case: str, dtype: str) -> None:
    request, output, grads = seed_cases()[case]
    request = Request(request.program, request.inputs, dtype, request.cotangent)
    result = NumpyBackend().run(request)
    assert isinstance(result, Value), result
    assert isinstance(result, Value)
    assert tuple(exact(result.output)) == output, f"{case} output [{request.program.describe()}]"
    for name, want in grads.items():
        assert tuple(exact(result.grads[name])) == want, f"{case} grad[{name}]"
        assert result.grads[name].dtype == np.dtype(dtype)


def test_same_fixture_twice_is_bitwise_identical_s12() -> None:
    first = NumpyBackend().run(stack_request(4, residual=True))
    second = NumpyBackend().run(stack_request(4, residual=True))
    assert isinstance(first, Value) and isinstance(second, Value)
    assert isinstance(first, Value) and isinstance(second, Value)
    assert first.output.tobytes() == second.output.tobytes()
    for name in first.grads:
        assert first.grads[name].tobytes() == second.grads[name].tobytes(), name


@pytest.mark.parametrize(
    ("left", "right"), [((2, 2), (2,)), ((2,), (2, 2)), ((2,), (1,)), ((), (2,)), ((0, 2), (2,))]
)
def test_rejected_merge_names_both_shapes_and_changes_nothing_s02(
        left: tuple[int, ...], right: tuple[int, ...]) -> None:
    x, b = leaf(np.ones(left)), leaf(np.full(right, 3.0))
    out = sum_all(mul(x, x))
    out.backward(np.array(1.0))
    before = grad_of(x).copy()
    assert add(x, b).shape is not None, "ordinary add broadcasts this pair"
    with pytest.raises(ShapeMismatch) as info:
        residual_add(x, b)
    assert (info.value.left, info.value.right) == (left, right)
    assert str(list(left)) in str(info.value) and str(list(right)) in str(info.value)
    assert np.array_equal(grad_of(x), before) and b.grad is None
    assert out.parents[0].parents == (x, x), "the graph is untouched"


def test_ir_rejection_is_a_typed_result_naming_both_shapes() -> None:
    program = Program((Input("x", (2, 2)), Input("b", (2,))),
                      (Node("y", "residual_add", ("x", "b")),), "y")
    request = Request(program, {"x": np.ones((2, 2)), "b": np.ones(2)}, "float64", None)
    result = NumpyBackend().run(request)
    assert isinstance(result, ResultError) and result.kind == "shape_mismatch"
    assert result.shapes == ((2, 2), (2,))
    assert "[2, 2] vs [2]" in result.message


@pytest.mark.parametrize("shape", [(), (0,), (0, 2), (3, 0, 2), (1, 1, 1)])
def test_residual_add_accepts_equal_shapes_of_any_rank(shape: tuple[int, ...]) -> None:
    x, f = leaf(np.ones(shape)), leaf(np.full(shape, 2.0))
    y = residual_add(x, f)
    assert y.shape == shape and np.all(y.value == 3.0)
    y.backward(np.full(shape, 0.5))
    assert grad_of(x).shape == shape and np.all(grad_of(x) == 0.5) and np.all(grad_of(f) == 0.5)


def test_broadcasting_add_and_mul_unbroadcast_their_gradients() -> None:
    a, b = leaf(np.arange(6.0).reshape(2, 3)), leaf([[10.0, 20.0, 30.0]])
    sum_all(add(a, b)).backward(np.array(1.0))
    assert grad_of(b).tolist() == [[2.0, 2.0, 2.0]] and grad_of(a).tolist() == [[1.0] * 3] * 2
    c, s = leaf([1.0, 2.0, 3.0]), leaf(2.0)
    mul(c, s).backward(np.array([1.0, 1.0, 1.0]))
    assert grad_of(c).tolist() == [2.0, 2.0, 2.0] and grad_of(s).tolist() == 6.0


def test_linear_on_leading_axes_sums_the_weight_gradient() -> None:
    x, w = leaf(np.arange(12.0).reshape(2, 3, 2)), leaf([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    y = linear(x, w)
    assert y.shape == (2, 3, 3)
    y.backward(np.ones((2, 3, 3)))
    assert grad_of(w).tolist() == (x.value.reshape(-1, 2).T @ np.ones((6, 3))).tolist()
    assert grad_of(x).tolist() == (np.ones((2, 3, 3)) @ w.value.T).tolist()


def test_relu_derivative_is_zero_at_zero_and_output_is_positive_zero() -> None:
    x = leaf([-0.0, 0.0, 1.0])
    y = relu(x)
    y.backward(np.array([1.0, 1.0, 1.0]))
    assert grad_of(x).tolist() == [0.0, 0.0, 1.0]
    assert not np.any(np.signbit(y.value))


def test_tanh_derivative_is_one_minus_tanh_squared() -> None:
    x = leaf([0.0, 0.5])
    y = tanh(x)
    y.backward(np.array([1.0, 1.0]))
    assert grad_of(x).tolist() == (1 - np.tanh([0.0, 0.5]) ** 2).tolist()


def test_gradients_accumulate_over_repeated_use_and_calls() -> None:
    x = leaf([1.0, -2.0])
    y = add(scale(x, 3), x)
    y.backward(np.array([1.0, 1.0]))
    assert grad_of(x).tolist() == [4.0, 4.0]
    y.backward(np.array([1.0, 1.0]))
    assert grad_of(x).tolist() == [8.0, 8.0], "a second backward adds, it does not overwrite"


def test_float32_stays_float32_through_every_op() -> None:
    x, w = leaf([[1.0, 2.0]], "float32"), leaf(np.eye(2), "float32")
    y = sum_all(tanh(scale(residual_add(x, mul(relu(linear(x, w)), x)), Fraction(1, 3))))
    assert y.dtype == np.dtype("float32")
    y.backward(np.array(1.0, dtype="float32"))
    assert grad_of(x).dtype == np.dtype("float32") and grad_of(w).dtype == np.dtype("float32")


def test_backward_refuses_a_seed_of_the_wrong_shape() -> None:
    with pytest.raises(InvalidRequest, match=r"seed shape \[3\] != tensor shape \[2\]"):
        leaf([1.0, 2.0]).backward(np.ones(3))


def test_unused_input_gets_a_zero_gradient_and_bfloat16_is_unsupported() -> None:
    program = Program((Input("x", (2,)), Input("u", (1,))), (Node("y", "relu", ("x",)),), "y")
    values = {"x": np.array([1.0, -1.0]), "u": np.array([5.0])}
    request = Request(program, values, "float64", np.array([1.0, 1.0]))
    result = NumpyBackend().run(request)
    assert isinstance(result, Value) and result.grads["u"].tolist() == [0.0]
    bf = Request(program, values, "bfloat16", np.array([1.0, 1.0]))
    failed = NumpyBackend().run(bf)
    assert isinstance(failed, ResultError) and failed.kind == "unsupported"


def test_backend_names_resolve_or_fail_with_a_usage_error() -> None:
    assert resolve_backend("numpy").name == "numpy"
    assert resolve_backend("resverify.impl.numpy_backend:NumpyBackend").name == "numpy"
    for bad in ("nope", "no_such_module:X", "resverify.impl.numpy_backend:Missing",
                "resverify.spec.ir:OPS"):
        with pytest.raises(UsageError):
            resolve_backend(bad)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"), [((2, 0), (0, 3)), ((0, 2), (2, 3)), ((2,), (2, 0))]
)
def test_linear_with_an_empty_axis_gives_empty_or_zero_gradients(
        x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    x, w = leaf(np.ones(x_shape)), leaf(np.ones(w_shape))
    y = linear(x, w)
    assert y.shape == (*x_shape[:-1], w_shape[1])
    y.backward(np.ones(y.shape))
    assert grad_of(x).shape == x_shape and grad_of(w).shape == w_shape
    assert not np.any(grad_of(x)) and not np.any(grad_of(w))


# --- the Tensor API on its own: dtypes, zero tangents, op names ---

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
