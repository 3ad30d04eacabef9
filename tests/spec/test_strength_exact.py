"""Tests that pin what mutation testing found unpinned in the exact interpreter.

Each test here kills mutants of ``spec/exact.py`` that survived ``tests/spec/test_exact.py``,
``tests/spec/test_jvp_exact.py`` and ``tests/spec/test_norm_spec.py`` (``tools/mutation.py``; the
figures are in docs/strength.md §3): a verdict of the interpreter those tests did not pin.
The laws are about the enclosures the interpreter carries: wherever a value is only known to
within ``e`` (tanh's enclosure), every result computed from it must carry at least the
error that ``e`` allows there, in reverse and in forward mode, and once per use.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import ExactResult, evaluate_exact
from resverify.spec.ir import Input, Node, Program

F = Fraction
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
