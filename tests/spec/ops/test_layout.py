"""The layout ops move elements and compute nothing: exact in every dtype, their integer
attributes declared once and carried by the IR, the wire format and the schema.

What each layout op states alone is in its own module (``test_reshape.py`` and the
others); what they share through :class:`~resverify.spec.ops.layout.Layout` is here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.codec import dumps, loads_request, validate_message
from resverify.spec.errors import InvalidDocument, InvalidProgram
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Params
from resverify.spec.ops.attributes import sample_params
from resverify.spec.ops.layout import Layout
from resverify.spec.ops.linear_map import NUMPY
from resverify.spec.request import Request, Value
from tests.spec.ops.test_table import one_op_request

LAYOUT = sorted(name for name, op in OP_TABLE.items() if isinstance(op, Layout))
CASES = [(name, sample) for name in LAYOUT for sample in OP_TABLE[name].samples]


def test_the_layout_ops_are_the_six_and_take_only_integer_attributes() -> None:
    assert LAYOUT == ["cat", "embedding", "expand", "expand_in_dtype", "permute", "reshape",
                      "slice"]
    for name in LAYOUT:
        op = OP_TABLE[name]
        assert op.attribute is None and op.attributes and op.families == (), name
        for sample in op.samples:
            assert set(sample_params(sample)) == set(op.attributes), (name, sample)


@pytest.mark.parametrize(("name", "sample"), CASES)
@pytest.mark.parametrize("dtype", NumpyBackend.capabilities.dtypes)
def test_layout_op_output_is_its_arguments_elements_bit_for_bit_with_a_zero_budget(
        name: str, sample: tuple[tuple[int, ...], ...], dtype: str) -> None:
    """Values k/4 are exact in every dtype, so the exact output is the reference's and its
    budget is 0 everywhere: nothing rounds (expand's and embedding's gradients aside,
    which sum)."""
    plain = one_op_request(name, sample)
    request = Request(plain.program, plain.inputs, dtype, plain.cotangent)
    exact = evaluate(request)
    result = NumpyBackend().run(request)
    assert isinstance(result, Value) and exact.output is not None, result
    want = np.asarray(exact.output, dtype=np.float64)
    got = result.output.astype(np.float64)
    assert np.array_equal(got, want), (
        f"output={got.tolist()}, but should be {want.tolist()} [{plain.program.describe()}, "
        f"{dtype}]")
    budget = error_budget(request, exact=exact)
    assert not np.any(budget.output), (
        f"output budget={budget.output.tolist()}, but should be 0 [{plain.program.describe()}, "
        f"{dtype}]")
    if name not in ("expand", "expand_in_dtype", "embedding"):
        for input_name, bound in budget.grads.items():
            assert not np.any(np.asarray(bound)), (
                f"grad[{input_name}] budget={np.asarray(bound).tolist()}, but should be 0 "
                f"[{plain.program.describe()}, {dtype}]")


@pytest.mark.parametrize(("name", "sample"), CASES)
def test_layout_op_moves_a_ball_component_by_component(
        name: str, sample: tuple[tuple[int, ...], ...]) -> None:
    """The fast oracle's ball around the output is the arguments' balls moved: mid, radius
    and low part each go where the value goes."""
    op, k = OP_TABLE[name], sample_params(sample)
    assert isinstance(op, Layout)
    rng = np.random.default_rng(3)
    balls = [Ball(rng.integers(-8, 9, size=s) / 4.0, rng.random(s), rng.random(s) * 2.0**-60)
             for s in sample]
    out = op.enclose(balls, k)
    for part in ("mid", "rad", "lo"):
        want = np.asarray(op.value(NUMPY, [getattr(b, part) for b in balls], k))
        assert np.array_equal(getattr(out, part), want), (
            f"{part}={getattr(out, part).tolist()}, but should be {want.tolist()} [{name}{sample}]")


def test_a_layout_node_round_trips_through_json_and_the_published_schema() -> None:
    program = Program((Input("x", (2, 3)), Input("y", (1, 3))), (
        Node("c", "cat", ("x", "y"), params={"axis": 0}),
        Node("p", "permute", ("c",), params={"perm": [1, 0]}),
        Node("s", "slice", ("p",), params={"axis": 1, "start": 0, "stop": 3, "step": 2}),
        Node("r", "reshape", ("s",), params={"shape": [6]}),
        Node("e", "expand", ("r",), params={"shape": [2, 6]})), "e")
    request = Request(program, {"x": np.ones((2, 3)), "y": np.ones((1, 3))}, "float64",
                      np.ones((2, 6)))
    text = dumps(request)
    doc = json.loads(text)
    validate_message(doc, "request")
    assert doc["program"]["nodes"][2] == {"name": "s", "op": "slice", "args": ["p"],
                                          "axis": 1, "start": 0, "step": 2, "stop": 3}
    assert loads_request(text).program == program
    assert program.describe() == ("expand(reshape(slice(permute(cat(x, y, axis=0), "
                                  "perm=(1, 0)), axis=1, start=0, step=2, stop=3), "
                                  "shape=(6,)), shape=(2, 6))")
    del doc["program"]["nodes"][1]["perm"]
    with pytest.raises(InvalidDocument, match="'perm' is a required property"):
        validate_message(doc, "request")


@pytest.mark.parametrize(("node", "message"), [
    ({"op": "permute"}, "permute needs a perm"),
    ({"op": "permute", "params": {"perm": (1, -1)}},
     r"permute's perm must be a list of non-negative ints, got \(1, -1\)"),
    ({"op": "slice", "params": {"axis": True, "start": 0, "stop": 1, "step": 1}},
     "slice's axis must be a non-negative int, got True"),
    ({"op": "relu", "params": {"perm": (0,)}}, "only permute takes a perm"),
    ({"op": "reshape", "params": {"shape": (1,), "dims": (0,)}}, "no op takes a dims"),
    ({"op": "scale", "alpha": 1, "params": {"shape": (1,)}},
     "only reshape, expand and expand_in_dtype take a shape"),
])
def test_the_ir_refuses_a_missing_unknown_or_ill_kinded_integer_attribute(
        node: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidProgram, match=message):
        Node("n", args=("x",), **node)  # type: ignore[arg-type]


def test_node_params_are_a_hashable_mapping_whatever_they_were_given_as() -> None:
    node = Node("n", "permute", ("x",), params={"perm": [1, 0]})
    assert node.params == Params({"perm": (1, 0)}) == {"perm": (1, 0)}
    assert node.attribute == node.params and hash(node) == hash(
        Node("n", "permute", ("x",), params=Params({"perm": (1, 0)})))
