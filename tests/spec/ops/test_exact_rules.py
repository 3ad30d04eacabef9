"""Each op entry's exact-interpreter slack rules, at the worst case of the enclosures.

``spec/ops/``'s ``error``, ``error_vjp`` and ``error_jvp`` rules carry the interpreter's
slack through each op: the bound on how far a value, gradient or tangent it returns may be
from the true real one, where tanh's value is only enclosed. The law here tests the worst
case: the slack says "each carried tanh value is within ``e`` of the true one", so if the
true values sat at the edge (every carried tanh moved by ``±e``), every output, gradient and
tangent must stay within the slack of what the interpreter returned. Each program makes one
rule's term the largest in the slack.

These tests pin what mutation testing found unpinned in those rules: mutants of them
survived the exact interpreter's tests (``tests/spec/test_exact.py``, forward and JVP), the op
table's (``tests/spec/ops/test_table.py``), the norms' (``tests/spec/ops/test_norms.py``) and
``tests/spec/test_derive.py`` (docs/strength.md §3), since the true error of the enclosure's
midpoint is far below its bound, so a slack too small by half still covered it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import ExactResult, evaluate_exact
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, broadcast_shapes
from resverify.spec.rational import exact_tanh, obj, tanh_error

F = Fraction
BIG = F(10**6)


@dataclass(frozen=True)
class Case:
    """A program where one op's slack rule decides the result's slack."""

    rule: str
    program: Program
    inputs: dict[str, Any]
    cotangent: Any = None
    tangents: dict[str, Any] | None = None


def _p(inputs: Mapping[str, tuple[int, ...]], *nodes: Node) -> Program:
    return Program(tuple(Input(n, s) for n, s in inputs.items()), nodes, nodes[-1].name)


def _cases() -> Iterator[Case]:
    yield Case("tanh vjp: ȳ(1 - t²) off by |ȳ| e (2|t| + e)",
               _p({"x": (1,)}, Node("t", "tanh", ("x",))), {"x": [F(2)]}, [F(1)])
    yield Case("tanh vjp near 0: the slope's error is e (2|t| + e), small with t",
               _p({"x": (1,)}, Node("t", "tanh", ("x",))), {"x": [F(1, 8)]}, [F(1)])
    yield Case("tanh jvp: t_x (1 - t²) off as the VJP",
               _p({"x": (1,)}, Node("t", "tanh", ("x",))), {"x": [F(2)]}, None, {"x": [F(1)]})
    small, three = {"x": (3,), "a": (3,), "b": (1,)}, [F(1), F(2), F(3)]
    yield Case("add vjp: a broadcast argument sums the errors of its 3 copies",
               _p(small, Node("t", "tanh", ("x",)), Node("s", "add", ("a", "b")),
                  Node("y", "mul", ("s", "t"))),
               {"x": three, "a": [F(1, 10**4)] * 3, "b": [F(1, 10**4)]}, [BIG] * 3)
    yield Case("scale vjp: α times the cotangent's error",
               _p({"x": (1,), "z": (1,)}, Node("t", "tanh", ("x",)),
                  Node("s", "scale", ("z",), F(1000)), Node("y", "mul", ("s", "t"))),
               {"x": [F(2)], "z": [F(1, 10**6)]}, [BIG])
    yield Case("scale jvp: α times the tangent's error",
               _p({"x": (1,)}, Node("t", "tanh", ("x",)), Node("y", "scale", ("t",), F(1000))),
               {"x": [F(2)]}, None, {"x": [F(1)]})
    yield Case("sum jvp: the errors of every summed tangent",
               _p({"x": (3,)}, Node("t", "tanh", ("x",)), Node("y", "sum", ("t",))),
               {"x": three}, None, {"x": [F(1)] * 3})
    lin = {"x": (2, 2, 1), "w": (1, 2), "u": (2, 2, 2)}
    for rule, w in (("linear vjp of w: rows · |ḡ| |x| e", F(1)),
                    ("linear vjp of x: d_out · |ḡ| |w| e", F(3))):
        yield Case(rule, _p(lin, Node("l", "linear", ("x", "w")), Node("t", "tanh", ("u",)),
                            Node("y", "mul", ("l", "t"))),
                   {"x": np.full((2, 2, 1), F(1)), "w": [[w, w]],
                    "u": np.full((2, 2, 2), F(2))}, np.full((2, 2, 2), BIG))
    yield Case("linear jvp: d_in · (|t_x| e_w + |x| e_tw) over the enclosed x",
               _p({"u": (2, 3), "w": (3, 1)}, Node("x", "tanh", ("u",)),
                  Node("y", "linear", ("x", "w"))),
               {"u": np.full((2, 3), F(2)), "w": [[F(1, 10**4)]] * 3}, None,
               {"u": np.zeros((2, 3), dtype=object), "w": [[BIG]] * 3})
    yield Case("mul jvp: t_a b + a t_b, a enclosed",
               _p({"x": (2,), "z": (2,)}, Node("t", "tanh", ("x",)),
                  Node("y", "mul", ("t", "z"))),
               {"x": [F(2), F(-1)], "z": [F(1, 10**4)] * 2}, None,
               {"x": [F(0), F(0)], "z": [BIG, -BIG]})
    both = {"x": (1,), "u": (1,)}
    yield Case("add forward: e_a + e_b",
               _p(both, Node("t", "tanh", ("x",)), Node("v", "tanh", ("u",)),
                  Node("s", "scale", ("v",), F(1000)), Node("y", "add", ("s", "t"))),
               {"x": [F(2)], "u": [F(1, 2)]})
    yield Case("mul forward: |a| e_b + |b| e_a + e_a e_b",
               _p(both, Node("t", "tanh", ("x",)), Node("v", "tanh", ("u",)),
                  Node("s", "scale", ("v",), F(1000)), Node("y", "mul", ("t", "s"))),
               {"x": [F(2)], "u": [F(1, 2)]})
    yield Case("linear forward: d_in (|x| e_w + |w| e_x + e_x e_w)",
               _p({"u": (2, 3), "v": (3, 1)}, Node("x", "tanh", ("u",)),
                  Node("w", "tanh", ("v",)), Node("y", "linear", ("x", "w"))),
               {"u": np.full((2, 3), F(2)), "v": np.full((3, 1), F(1, 2))})
    tangents = {"x": [BIG], "u": [F(1)]}
    for x in (F(2), F(1, 8)):  # tanh's tangent error relative to the tangent: 26x, 1/30x u
        for op in ("add", "mul"):
            yield Case(f"{op} jvp at {x}: both tangents enclosed, of different sizes",
                       _p(both, Node("t", "tanh", ("x",)), Node("v", "tanh", ("u",)),
                          Node("s", "scale", ("v",), F(1000)), Node("y", op, ("t", "s"))),
                       {"x": [x], "u": [F(1, 2)]}, None, tangents)
        yield Case(f"linear jvp at {x}: both tangents enclosed, of different sizes",
                   _p({"u": (2, 3), "v": (3, 1)}, Node("x", "tanh", ("u",)),
                      Node("w", "tanh", ("v",)), Node("y", "linear", ("x", "w"))),
                   {"u": np.full((2, 3), x), "v": np.full((3, 1), F(1, 2))}, None,
                   {"u": np.full((2, 3), BIG), "v": np.full((3, 1), F(1))})
    far = _p({"x": (2,)}, Node("t", "tanh", ("x",)), Node("y", "relu", ("t",)))
    yield Case("relu vjp far from 0: a certain sign adds nothing", far,
               {"x": [F(2), F(-3)]}, [F(1), F(1)])
    yield Case("relu jvp far from 0: a certain sign adds nothing", far,
               {"x": [F(2), F(-3)]}, None, {"x": [F(1), F(1)]})
    edge = exact_tanh(F(1, 3))[0]
    near = _p({"x": (2,), "c": (2,)}, Node("t", "tanh", ("x",)),
              Node("s", "add", ("t", "c")), Node("y", "relu", ("s",)))
    yield Case("relu vjp: where the input's sign is uncertain the whole cotangent may be off",
               near, {"x": [F(1, 3), F(2)], "c": [-edge, F(0)]}, [F(1), F(1)])
    yield Case("relu jvp: where the input's sign is uncertain the whole tangent may be off",
               near, {"x": [F(1, 3), F(2)], "c": [-edge, F(0)]}, None,
               {"x": [F(0), F(0)], "c": [F(1), F(1)]})


CASES = list(_cases())
IDS = [c.rule.split(":")[0].replace(" ", "-").replace("/", "_") for c in CASES]


def _run(case: Case) -> ExactResult:
    return evaluate_exact(case.program, case.inputs, case.cotangent, case.tangents)


def _at_the_edge(case: Case, sign: int, monkeypatch: pytest.MonkeyPatch) -> ExactResult:
    """The case run as if every true tanh value were ``sign · e`` from the carried one."""
    tanh = OP_TABLE["tanh"]
    carried = type(tanh).exact

    def moved(args: Any, alpha: Any) -> Any:
        out = carried(tanh, args, alpha)
        return obj(out + sign * tanh_error(out))

    with monkeypatch.context() as patch:
        patch.setattr(tanh, "exact", moved)
        return _run(case)


def _gaps(a: ExactResult, b: ExactResult) -> dict[str, Fraction]:
    """The largest distance between the two results' output, each gradient and tangent."""
    assert a.output is not None and b.output is not None
    pairs = {"output": (a.output, b.output)}
    if a.grads is not None and b.grads is not None:
        pairs.update({f"grad[{n}]": (a.grads[n], b.grads[n]) for n in a.grads})
    if a.tangent is not None and b.tangent is not None:
        pairs["tangent"] = (a.tangent, b.tangent)
    return {k: max((abs(p - q) for p, q in zip(x.flat, y.flat, strict=True)), default=F(0))
            for k, (x, y) in pairs.items()}


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("sign", [1, -1])
def test_slack_covers_every_value_the_tanh_enclosures_allow(
        case: Case, sign: int, monkeypatch: pytest.MonkeyPatch) -> None:
    carried = _run(case)
    gaps = _gaps(carried, _at_the_edge(case, sign, monkeypatch))
    worst = max(gaps, key=lambda k: gaps[k])
    assert gaps[worst] <= carried.slack, (
        f"{case.rule}: with tanh moved by {sign:+d}·e, {worst} moves by "
        f"{float(gaps[worst]):.3e}, beyond the slack {float(carried.slack):.3e} "
        f"[{case.program.describe()}]")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_slack_is_less_than_twice_the_worst_case(case: Case,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Not coarser than needed: in these programs one rule decides the slack and the edges
    of the enclosures attain its bound up to a rounding, so the slack is less than twice
    the largest distance they produce (a rule charging twice, 1/e or e/|ȳ| is caught)."""
    carried = _run(case)
    worst = max(max(_gaps(carried, _at_the_edge(case, s, monkeypatch)).values())
                for s in (1, -1))
    assert 0 < carried.slack < 2 * worst, (
        f"{case.rule}: slack {float(carried.slack):.3e}, worst distance "
        f"{float(worst):.3e} [{case.program.describe()}]")


@pytest.mark.parametrize(("left", "right", "shape"), [
    ((3,), (1, 3), (1, 3)), ((3,), (4, 3), (4, 3)), ((2, 1), (3,), (2, 3)), ((), (2,), (2,))])
def test_broadcasting_reads_a_missing_leading_axis_as_1(
        left: tuple[int, ...], right: tuple[int, ...], shape: tuple[int, ...]) -> None:
    got = broadcast_shapes("add", left, right)
    assert got == shape, f"broadcast_shapes('add', {left}, {right}) = {got}, expected {shape}"


@pytest.mark.parametrize(("op", "left", "right"), [
    ("add", (2,), (3,)), ("mul", (2,), (3,)), ("residual_add", (2,), (1,)),
    ("linear", (2,), (3, 1)), ("linear", (), (3, 1)), ("linear", (3,), (3,))])
def test_a_shape_mismatch_names_its_op(op: str, left: tuple[int, ...],
                                        right: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch) as caught:
        OP_TABLE[op].shape([left, right])
    expected = f"{op}: shape mismatch {list(left)} vs {list(right)}"
    assert str(caught.value).startswith(expected), (op, left, right, str(caught.value))
