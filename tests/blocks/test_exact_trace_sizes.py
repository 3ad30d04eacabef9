"""A softmax's output in the fast budget's trace as float64 midpoints, not Fractions: the same
bounds, bit for bit.

Why: the fast budget's trace held every softmax and masked_softmax output as exact
Fractions (``exact_output_in_trace``, which tanh's slope rule needs), one object per element
of every attention matrix, while the softmax's own budget reads it only as ``up(|y| + e)``
(:func:`~resverify.spec.ceiling.up_abs_plus`), which the float64 values give bit for bit
(``tests/spec/test_ceiling.py``). It stays a Fraction where an op whose budget rules read
their arguments' trace values (``budget_reads_args``) reads it (the budget reads the
trace only through each node's site: its arguments and its own output).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from fractions import Fraction

import numpy as np
import pytest

from resverify.blocks.catalog import recipe
from resverify.blocks.exact import judge_recipe
from resverify.spec.enclosure import _trace, enclose, fast_budget
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.masked_softmax import MaskedSoftmax
from resverify.spec.ops.softmax import Softmax
from resverify.spec.request import Request

READ_AS_SIZE = ("softmax", "masked_softmax")


def _as_fractions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace as it was: every softmax output a Fraction."""
    monkeypatch.setattr(Softmax, "output_read_as_size", False)
    monkeypatch.setattr(MaskedSoftmax, "output_read_as_size", False)


@pytest.mark.slow  # about a minute: three catalog layers in three dtypes, twice
@pytest.mark.parametrize("name", ["hf.LlamaDecoderLayer", "hf.GPT2Block", "hf.BertLayer"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_every_bound_of_a_layer_is_the_same_bits(name: str, dtype: str) -> None:
    """The whole program's fast budget (output and every gradient) with the softmax
    outputs as floats equals, bit for bit, the one with them as Fractions."""
    request = judge_recipe(recipe(name), dtype, seed=0).request
    assert request is not None
    assert any(n.op in READ_AS_SIZE for n in request.program.nodes)
    enclosed = enclose(request)
    floats = fast_budget(request, enclosed)
    with pytest.MonkeyPatch.context() as m:
        _as_fractions(m)
        fractions = fast_budget(request, enclosed)
    assert floats.output.tobytes() == fractions.output.tobytes()
    assert floats.grads.keys() == fractions.grads.keys()
    for key, bound in fractions.grads.items():
        assert floats.grads[key].tobytes() == bound.tobytes(), key


def _softmax_then(op: str) -> Request:
    """``op(softmax(x))`` (with ``w`` the other argument of a binary op), float64."""
    inputs = [Input("x", (2, 3)), Input("w", (3, 3))]
    second = ("s", "w") if op == "matmul" else ("s",)
    nodes = (Node("s", "softmax", ("x",), params=Params({"axis": 1})), Node("y", op, second))
    rng = np.random.default_rng(0)
    values = {"x": rng.normal(size=(2, 3)), "w": rng.normal(size=(3, 3))}
    return Request(Program(tuple(inputs), nodes, "y"), values, "float64", np.ones((2, 3)))


def test_the_softmax_output_is_a_float_only_where_no_budget_reads_it() -> None:
    for op, exact in (("matmul", False), ("relu", True)):
        request = _softmax_then(op)
        values = _trace(request.program, enclose(request)).values["s"]
        assert isinstance(values.reshape(-1)[0], Fraction) is exact, op
    alone = _softmax_then("relu")  # the softmax as the program's output (an op-by-op unit)
    program = Program(alone.program.inputs[:1], alone.program.nodes[:1], "s")
    request = Request(program, {"x": alone.inputs["x"]}, "float64", np.ones((2, 3)))
    values = _trace(program, enclose(request)).values["s"]
    assert values.dtype == np.float64


def _reads_of_at(method: object) -> set[str]:
    """How a budget rule uses its ``at`` (the Site): the attributes it reads, ``exact_sizes``
    where it passes it there, ``<passed>`` where it hands it on to anything else."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))  # type: ignore[arg-type]
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "at":
            parent = parents.get(node)
            if isinstance(parent, ast.Attribute):
                found.add(parent.attr)
            elif isinstance(parent, ast.Call) and getattr(parent.func, "id", "") == "exact_sizes":
                found.add("exact_sizes")
            else:
                found.add("<passed>")
    return found


@pytest.mark.parametrize("name", sorted(n for n, op in OP_TABLE.items()
                                        if not op.budget_reads_args))
def test_an_op_that_declares_it_reads_no_argument_of_the_trace_reads_none(name: str) -> None:
    """Its ``budget`` and ``budget_vjp`` read of the site only the constant, the slack and
    (through :func:`~resverify.spec.ops.base.exact_sizes`) their own output."""
    op = type(OP_TABLE[name])
    for rule in (op.budget, op.budget_vjp):
        assert _reads_of_at(rule) <= {"alpha", "err", "errs", "exact_sizes"}, (name, rule)


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_the_op_by_op_judgement_of_a_llama_layer_is_the_same(dtype: str) -> None:
    """Each unit (a masked softmax alone among them, its output the unit's) and derivative
    kernel: the same elements, the same count outside, the same worst ratio, bit for bit."""
    def units() -> list[tuple[str, int, int, float]]:
        local = judge_recipe(recipe("hf.LlamaDecoderLayer"), dtype, seed=0).local
        assert local is not None
        return [(u.node, u.elements, u.outside, u.worst) for u in (*local.units, *local.backward)]

    floats = units()
    with pytest.MonkeyPatch.context() as m:
        _as_fractions(m)
        assert units() == floats
