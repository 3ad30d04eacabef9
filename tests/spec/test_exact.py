"""The exact interpreter (``spec/exact.py``) in reverse and in forward mode.

* Reverse mode: seed values, shapes, sharing, and the tanh enclosure.
* Forward mode, the output tangent ``J t``: the per-op JVP rules are checked against SymPy's
  Jacobians in ``tests/spec/ops/``; here whole programs are. A rational program without relu
  kinks is a polynomial in a step ``s`` along the tangent, so ``d/ds f(x + s t)`` at 0 is known
  exactly from the forward alone (interpolate ``f`` at ``deg + 1`` exact points): the
  interpreter's tangent must equal it, with nothing of the JVP rules used. The duality
  ``⟨ȳ, J t⟩ = ⟨Jᵀ ȳ, t⟩`` ties forward and reverse mode together and holds exactly in
  Fractions, for every program: each JVP rule uses the very factors its VJP uses (the carried
  tanh values, the same enclosed ``1/sqrt`` of the norms), so the spec's tangent and gradients
  are exact transposes of each other even where a value is enclosed.
* The enclosures the interpreter carries: wherever a value is only known to within ``e``
  (tanh's enclosure), every result computed from it must carry at least the error that ``e``
  allows there, in reverse and in forward mode, and once per use. These tests were written
  where mutation testing (``tools/mutation.py``; figures in docs/strength.md §3) found verdicts
  of the interpreter that the rest of the file did not pin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mpmath import libmp

from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import (
    TANH_PRECISION_BITS,
    ExactResult,
    as_fractions,
    evaluate,
    evaluate_exact,
)
from resverify.spec.fixtures import seed_cases
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Linear
from resverify.spec.rational import exact_tanh
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


# --- forward mode: whole programs against their exact directional derivative ---

RATIONAL_OPS = ("add", "residual_add", "mul", "scale", "linear", "relu")
ALL_OPS = (*RATIONAL_OPS, "tanh", "layer_norm", "rms_norm")
Draw = Callable[[st.SearchStrategy[Any]], Any]


def small_fractions() -> st.SearchStrategy[Fraction]:
    return st.builds(Fraction, st.integers(-12, 12), st.sampled_from([1, 2, 3, 4, 8]))


@st.composite
def programs(draw: Draw, ops: tuple[str, ...] = RATIONAL_OPS) -> Program:
    """A random DAG over ``x`` (n,), ``w`` (n, n) and ``k`` (): each node applies an op of
    ``ops`` to earlier values (any may be reused; add and mul may broadcast ``k``), the
    output optionally summed to shape ()."""
    n = draw(st.integers(1, 3))
    names, nodes = ["x"], []
    for i in range(draw(st.integers(1, 6))):
        op, name = draw(st.sampled_from(ops)), f"v{i}"
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if op == "linear":
            nodes.append(Node(name, op, (a, "w")))
        elif op in ("add", "mul"):
            nodes.append(Node(name, op, (a, draw(st.sampled_from([b, "k"])))))
        elif OP_TABLE[op].arity == 2:
            nodes.append(Node(name, op, (a, b)))
        elif op == "scale":
            nodes.append(Node(name, op, (a,), draw(small_fractions())))
        elif op in ("layer_norm", "rms_norm"):
            nodes.append(Node(name, op, (a,), eps=F(1, draw(st.sampled_from([4, 100])))))
        else:
            nodes.append(Node(name, op, (a,)))
        names.append(name)
    if draw(st.booleans()):
        nodes.append(Node("s", "sum", (names[-1],)))
        names.append("s")
    return Program((Input("x", (n,)), Input("w", (n, n)), Input("k", ())), tuple(nodes),
                   names[-1])


def fill(draw: Draw, program: Program) -> dict[str, np.ndarray]:
    """Random rationals for every input of ``program``."""
    out = {}
    for i in program.inputs:
        flat = draw(st.lists(small_fractions(), min_size=int(np.prod(i.shape)),
                             max_size=int(np.prod(i.shape))))
        out[i.name] = np.array(flat, dtype=object).reshape(i.shape)
    return out


def output_shape(program: Program) -> tuple[int, ...]:
    return () if program.output == "s" else program.inputs[0].shape


def duality_gap(exact: ExactResult, cotangent: np.ndarray,
                tangents: Mapping[str, np.ndarray]) -> Fraction:
    """``⟨ȳ, J t⟩ - ⟨Jᵀ ȳ, t⟩`` in Fractions, from one exact result with both."""
    assert exact.tangent is not None and exact.grads is not None
    forward = sum((c * t for c, t in zip(cotangent.flat, exact.tangent.flat, strict=True)),
                  F(0))
    reverse = sum((g * t for name, tan in tangents.items()
                   for g, t in zip(exact.grads[name].flat, tan.flat, strict=True)), F(0))
    return forward - reverse


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_duality_holds_exactly_in_the_spec(data: st.DataObject) -> None:
    """⟨ȳ, J t⟩ == ⟨Jᵀȳ, t⟩ exactly, on rational programs (every op but tanh and the norms)."""
    program = data.draw(programs())
    inputs, tangents = fill(data.draw, program), fill(data.draw, program)
    cot = np.array(data.draw(st.lists(small_fractions(), min_size=1, max_size=3)), dtype=object)
    cot = np.resize(cot, output_shape(program))
    exact = evaluate_exact(program, inputs, cot, tangents)
    assert exact.slack == 0, f"slack {exact.slack} on a rational program"
    gap = duality_gap(exact, cot, tangents)
    assert gap == 0, f"<ȳ, J t> - <Jᵀȳ, t> = {gap}, but should be 0 [{program.describe()}]"


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_duality_holds_exactly_even_through_enclosed_values(data: st.DataObject) -> None:
    """With tanh and the norms too: the tangent and the gradients use the same carried
    factors, so the spec's J and Jᵀ are exact transposes."""
    program = data.draw(programs(ALL_OPS))
    inputs, tangents = fill(data.draw, program), fill(data.draw, program)
    cot = np.resize(np.array([F(3, 2), F(-1), F(1, 4)], dtype=object), output_shape(program))
    exact = evaluate_exact(program, inputs, cot, tangents)
    gap = duality_gap(exact, cot, tangents)
    assert gap == 0, f"<ȳ, J t> - <Jᵀȳ, t> = {gap}, but should be 0 [{program.describe()}]"


def test_duality_catches_a_tangent_rule_that_is_not_the_transpose(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The law can fail: linear's tangent through ``wᵀ`` breaks it on a non-symmetric w."""
    program = Program((Input("x", (2,)), Input("w", (2, 2))),
                      (Node("f", "linear", ("x", "w")), Node("y", "residual_add", ("x", "f"))),
                      "y")
    inputs = {"x": np.array([F(1), F(2)], dtype=object),
              "w": np.array([[F(1), F(2)], [F(3), F(4)]], dtype=object)}
    tangents = {"x": np.array([F(1), F(0)], dtype=object), "w": np.zeros((2, 2), dtype=object)}
    cot = np.array([F(0), F(1)], dtype=object)
    assert duality_gap(evaluate_exact(program, inputs, cot, tangents), cot, tangents) == 0

    def transposed(self: Linear, ts: Any, args: Any, out: Any, alpha: Any) -> np.ndarray:
        return np.asarray(ts[0] @ args[1].T + args[0] @ ts[1], dtype=object)

    monkeypatch.setattr(Linear, "exact_jvp", transposed)
    assert duality_gap(evaluate_exact(program, inputs, cot, tangents), cot, tangents) != 0


# ----------------------------------------------------------------------------------------
# the tangent is the derivative along t, from the forward alone


def degree(program: Program) -> int:
    """A bound of the degree of ``s ↦ f(x + s t)`` (relu counted as its active piece)."""
    deg = {"x": 1, "w": 1, "k": 1}
    for node in program.order:
        parts = [deg[a] for a in node.args]
        deg[node.name] = sum(parts) if node.op in ("mul", "linear") else max(parts)
    return deg[program.output]


def relu_signs(program: Program, inputs: Mapping[str, np.ndarray]) -> list[tuple[int, ...]]:
    """The sign of every relu input (the piece the program is on)."""
    trace = evaluate_exact(program, inputs, None).trace
    assert trace is not None
    return [tuple(int(np.sign(v)) for v in trace.values[n.args[0]].flat)
            for n in program.order if n.op == "relu"]


def directional_derivative(program: Program, inputs: Mapping[str, np.ndarray],
                           tangents: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """``d/ds f(x + s t)`` at 0, exactly, by interpolating the exact forward at deg + 1
    steps of 2**-64; None when a relu changes piece (or sits at 0) among those steps."""
    s, h = sympy.Symbol("s"), F(1, 2**64)
    steps = [h * k for k in range(degree(program) + 1)]
    moved = [{n: np.asarray(v + step * tangents[n], dtype=object) for n, v in inputs.items()}
             for step in steps]
    signs = [relu_signs(program, m) for m in moved]
    if any(sign != signs[0] for sign in signs) or any(0 in sign for sign in signs[0]):
        return None
    outs = [np.asarray(evaluate_exact(program, m, None).output) for m in moved]
    values = [o.reshape(-1) for o in outs]
    derivative = []
    for i in range(values[0].size):
        points = [(sympy.Rational(st_.numerator, st_.denominator),
                   sympy.Rational(v[i].numerator, v[i].denominator))
                  for st_, v in zip(steps, values, strict=True)]
        slope = sympy.diff(sympy.interpolate(points, s), s).subs(s, 0)
        derivative.append(F(int(slope.p), int(slope.q)))
    return np.array(derivative, dtype=object).reshape(outs[0].shape)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_tangent_is_the_exact_derivative_along_the_tangent(data: st.DataObject) -> None:
    program = data.draw(programs())
    inputs, tangents = fill(data.draw, program), fill(data.draw, program)
    want = directional_derivative(program, inputs, tangents)
    assume(want is not None)
    assert want is not None
    got = evaluate_exact(program, inputs, None, tangents).tangent
    assert got is not None
    assert got.shape == want.shape and list(got.flat) == list(want.flat), (
        f"tangent={list(got.flat)}, but should be {list(want.flat)} [{program.describe()}]")


# ----------------------------------------------------------------------------------------
# the interface


def block() -> Program:
    return Program((Input("x", (2,)), Input("w", (2, 2))),
                   (Node("f", "linear", ("x", "w")), Node("r", "relu", ("f",)),
                    Node("a", "scale", ("r",), F(1, 3)),
                    Node("y", "residual_add", ("x", "a"))), "y")


def test_a_residual_block_tangent_by_hand() -> None:
    """y = x + relu(x w)/3: ṫ = t_x + [xw > 0](t_x w + x t_w)/3."""
    x, w = [1.0, -2.0], [[1.0, 0.5], [0.25, 1.0]]  # x w = [0.5, -1.5]: second unit off
    tangents = {"x": [F(1, 2), F(3)], "w": [[F(1), F(0)], [F(2), F(1)]]}
    result = evaluate_exact(block(), {"x": x, "w": w}, None, tangents)
    assert result.tangent is not None and result.grads is None
    t_f0 = F(1, 2) * 1 + 3 * F(1, 4) + (1 * 1 + -2 * 2)  # (t_x w)_0 + (x t_w)_0
    assert list(result.tangent) == [F(1, 2) + t_f0 / 3, F(3)]


def test_evaluate_passes_the_request_tangents() -> None:
    program = block()
    request = Request(program, {"x": [1.0, 2.0], "w": np.eye(2)}, "float64", [1.0, 1.0],
                      tangents={"x": [1.0, 0.0], "w": np.zeros((2, 2))})
    result = evaluate(request)
    assert result.tangent is not None and result.grads is not None
    assert list(result.tangent) == [F(4, 3), F(0)]
    assert evaluate(Request(program, request.inputs, "float64", [1.0, 1.0])).tangent is None


def test_tangents_must_name_every_input_with_its_shape() -> None:
    inputs = {"x": [1.0, 2.0], "w": np.eye(2)}
    with pytest.raises(InvalidRequest, match=r"tangents .* do not match"):
        evaluate_exact(block(), inputs, None, {"x": [1.0, 2.0]})
    with pytest.raises(InvalidRequest, match="tangent 'w' has shape"):
        evaluate_exact(block(), inputs, None, {"x": [1.0, 2.0], "w": [1.0]})


def test_a_shape_invalid_program_has_no_tangent() -> None:
    program = Program((Input("a", (2,)), Input("b", (3,))),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    result = evaluate_exact(program, {"a": np.ones(2), "b": np.ones(3)}, None,
                            {"a": np.ones(2), "b": np.ones(3)})
    assert result.error is not None and result.tangent is None


def test_slack_bounds_the_tangent_through_tanh_and_a_norm() -> None:
    """y = sum(2**100 · rms_norm(tanh(x))): its tangent against a 600-bit mpmath
    evaluation of the same chain rule is within the slack, and the slack is not 0."""
    eps = F(1, 4)
    program = Program((Input("x", (3,)),), (
        Node("t", "tanh", ("x",)), Node("n", "rms_norm", ("t",), eps=eps),
        Node("k", "scale", ("n",), F(2**100)), Node("y", "sum", ("k",))), "y")
    xs, ts = [F(1, 3), F(-7, 5), F(2)], [F(1), F(-2), F(1, 2)]
    result = evaluate_exact(program, {"x": xs}, None, {"x": ts})
    assert result.tangent is not None and 0 < result.slack < 2**100 * F(1, 2**180)
    with mpmath.workprec(600):
        def mp(v: Fraction) -> Any:
            return mpmath.mpf(v.numerator) / v.denominator
        th = [mpmath.tanh(mp(x)) for x in xs]
        dt = [mp(t) * (1 - v * v) for t, v in zip(ts, th, strict=True)]
        r = 1 / mpmath.sqrt(sum(v * v for v in th) / 3 + mp(eps))
        m = sum(v * r * d for v, d in zip(th, dt, strict=True)) / 3
        true = 2**100 * sum(r * (d - v * r * m) for v, d in zip(th, dt, strict=True))
        gap = abs(mp(result.tangent.item()) - true)
        assert gap <= mp(result.slack), f"tangent off by {gap}, slack {float(result.slack)}"


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_slack_covers_the_enclosed_rsqrt_of_a_row_whose_output_is_exact(op: str) -> None:
    """A zero row: the norm's output is exactly 0, but its gradient and tangent are
    ``r = 1/sqrt(ε)`` times something, with r enclosed (ε = 10⁻⁵ is no square), so the
    slack must not be 0, and it bounds both against a 600-bit evaluation."""
    program = Program((Input("x", (3,)),), (Node("y", op, ("x",), eps=F(1, 10**5)),), "y")
    cot, tan = [F(1), F(-2), F(4)], [F(3), F(1), F(-1)]
    result = evaluate_exact(program, {"x": np.zeros(3)}, cot, {"x": tan})
    assert result.tangent is not None and result.grads is not None
    assert result.slack > 0, "an enclosed 1/sqrt(eps) was carried with no slack"
    centre = (lambda v: [x - sum(v) / 3 for x in v]) if op == "layer_norm" else list
    with mpmath.workprec(600):
        r = 1 / mpmath.sqrt(mpmath.mpf(1) / 10**5)
        for got, want in ((result.tangent, centre(tan)), (result.grads["x"], centre(cot))):
            for g, w in zip(got.flat, want, strict=True):
                gap = abs(mpmath.mpf(g.numerator) / g.denominator - r * (mpmath.mpf(
                    w.numerator) / w.denominator))
                assert gap <= mpmath.mpf(result.slack.numerator) / result.slack.denominator


# --- the enclosures carried through every use and both modes ---

X, Z = [F(1, 2), F(-3)], [F(1, 1000), F(-1, 1000)]
"""tanh's argument, and a small factor that keeps the output's own error far below the
gradient's (``|z| e`` against ``|ȳ| e``)."""


def _product_of_tanh(uses: int) -> Program:
    """``y = Σ_k t·z`` over ``uses`` separate products ``m_k = mul(t, z)``, ``t = tanh(x)``:
    z's gradient is ``uses · ȳ t``, each part multiplying the enclosed t by ȳ."""
    products = tuple(Node(f"m{k}", "mul", ("t", "z")) for k in range(uses))
    merged = products[0].name
    nodes: list[Node] = [Node("t", "tanh", ("x",)), *products]
    for k in range(1, uses):
        nodes.append(Node(f"s{k}", "residual_add", (merged, f"m{k}")))
        merged = f"s{k}"
    return Program((Input("x", (2,)), Input("z", (2,))), tuple(nodes), merged)


def _enclosure(result: ExactResult) -> Fraction:
    assert result.trace is not None, "evaluate_exact(...).trace is None"
    return result.trace.slack["t"]


@pytest.mark.parametrize("uses", [1, 2, 3])
def test_a_gradient_through_an_enclosed_value_carries_its_error_once_per_use(uses: int) -> None:
    """z's exact gradient is ``uses · ȳ tanh(x)``; the interpreter carries t only to within
    its enclosure e, so the gradient may be off by ``uses · |ȳ| e`` and the slack must say
    so (not 0 as for an exact rational rule, not one use's share, not their difference)."""
    cotangent = [F(10**6), F(-10**6)]
    result = evaluate_exact(_product_of_tanh(uses), {"x": X, "z": Z}, cotangent)
    e = _enclosure(result)
    need = uses * 10**6 * e
    assert e > 0 and result.slack >= need, (
        f"evaluate_exact(y = sum of {uses} t*z, ȳ = ±1e6).slack = {result.slack}, "
        f"expected >= {uses}·|ȳ|·e = {need}")


def test_a_tangent_through_an_enclosed_value_carries_its_error() -> None:
    """Forward mode, no cotangent: ``J t = t_x (1 - t²) z + t t_z``; with ``t_z`` large the
    tangent may be off by ``|t_z| e`` and the result's slack is the tangent's, not just the
    output's ``|z| e``."""
    tangents = {"x": [F(0), F(0)], "z": [F(10**6), F(10**6)]}
    result = evaluate_exact(_product_of_tanh(1), {"x": X, "z": Z}, None, tangents)
    need = 10**6 * _enclosure(result)
    assert result.slack >= need, (
        f"evaluate_exact(y = t*z, t_z = 1e6, no cotangent).slack = {result.slack}, "
        f"expected >= |t_z|·e = {need}")


def test_a_rational_program_is_exact_in_both_modes() -> None:
    program = Program((Input("x", (2,)), Input("z", (2,))),
                      (Node("m", "mul", ("x", "z")), Node("y", "relu", ("m",))), "y")
    result = evaluate_exact(program, {"x": X, "z": Z}, [F(3), F(1)],
                            {"x": [F(1), F(2)], "z": [F(5), F(-1)]})
    assert result.slack == 0, f"slack {result.slack}, expected 0 for mul and relu"


def test_the_trace_keeps_every_value_slack_and_tangent() -> None:
    """``budget.error_budget(exact=...)`` reads the trace: every input's and node's value
    and slack, and in forward mode every tangent and its slack (None without tangents)."""
    tangents = {"x": [F(1), F(0)], "z": [F(0), F(1)]}
    program = _product_of_tanh(1)
    reverse = evaluate_exact(program, {"x": X, "z": Z}, [F(1), F(1)])
    forward = evaluate_exact(program, {"x": X, "z": Z}, [F(1), F(1)], tangents)
    names = ["x", "z", "t", "m0"]
    for result in (reverse, forward):
        trace = result.trace
        assert trace is not None, f"trace of {program.describe()} is None"
        assert sorted(trace.values) == sorted(trace.slack) == sorted(names), trace
        assert trace.slack["x"] == 0 < trace.slack["t"] == trace.slack["m0"] / F(1, 1000), trace
        assert result.output is not None
        assert list(trace.values["m0"]) == list(result.output), (trace.values, result.output)
    assert reverse.trace is not None and reverse.trace.tangents is None
    assert reverse.trace.tangent_slack is None, reverse.trace
    assert forward.trace is not None and forward.trace.tangents is not None
    assert forward.trace.tangent_slack is not None, forward.trace
    assert forward.tangent is not None
    assert list(forward.trace.tangents["z"]) == tangents["z"], forward.trace.tangents
    assert list(forward.trace.tangents["m0"]) == list(forward.tangent), forward.trace.tangents
    assert sorted(forward.trace.tangent_slack) == sorted(names), forward.trace.tangent_slack
    assert forward.trace.tangent_slack["t"] > 0 == forward.trace.tangent_slack["z"]


def test_an_unused_input_gets_a_zero_gradient_of_its_own_shape() -> None:
    program = Program((Input("x", (2,)), Input("u", (2, 3))),
                      (Node("y", "scale", ("x",), F(1, 3)),), "y")
    result = evaluate_exact(program, {"x": X, "u": np.ones((2, 3))}, [F(1), F(1)])
    assert result.grads is not None
    got = result.grads["u"]
    assert got.shape == (2, 3) and not got.any(), f"grads['u'] = {got!r}, expected zeros (2, 3)"


def test_a_shape_mismatch_has_zero_slack() -> None:
    program = Program((Input("x", (2,)), Input("z", (3,))),
                      (Node("y", "residual_add", ("x", "z")),), "y")
    result = evaluate_exact(program, {"x": X, "z": [F(1)] * 3}, None)
    assert result.error is not None and result.slack == 0, result


@pytest.mark.parametrize(("inputs", "tangents", "message"), [
    ({"q": X}, None, "inputs ['q'] do not match program inputs ['x']"),
    ({"x": [F(1)]}, None, "input 'x' has shape [1], declared [2]"),
    ({"x": X}, {"x": [F(1)] * 3}, "tangent 'x' has shape [3], declared [2]"),
    ({"x": X}, {}, "tangents [] do not match program inputs ['x']"),
])
def test_a_wrong_input_or_tangent_is_named_in_one_line(
        inputs: dict[str, list[Fraction]], tangents: dict[str, list[Fraction]] | None,
        message: str) -> None:
    program = Program((Input("x", (2,)),), (Node("y", "relu", ("x",)),), "y")
    with pytest.raises(InvalidRequest) as caught:
        evaluate_exact(program, inputs, None, tangents)
    assert str(caught.value) == message, (inputs, tangents, str(caught.value), message)
