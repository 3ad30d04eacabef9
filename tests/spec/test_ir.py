"""The IR refuses malformed programs when built or loaded; JSON round-trips losslessly."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec import (
    FORMAT_VERSION,
    BadResult,
    Input,
    InvalidInput,
    InvalidProgram,
    InvalidRequest,
    Node,
    Program,
    Request,
    ResverifyError,
    ShapeMismatch,
    dumps,
    infer_shapes,
    loads_request,
    loads_result,
)
from resverify.spec.codec import program_from_dict, program_to_dict
from resverify.spec.fixtures import linear_block, linear_block_request
from resverify.spec.request import ResultError, Value


def _block_doc() -> dict:
    return program_to_dict(linear_block())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["nodes"][0].update(op="conv"), "unknown op 'conv'"),
        (lambda d: d["nodes"][0].update(args=["x"]), r"linear takes 2 argument\(s\), got 1"),
        (lambda d: d["nodes"][1].update(args=["x", "missing"]), "unknown name 'missing'"),
        (lambda d: d.update(output="nowhere"), "output 'nowhere'"),
        (lambda d: d["inputs"][0].update(shape=[2, -1]), "bad dimension -1"),
        (lambda d: d["inputs"][0].update(shape=[2.5]), "bad dimension 2.5"),
        (lambda d: d["inputs"][0].update(shape="2"), "shape must be a list"),
        (lambda d: d["inputs"][0].update(shape=[True]), "bad dimension True"),
        (lambda d: d["nodes"].append({"name": "x", "op": "relu", "args": ["f"]}), "duplicate"),
        (lambda d: d["nodes"][0].update(alpha="1/2"), "only scale takes an alpha"),
        (lambda d: d["nodes"].__delitem__(0), "unknown name 'f'"),
        (lambda d: d.pop("output"), "missing or bad field"),
    ],
)
def test_malformed_program_is_refused_at_load_time(
        mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    doc = _block_doc()
    mutate(doc)
    with pytest.raises(InvalidProgram, match=message):
        program_from_dict(doc)


def test_cycle_is_refused_at_construction() -> None:
    nodes = (Node("a", "relu", ("b",)), Node("b", "tanh", ("a",)))
    with pytest.raises(InvalidProgram, match=r"cycle through node\(s\) \['a', 'b'\]"):
        Program((Input("x", (2,)),), nodes, "a")


@pytest.mark.parametrize("alpha", [math.inf, -math.inf, math.nan, "inf", "nan", "0x1p+1024"])
def test_non_finite_alpha_is_refused(alpha: Any) -> None:
    with pytest.raises(InvalidProgram, match="alpha"):
        Node("s", "scale", ("x",), alpha)


@pytest.mark.parametrize("alpha", [None, "abc", True, [1]])
def test_missing_or_non_numeric_alpha_is_refused(alpha: Any) -> None:
    with pytest.raises(InvalidProgram):
        Node("s", "scale", ("x",), alpha)


@pytest.mark.parametrize(
    ("alpha", "exact"),
    [(0.1, Fraction(0.1)), ("1/3", Fraction(1, 3)), ("0x1.8p-1", Fraction(3, 4)), (2, Fraction(2))],
)
def test_alpha_is_kept_as_an_exact_rational(alpha: Any, exact: Fraction) -> None:
    assert Node("s", "scale", ("x",), alpha).alpha == exact


def test_errors_share_one_root_and_the_builtin_base() -> None:
    assert issubclass(InvalidProgram, ResverifyError)
    assert issubclass(InvalidProgram, ValueError)
    assert issubclass(ShapeMismatch, ResverifyError)


def test_nodes_may_come_in_any_order_and_are_sorted_topologically() -> None:
    nodes = (Node("y", "residual_add", ("x", "f")), Node("f", "linear", ("x", "w")))
    program = Program((Input("x", (2,)), Input("w", (2, 2))), nodes, "y")
    assert [n.name for n in program.order] == ["f", "y"]
    assert program.describe() == "residual_add(x, linear(x, w))"


@pytest.mark.parametrize(
    ("left", "right"),
    [((2, 2), (2,)), ((2,), (2, 2)), ((1,), (3,)), ((), (1,)), ((0, 2), (2,)), ((2, 3), (3, 2))],
)
def test_shape_inference_rejects_every_unequal_residual_pair(
        left: tuple[int, ...], right: tuple[int, ...]) -> None:
    program = Program((Input("a", left), Input("b", right)),
                      (Node("y", "residual_add", ("a", "b")),), "y")
    with pytest.raises(ShapeMismatch) as info:
        infer_shapes(program)
    assert (info.value.left, info.value.right) == (left, right)
    assert str(list(left)) in str(info.value) and str(list(right)) in str(info.value)


def test_shape_inference_follows_broadcasting_linear_and_sum() -> None:
    program = Program(
        (Input("x", (3, 1, 4)), Input("b", (5, 1)), Input("w", (4, 2))),
        (Node("a", "add", ("x", "b")), Node("l", "linear", ("a", "w")), Node("s", "sum", ("l",))),
        "s",
    )
    assert infer_shapes(program) == {"x": (3, 1, 4), "b": (5, 1), "w": (4, 2), "a": (3, 5, 4),
                                     "l": (3, 5, 2), "s": ()}


def test_request_refuses_wrong_inputs_shapes_and_unrepresentable_values() -> None:
    program = linear_block()
    good = {"x": np.array([2.0, -1.0]), "w": np.array([[0.5, -1.0], [2.0, 0.25]])}
    ones = np.ones(2)
    with pytest.raises(InvalidRequest, match="do not match program inputs"):
        Request(program, {"x": good["x"]}, "float64", ones)
    with pytest.raises(InvalidRequest, match=r"input 'x' has shape \[3\], declared \[2\]"):
        Request(program, {**good, "x": np.array([1.0, 2.0, 3.0])}, "float64", ones)
    with pytest.raises(InvalidRequest, match="not exactly representable in float32"):
        Request(program, {**good, "x": np.array([0.1, 1.0])}, "float32", ones)
    with pytest.raises(InvalidRequest, match=r"cotangent has shape \[3\]"):
        Request(program, good, "float64", np.ones(3))
    with pytest.raises(InvalidRequest, match="unknown dtype"):
        Request(program, good, "float8", ones)
    with pytest.raises(InvalidRequest, match="needs a cotangent"):
        Request(program, good, "float64", None)


def test_request_values_are_read_only_copies() -> None:
    x = np.array([2.0, -1.0])
    request = Request(linear_block(), {"x": x, "w": np.eye(2)}, "float64", np.ones(2))
    x[0] = 99.0
    assert request.inputs["x"][0] == 2.0
    assert not request.inputs["x"].flags.writeable


SPECIAL = [0.0, -0.0, 5e-324, -2.2250738585072014e-308, 1.7976931348623157e308, math.inf,
           -math.inf, 0.1, 1 / 3]


def test_request_round_trips_bit_for_bit_through_json() -> None:
    program = Program((Input("x", (3, 3)),), (Node("s", "scale", ("x",), Fraction(1, 3)),), "s")
    values = np.array(SPECIAL, dtype=np.float64).reshape(3, 3)
    request = Request(program, {"x": values}, "float64", values[::-1])
    text = dumps(request)
    again = loads_request(text)
    assert json.loads(text)["resverify"] == FORMAT_VERSION
    assert again.program == request.program
    assert again.inputs["x"].tobytes() == values.tobytes()
    assert again.cotangent is not None
    assert again.cotangent.tobytes() == values[::-1].tobytes()
    assert dumps(again) == text


def test_nan_survives_the_round_trip() -> None:
    program = Program((Input("x", (1,)),), (), "x")
    request = Request(program, {"x": np.array([math.nan])}, "float64", np.array([1.0]))
    again = loads_request(dumps(request))
    assert math.isnan(again.inputs["x"][0])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_narrow_dtypes_round_trip_in_their_own_dtype(dtype: str) -> None:
    request = linear_block_request(dtype=dtype)
    again = loads_request(dumps(request))
    assert again.dtype == dtype
    assert again.inputs["w"].dtype == np.dtype(dtype)
    assert again.inputs["w"].tobytes() == request.inputs["w"].tobytes()


def test_results_and_typed_errors_round_trip() -> None:
    ok = Value(np.array([1.0, -0.0]), grads={"x": np.array([0.5, 3.25])})
    again = loads_result(dumps(ok))
    assert isinstance(again, Value)
    assert again.output.tobytes() == ok.output.tobytes()
    assert again.grads["x"].tobytes() == ok.grads["x"].tobytes()
    bad = ResultError.mismatch(ShapeMismatch("residual_add", (2, 2), (2,)))
    back = loads_result(dumps(bad))
    assert back == bad
    assert isinstance(back, ResultError) and back.shapes == ((2, 2), (2,))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ('{"resverify": 99, "kind": "request"}', "unsupported format version 99"),
        ('{"resverify": 1, "kind": "result"}', "expected a request document"),
        ('{"resverify": 1, "kind": "request"}', "missing or bad field"),
    ],
)
def test_bad_documents_are_refused_with_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        loads_request(text)


def test_error_results_carry_a_known_kind_and_shapes_only_for_a_mismatch() -> None:
    with pytest.raises(BadResult, match="only they"):
        ResultError("backend_error", "boom", ((1,), (2,)))
    with pytest.raises(BadResult, match="unknown error kind"):
        ResultError("oops", "boom")  # type: ignore[arg-type]
