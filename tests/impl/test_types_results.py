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


def _forward(request: Request) -> Request:
    tangents = {k: np.ones_like(v) for k, v in request.inputs.items()}
    return Request(request.program, request.inputs, request.dtype, request.cotangent,
                   tangents=tangents)


def test_a_forward_mode_request_holds_one_read_only_tangent_per_input() -> None:
    request = _forward(linear_block_request())
    assert request.forward_mode and request.tangents is not None
    assert set(request.tangents) == set(request.inputs), (sorted(request.tangents),
                                                          sorted(request.inputs))
    for name, tangent in request.tangents.items():
        assert tangent.shape == request.inputs[name].shape and not tangent.flags.writeable, (
            name, tangent.shape, tangent.flags.writeable)
    assert not linear_block_request().forward_mode


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda t: dict(list(t.items())[1:]), "tangents"),
    (lambda t: {k: np.ones(7) for k in t}, r"has shape \[7\]"),
    (lambda t: {k: np.full(v.shape, 0.1) for k, v in t.items()}, "not exactly representable"),
])
def test_a_forward_mode_request_refuses_tangents_that_do_not_fit(spoil: object,
                                                                 message: str) -> None:
    base = linear_block_request()
    tangents = {k: np.ones_like(v) for k, v in base.inputs.items()}
    with pytest.raises(InvalidRequest, match=message):
        Request(base.program, base.inputs, "float16", base.cotangent,
                tangents=spoil(tangents))  # type: ignore[operator]


def test_check_form_wants_the_output_tangent_exactly_when_tangents_were_sent() -> None:
    request, value = _good()
    forward = _forward(request)
    with pytest.raises(BadResult, match="tangent: gives none"):
        check_form(forward, value)
    check_form(forward, dataclasses.replace(value, tangent=np.zeros(2)))
    with pytest.raises(BadResult, match="tangent: gives one"):
        check_form(request, dataclasses.replace(value, tangent=np.zeros(2)))
    with pytest.raises(BadResult, match=r"tangent: gives shape \[3\]"):
        check_form(forward, dataclasses.replace(value, tangent=np.zeros(3)))


def test_a_backend_that_claims_only_vjp_refuses_a_forward_mode_request() -> None:
    from resverify.impl.backend import Capabilities
    from resverify.spec.errors import UsageError
    request = _forward(linear_block_request())
    assert Capabilities().covers(request) == "mode jvp not claimed (claims ['vjp'])"
    assert Capabilities(modes=("vjp", "jvp")).covers(request) is None
    with pytest.raises(UsageError, match="unknown mode"):
        Capabilities(modes=("vjp", "hvp"))
    with pytest.raises(UsageError, match="must claim mode 'vjp'"):
        Capabilities(modes=("jvp",))
