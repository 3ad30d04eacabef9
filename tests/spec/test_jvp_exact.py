"""Forward mode in the exact specification: the output tangent ``J t`` of the interpreter.

Why these laws: the per-op JVP rules are checked against SymPy's Jacobians in
``tests/spec/test_ops.py``; here whole programs are. A rational program without relu kinks is a
polynomial in a step ``s`` along the tangent, so ``d/ds f(x + s t)`` at 0 is known exactly
from the forward alone (interpolate ``f`` at ``deg + 1`` exact points): the interpreter's
tangent must equal it, with nothing of the JVP rules used. The duality ``⟨ȳ, J t⟩ =
⟨Jᵀ ȳ, t⟩`` ties forward and reverse mode together and holds exactly in Fractions, for
every program: each JVP rule uses the very factors its VJP uses (the carried tanh values,
the same enclosed ``1/sqrt`` of the norms), so the spec's tangent and gradients are exact
transposes of each other even where a value is enclosed.
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

from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, evaluate, evaluate_exact
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Linear
from resverify.spec.request import Request

F = Fraction
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
