"""A result is a Value or a ResultError; a request always has a cotangent; one form check.

Each test builds the malformed thing itself and checks the typed error it gets, so a
loosened check shows as a failing test.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from resverify.spec import (
    BadResult,
    Input,
    InvalidRequest,
    Node,
    Program,
    Request,
    Result,
    ResultError,
    ShapeMismatch,
    Value,
    check_form,
    dumps,
    infer_shapes,
    loads_request,
)
from resverify.spec.fixtures import linear_block_request

MISMATCH = Program((Input("x", (2, 2)), Input("b", (2,))),
                   (Node("y", "residual_add", ("x", "b")),), "y")
VALUES = {"x": np.ones((2, 2)), "b": np.array([0.5, -0.25])}


def _good() -> tuple[Request, Value]:
    request = linear_block_request()
    grads = {k: np.zeros_like(v) for k, v in request.inputs.items()}
    return request, Value(np.zeros(2), grads)


def test_a_shape_invalid_request_derives_an_empty_cotangent_in_its_dtype() -> None:
    request = Request(MISMATCH, VALUES, "float32", None)
    assert not request.shape_valid
    assert request.cotangent.shape == (0,) and request.cotangent.dtype == np.float32
    assert not request.cotangent.flags.writeable
    again = dataclasses.replace(request, inputs={k: np.array(v) for k, v in VALUES.items()})
    assert again.cotangent.shape == (0,), "the derived cotangent is accepted back"


def test_a_shape_invalid_request_refuses_any_other_cotangent() -> None:
    with pytest.raises(InvalidRequest, match=r"derived: pass None \(got shape \[2, 2\]\)"):
        Request(MISMATCH, VALUES, "float64", np.ones((2, 2)))


def test_a_shape_valid_request_needs_its_cotangent() -> None:
    request = linear_block_request()
    assert request.shape_valid and request.cotangent.shape == (2,)
    with pytest.raises(InvalidRequest, match="needs a cotangent"):
        Request(request.program, request.inputs, "float64", None)


def test_the_wire_writes_no_cotangent_for_a_shape_invalid_request_and_reads_it_back() -> None:
    request = Request(MISMATCH, VALUES, "float64", None)
    text = dumps(request)
    assert '"cotangent": null' in text, text
    back = loads_request(text)
    assert not back.shape_valid and back.cotangent.shape == (0,)


def test_result_is_the_union_of_value_and_result_error() -> None:
    _, value = _good()
    try:
        infer_shapes(MISMATCH)
    except ShapeMismatch as exc:
        error = ResultError.mismatch(exc)
    assert isinstance(value, Result) and isinstance(error, Result)
    assert not isinstance(None, Result) and not isinstance((value.output, value.grads), Result)
    assert error.kind == "shape_mismatch" and error.shapes == ((2, 2), (2,))


def test_check_form_accepts_a_value_of_the_declared_form() -> None:
    request, value = _good()
    check_form(request, value)


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda v: Value(v.output.reshape(1, 2), v.grads),
     r"output: gives shape \[1, 2\], spec declares \[2\]"),
    (lambda v: Value(v.output.astype(np.float32), v.grads),
     "output: gives dtype float32, spec declares float64"),
    (lambda v: Value(v.output.tolist(), v.grads), "output: gives a list, spec declares an array"),
    (lambda v: Value(v.output, {"x": v.grads["x"]}),
     r"grads: gives keys \['x'\], spec has \['w', 'x'\]"),
    (lambda v: Value(v.output, {**v.grads, "z": v.grads["x"]}), "grads: gives keys"),
    (lambda v: Value(v.output, {**v.grads, "w": v.grads["w"][0]}),
     r"grads\['w'\]: gives shape \[2\], spec declares \[2, 2\]"),
    (lambda v: Value(v.output, list(v.grads.values())),  # type: ignore[arg-type]
     "grads: gives a list, spec declares a mapping"),
])
def test_check_form_names_what_is_malformed(spoil: object, message: str) -> None:
    request, value = _good()
    with pytest.raises(BadResult, match=message):
        check_form(request, spoil(value))  # type: ignore[operator]


def test_check_form_refuses_a_value_for_a_shape_invalid_request() -> None:
    request = Request(MISMATCH, VALUES, "float64", None)
    with pytest.raises(BadResult, match="spec gives shape_mismatch"):
        check_form(request, Value(np.ones((2, 2)), dict(request.inputs)))
