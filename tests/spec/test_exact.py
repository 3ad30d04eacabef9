"""The exact interpreter: seed values, shapes, sharing, and the tanh enclosure."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from mpmath import libmp

from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import (
    TANH_PRECISION_BITS,
    as_fractions,
    evaluate,
    evaluate_exact,
    exact_tanh,
)
from resverify.spec.fixtures import seed_cases
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

F = Fraction


def flat(array: np.ndarray) -> tuple[Fraction, ...]:
    return tuple(array.reshape(-1).tolist())


def one_node(op: str, shapes: list[tuple[int, ...]], alpha: Fraction | None = None) -> Program:
    names = ["a", "b"][: len(shapes)]
    return Program(tuple(Input(n, s) for n, s in zip(names, shapes, strict=True)),
                   (Node("y", op, tuple(names), alpha),), "y")


@pytest.mark.parametrize("name", sorted(seed_cases()))
def test_seed_fixtures_evaluate_to_their_exact_values(name: str) -> None:
    request, output, grads = seed_cases()[name]
    result = evaluate(request)
    assert result.error is None and result.output is not None and result.grads is not None
    assert flat(result.output) == output, (
        f"output={flat(result.output)}, but should be {output} [{request.program.describe()}]")
    for key, expected in grads.items():
        assert flat(result.grads[key]) == expected, (
            f"grad[{key}]={flat(result.grads[key])}, but should be {expected} [{name}]")
    assert result.slack == 0


def test_every_element_is_a_fraction_with_the_reference_shapes() -> None:
    result = evaluate_exact(one_node("add", [(2, 1), (3,)]), {"a": [[1.0], [2.0]],
                                                               "b": [0.5, 0.25, 0.0]},
                            np.ones((2, 3)))
    assert result.output is not None and result.grads is not None
    assert result.output.shape == (2, 3) and result.output.dtype == object
    assert all(type(v) is Fraction for v in result.output.reshape(-1))
    assert {k: v.shape for k, v in result.grads.items()} == {"a": (2, 1), "b": (3,)}
    assert all(type(v) is Fraction for g in result.grads.values() for v in g.reshape(-1))


@pytest.mark.parametrize(("op", "left", "right"), [
    ("residual_add", (2, 2), (2,)),
    ("residual_add", (2, 1), (2, 3)),
    ("residual_add", (), (1,)),
    ("add", (3,), (2,)),
    ("mul", (2, 3), (3, 2)),
    ("linear", (2, 3), (2, 3)),
])
def test_shape_mismatch_is_a_typed_error_naming_both_shapes(
        op: str, left: tuple[int, ...], right: tuple[int, ...]) -> None:
    program = one_node(op, [left, right])
    result = evaluate_exact(program, {"a": np.zeros(left), "b": np.zeros(right)}, None)
    assert result.error is not None, f"{op}{left, right} was accepted: {result}"
    assert result.error.kind == "shape_mismatch"
    assert result.error.shapes == (left, right)
    assert str(list(left)) in result.error.message and str(list(right)) in result.error.message
    assert result.output is None and result.grads is None


def test_shape_mismatch_through_a_request_matches_the_typed_result() -> None:
    program = one_node("residual_add", [(2, 2), (2,)])
    request = Request(program, {"a": np.zeros((2, 2)), "b": np.zeros(2)}, "float64", None)
    result = evaluate(request)
    assert result.error is not None and result.error.shapes == ((2, 2), (2,))


def test_shared_operand_receives_the_cotangent_once_per_use() -> None:
    program = Program((Input("a", (3,)),), (Node("y", "residual_add", ("a", "a")),), "y")
    cot = [F(1, 3), F(-2), F(5, 7)]
    result = evaluate_exact(program, {"a": [F(1), F(2), F(3)]}, cot)
    assert result.grads is not None
    assert flat(result.grads["a"]) == tuple(2 * c for c in cot)


def test_k_fold_sharing_gives_k_times_the_cotangent() -> None:
    nodes = [Node("s1", "add", ("x", "x"))] + [
        Node(f"s{k}", "add", (f"s{k - 1}", "x")) for k in range(2, 5)]
    program = Program((Input("x", (2,)),), tuple(nodes), "s4")
    result = evaluate_exact(program, {"x": [1.0, -1.0]}, [F(3, 2), F(1, 5)])
    assert result.grads is not None
    assert flat(result.grads["x"]) == (5 * F(3, 2), 5 * F(1, 5))


def test_rank_zero_values_stay_rank_zero() -> None:
    program = Program((Input("x", ()), Input("k", ())),
                      (Node("m", "mul", ("x", "k")), Node("y", "residual_add", ("x", "m"))), "y")
    result = evaluate_exact(program, {"x": F(1, 3), "k": F(3, 4)}, F(2))
    assert result.output is not None and result.grads is not None
    assert result.output.shape == () and result.output[()] == F(1, 3) + F(1, 4)
    assert result.grads["x"][()] == 2 * (1 + F(3, 4)) and result.grads["k"][()] == F(2, 3)


def test_empty_axes_give_empty_values_and_zero_weight_gradients() -> None:
    program = Program((Input("x", (0, 2)), Input("w", (2, 3))),
                      (Node("l", "linear", ("x", "w")), Node("s", "sum", ("l",))), "s")
    result = evaluate_exact(program, {"x": np.zeros((0, 2)), "w": np.ones((2, 3))}, F(7))
    assert result.output is not None and result.grads is not None
    assert result.output.shape == () and result.output[()] == 0
    assert result.grads["x"].shape == (0, 2)
    assert flat(result.grads["w"]) == (F(0),) * 6
    assert type(result.output[()]) is Fraction


@pytest.mark.parametrize(("x_shape", "w_shape"), [((2, 0), (0, 3)), ((2, 2), (2, 0)),
                                                  ((0, 0), (0, 0))])
def test_linear_with_an_empty_inner_or_outer_axis(x_shape: tuple[int, int],
                                                  w_shape: tuple[int, int]) -> None:
    program = one_node("linear", [x_shape, w_shape])
    out_shape = (x_shape[0], w_shape[1])
    result = evaluate_exact(program, {"a": np.ones(x_shape), "b": np.ones(w_shape)},
                            np.ones(out_shape))
    assert result.output is not None and result.grads is not None
    assert result.output.shape == out_shape and all(v == 0 for v in result.output.flat)
    assert result.grads["a"].shape == x_shape and all(v == 0 for v in result.grads["a"].flat)
    assert result.grads["b"].shape == w_shape


def test_unused_inputs_get_zero_gradients() -> None:
    program = Program((Input("x", (2,)), Input("u", (2, 2))),
                      (Node("y", "scale", ("x",), F(1, 3)),), "y")
    result = evaluate_exact(program, {"x": [1.0, 2.0], "u": np.ones((2, 2))}, [1.0, 1.0])
    assert result.grads is not None
    assert flat(result.grads["u"]) == (F(0),) * 4
    assert flat(result.grads["x"]) == (F(1, 3), F(1, 3))


def test_scale_uses_alpha_exactly_not_rounded() -> None:
    result = evaluate_exact(one_node("scale", [(2,)], F(1, 10)), {"a": [1.0, 3.0]}, [2.0, 1.0])
    assert result.output is not None and result.grads is not None
    assert flat(result.output) == (F(1, 10), F(3, 10))
    assert flat(result.grads["a"]) == (F(1, 5), F(1, 10))


def test_broadcast_gradients_are_summed_back_to_each_input_shape() -> None:
    a = [[F(1)], [F(2)]]
    b = [F(1, 2), F(1, 3), F(1, 4)]
    cot = [[F(1), F(2), F(3)], [F(4), F(5), F(6)]]
    result = evaluate_exact(one_node("mul", [(2, 1), (3,)]), {"a": a, "b": b}, cot)
    assert result.output is not None and result.grads is not None
    assert flat(result.output) == (F(1, 2), F(1, 3), F(1, 4), F(1), F(2, 3), F(1, 2))
    assert flat(result.grads["a"]) == (F(1, 2) + F(2, 3) + F(3, 4), 2 + F(5, 3) + F(6, 4))
    assert flat(result.grads["b"]) == (F(1) + 8, F(2) + 10, F(3) + 12)


def test_batched_linear_sums_the_weight_gradient_over_leading_axes() -> None:
    x = np.array([[[1, 2]], [[3, 4]]], dtype=object)  # (2, 1, 2)
    w = np.array([[1, 0, F(1, 2)], [0, 1, F(1, 3)]], dtype=object)
    result = evaluate_exact(one_node("linear", [(2, 1, 2), (2, 3)]), {"a": x, "b": w},
                            np.ones((2, 1, 3), dtype=object))
    assert result.output is not None and result.grads is not None
    assert flat(result.output) == (1, 2, F(1, 2) + F(2, 3), 3, 4, F(3, 2) + F(4, 3))
    assert flat(result.grads["a"]) == (F(3, 2), F(4, 3)) * 2
    assert flat(result.grads["b"]) == (4, 4, 4, 6, 6, 6)


def test_relu_derivative_is_zero_at_zero() -> None:
    result = evaluate_exact(one_node("relu", [(3,)]), {"a": [-1.0, 0.0, 2.0]}, [5.0, 5.0, 5.0])
    assert result.output is not None and result.grads is not None
    assert flat(result.output) == (0, 0, 2)
    assert flat(result.grads["a"]) == (0, 0, 5)


def test_as_fractions_reads_floats_exactly_and_drops_the_sign_of_zero() -> None:
    values = as_fractions(np.array([-0.0, 0.1, 2.0**-1074], dtype=np.float64))
    assert flat(values) == (F(0), F(0.1), F(1, 2**1074))
    assert F(0.1) != F(1, 10)
    assert flat(as_fractions(np.array([0.1], dtype=np.float32))) == (F(float(np.float32(0.1))),)
    assert as_fractions(np.float64(3.0)).shape == ()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_are_refused(bad: float) -> None:
    with pytest.raises(InvalidRequest, match="finite"):
        as_fractions([1.0, bad])


@pytest.mark.parametrize("x", [F(1, 3), F(-5, 2), F(1, 2**40), F(1, 2**300), F(-1, 2**1074),
                               F(20), F(300), F(0), F(255, 1) + F(1, 7)])
def test_tanh_enclosure_holds_against_a_higher_precision_evaluation(x: Fraction) -> None:
    t, err = exact_tanh(x)
    with mpmath.workprec(1600):
        true = mpmath.tanh(mpmath.mpf(x.numerator) / x.denominator)
        gap = abs(true - mpmath.mpf(t.numerator) / t.denominator)
        assert gap <= mpmath.mpf(err.numerator) / err.denominator + mpmath.mpf(2) ** -1500, (
            f"tanh({x}) = {t} ± {float(err)}, but mpmath says {true}")
    assert err <= abs(t) / 2**TANH_PRECISION_BITS or abs(t) == 1


def test_slack_is_zero_without_tanh_and_tiny_with_it() -> None:
    program = Program((Input("x", (2,)),), (Node("t", "tanh", ("x",)),
                                           Node("y", "residual_add", ("x", "t"))), "y")
    result = evaluate_exact(program, {"x": [0.5, -3.0]}, [1.0, 1.0])
    assert result.grads is not None and result.output is not None
    assert 0 < result.slack < F(1, 2**190)
    with mpmath.workprec(400):
        expected = 1 + (1 - mpmath.tanh(mpmath.mpf(0.5)) ** 2)
        assert abs(result.grads["x"][0] - F(*libmp.to_rational(expected._mpf_))) \
            <= result.slack


def test_slack_bounds_the_error_after_a_large_scale_and_a_sum() -> None:
    program = Program((Input("x", (3,)),), (Node("t", "tanh", ("x",)),
                                           Node("s", "scale", ("t",), F(2**120)),
                                           Node("y", "sum", ("s",))), "y")
    xs = [F(1, 3), F(-7, 5), F(22, 7)]
    result = evaluate_exact(program, {"x": xs}, None)
    assert result.output is not None
    with mpmath.workprec(800):
        true = sum(mpmath.tanh(mpmath.mpf(x.numerator) / x.denominator) for x in xs) * 2**120
        value: Fraction = result.output.item()
        gap = abs(mpmath.mpf(value.numerator) / value.denominator - true)
        bound = mpmath.mpf(result.slack.numerator) / result.slack.denominator
    assert gap <= bound, f"error {gap} exceeds slack {bound} [{program.describe()}]"
    assert result.slack >= 2**120 * F(1, 2**TANH_PRECISION_BITS) / 2


def test_inputs_may_be_arbitrary_fractions() -> None:
    program = one_node("linear", [(2,), (2, 1)])
    result = evaluate_exact(program, {"a": [F(1, 3), F(2, 7)], "b": [[F(3)], [F(7, 2)]]}, [F(1)])
    assert result.output is not None and flat(result.output) == (F(2),)


def test_forward_only_when_no_cotangent() -> None:
    result = evaluate_exact(one_node("sum", [(2, 2)]), {"a": np.ones((2, 2))}, None)
    assert result.output is not None and result.output[()] == 4 and result.grads is None


def test_wrong_input_names_or_shapes_are_refused() -> None:
    program = one_node("relu", [(2,)])
    with pytest.raises(InvalidRequest, match="do not match"):
        evaluate_exact(program, {"z": [1.0, 2.0]}, None)
    with pytest.raises(InvalidRequest, match="declared"):
        evaluate_exact(program, {"a": [1.0, 2.0, 3.0]}, None)
    with pytest.raises(InvalidRequest, match="cotangent"):
        evaluate_exact(program, {"a": [1.0, 2.0]}, [1.0])
