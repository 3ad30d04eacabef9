"""The property suite's running of a backend: the request kept is the one sent, every
failure is classified (``PropertyFailure.kind``), and the structural laws name what broke."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.impl.backend import Capabilities
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.assertions import PropertyFailure, differences, guarded_run, run_ok
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.laws_structure import (
    check_bitwise_deterministic,
    check_inputs_unchanged,
    check_rejects_mismatch,
    merge_request,
)
from resverify.spec.errors import BackendCrash, BackendTimeout, BadResult
from resverify.spec.fixtures import linear_block_request
from resverify.spec.request import Request, Result, ResultError, Value

REQUEST = linear_block_request()  # x=[2,-1], w=[[0.5,-1],[2,0.25]], ȳ=[1,1]


class Reference(NumpyBackend):
    name = "ref"


class ZeroesCotangent(Reference):
    """Computes correctly, then zeroes the cotangent it was given (in place)."""

    def run(self, request: Request) -> Result:
        result = super().run(request)
        cot = request.cotangent
        assert cot is not None
        cot.flags.writeable = True
        cot[1] = 0.0
        return result


class ZeroesCotangentFirst(Reference):
    """Zeroes the cotangent before computing: its gradients are then all zero."""

    def run(self, request: Request) -> Result:
        cot = request.cotangent
        assert cot is not None
        cot.flags.writeable = True
        cot[...] = 0.0
        return super().run(request)


class ScalesInput(Reference):
    """Doubles input w's element [1, 0] in place after computing."""

    def run(self, request: Request) -> Result:
        result = super().run(request)
        w = request.inputs["w"]
        w.flags.writeable = True
        w[1, 0] *= 2
        return result


class Answers(Reference):
    """``run`` returns (or raises) whatever the test gave it."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def run(self, request: Request) -> Result:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]


def failure_of(check: Callable[..., object], *args: object) -> PropertyFailure:
    with pytest.raises(PropertyFailure) as info:
        check(*args)
    return info.value


def test_a_backend_writing_into_its_cotangent_leaves_the_kept_request_as_sent() -> None:
    failure = failure_of(check_matches_spec, ZeroesCotangentFirst(), REQUEST)
    assert failure.request.cotangent is not None
    assert failure.request.cotangent.tolist() == [1.0, 1.0], failure.request.cotangent
    assert REQUEST.cotangent is not None and REQUEST.cotangent.tolist() == [1.0, 1.0]


def test_the_backend_gets_fresh_writable_arrays_of_its_own() -> None:
    seen: list[Request] = []

    class Keeps(Reference):
        def run(self, request: Request) -> Result:
            seen.append(request)
            return super().run(request)

    guarded_run(Keeps(), REQUEST)
    (copy,) = seen
    arrays = {**copy.inputs, "cotangent": copy.cotangent}
    originals = {**REQUEST.inputs, "cotangent": REQUEST.cotangent}
    for name, array in arrays.items():
        assert array is not None and array.flags.writeable, name
        assert not np.shares_memory(array, originals[name]), name
        assert array.tobytes() == np.asarray(originals[name]).tobytes(), name


FORWARD = Request(REQUEST.program, dict(REQUEST.inputs), "float64", REQUEST.cotangent,
                  {"x": np.array([1.0, -2.0]), "w": np.eye(2)})


class ZeroesTangent(Reference):
    """Zeroes the tangent of x it was given (in place), then answers a plain value."""

    def run(self, request: Request) -> Result:
        assert request.tangents is not None
        tangent = request.tangents["x"]
        tangent.flags.writeable = True
        tangent[1] = 0.0
        return super().run(dataclasses.replace(request, tangents=None))


def test_a_forward_mode_backend_gets_private_writable_tangents() -> None:
    seen: list[Request] = []

    class Keeps(Reference):
        def run(self, request: Request) -> Result:
            seen.append(request)
            return ResultError("unsupported", "keeps only")

    guarded_run(Keeps(), FORWARD)
    (copy,) = seen
    assert copy.tangents is not None and FORWARD.tangents is not None
    for name, tangent in copy.tangents.items():
        assert tangent.flags.writeable, name
        assert not np.shares_memory(tangent, FORWARD.tangents[name]), name
        assert tangent.tobytes() == FORWARD.tangents[name].tobytes(), name


def test_mutation_names_a_tangent_and_its_first_changed_element() -> None:
    failure = failure_of(check_inputs_unchanged, ZeroesTangent(), FORWARD)
    assert "tangent 'x'[1]: -2.0 before, 0.0 after" in str(failure), str(failure)


def test_differences_compare_the_tangents_and_their_presence() -> None:
    grads = {"x": np.zeros(2), "w": np.zeros((2, 2))}
    plain = Value(np.zeros(2), grads)
    one, other = (dataclasses.replace(plain, tangent=np.array([0.5, t])) for t in (1.0, 2.0))
    assert differences(one, other) == ["tangent[1]: 1.0 then 2.0"], differences(one, other)
    assert differences(plain, one) == ["no tangent then a tangent"], differences(plain, one)
    assert differences(one, one) == []


def test_mutation_names_the_cotangent_and_its_first_changed_element() -> None:
    failure = failure_of(check_inputs_unchanged, ZeroesCotangent(), REQUEST)
    assert "cotangent[1]" in str(failure) and "1.0" in str(failure) and "0.0" in str(failure), (
        str(failure))
    assert failure.kind == "law"


def test_mutation_names_the_input_and_its_first_changed_element() -> None:
    failure = failure_of(check_inputs_unchanged, ScalesInput(), REQUEST)
    assert "input 'w'[1, 0]" in str(failure) and "2.0" in str(failure) and "4.0" in str(failure), (
        str(failure))


def test_run_returning_none_is_a_bad_result_that_keeps_the_request() -> None:
    failure = failure_of(check_matches_spec, Answers(None), REQUEST)
    assert "run() must return a Result, got None" in str(failure), str(failure)
    assert failure.kind == "bad_result" and failure.request is REQUEST


def test_run_returning_another_type_is_a_bad_result() -> None:
    failure = failure_of(guarded_run, Answers({"output": [3.0]}), REQUEST)
    assert "run() must return a Result, got dict" in str(failure), str(failure)
    assert failure.kind == "bad_result"


@pytest.mark.parametrize(("fault", "kind"), [
    (BackendTimeout("no answer within 2 s"), "timeout"),
    (BackendCrash("engine exited with status -11"), "crash"),
    (BadResult("unreadable line 'garbage'"), "bad_result"),
    (ValueError("oops"), "raised"),
])
def test_an_exception_from_run_is_classified(fault: Exception, kind: str) -> None:
    failure = failure_of(run_ok, Answers(fault), REQUEST)
    assert failure.kind == kind, (failure.kind, str(failure))
    assert str(fault) in str(failure) and failure.request is REQUEST


def _reference_result() -> Result:
    result = Reference().run(REQUEST)
    assert isinstance(result, Value)
    return result


def test_wrong_output_shape_dtype_or_type_is_a_bad_result() -> None:
    good = _reference_result()
    assert isinstance(good, Value)
    wrong = {
        "shape": Value(np.zeros(3), grads=good.grads),
        "dtype": Value(good.output.astype(np.float32), grads=good.grads),
        "grad dtype": Value(good.output,
                             grads={**good.grads, "w": good.grads["w"].astype(np.float32)}),
        "type": Value(good.output.tolist(), grads=good.grads),
        "missing grad": Value(good.output, grads={"x": good.grads["x"]}),
    }
    for what, result in wrong.items():
        failure = failure_of(run_ok, Answers(result), REQUEST)
        assert failure.kind == "bad_result", (what, failure.kind, str(failure))


def test_a_wrong_value_is_a_law_failure() -> None:
    good = _reference_result()
    assert isinstance(good, Value)
    failure = failure_of(check_matches_spec, Answers(Value(good.output + 1,
                                                             grads=good.grads)), REQUEST)
    assert failure.kind == "law", str(failure)


def test_an_error_answer_to_a_claimed_request_is_refused() -> None:
    failure = failure_of(run_ok, Answers(ResultError("unsupported", "no linear")), REQUEST)
    assert failure.kind == "refused" and "unsupported" in str(failure), str(failure)


@settings(max_examples=6, database=None)
@given(claimed=st.booleans())
def test_unsupported_is_refused_when_claimed_and_skips_the_example_when_not(
        claimed: bool) -> None:
    backend = Answers(ResultError("unsupported", "no linear"))
    backend.capabilities = Capabilities() if claimed else Capabilities(ops=("residual_add",))
    if claimed:
        assert failure_of(run_ok, backend, REQUEST).kind == "refused"
        return
    run_ok(backend, REQUEST)  # an unclaimed request: Hypothesis discards this example
    raise AssertionError("run_ok returned for an unsupported answer to an unclaimed request")


# ----------------------------------------------------------------------------------------
# the shape-mismatch and determinism laws


def _mismatch_request() -> Request:
    return merge_request("residual_add", np.ones((2, 2)), np.ones(2), "float64", None)


class TerseRefusal(Reference):
    """Refuses the mismatch with typed shapes, spelling them without spaces."""

    def run(self, request: Request) -> Result:
        result = super().run(request)
        if isinstance(result, ResultError) and result.shapes is not None:
            return ResultError("shape_mismatch", "residual_add: [2,2] vs [2]",
                                  result.shapes)
        return result


def test_mismatch_is_judged_on_the_typed_shapes_not_the_message_text() -> None:
    check_rejects_mismatch(TerseRefusal(), _mismatch_request())


class Flaky(Reference):
    """Every other answer has its output's first element moved by one ulp."""

    calls = 0

    def run(self, request: Request) -> Result:
        result = super().run(request)
        self.calls += 1
        if self.calls % 2 or isinstance(result, ResultError):
            return result
        output = np.array(result.output, copy=True)
        output.flat[0] = np.nextafter(output.flat[0], np.inf)
        return Value(output, grads=result.grads)


def test_a_non_deterministic_backend_is_not_blamed_on_the_refusal() -> None:
    failure = failure_of(check_rejects_mismatch, Flaky(), _mismatch_request())
    message = str(failure)
    assert "non-deterministic" in message and "refusal changed" not in message, message
    assert "output[0, 0]" in message, message


class ForgetfulAfterRefusal(Reference):
    """After refusing a mismatch, every later output is doubled."""

    refused = False

    def run(self, request: Request) -> Result:
        result = super().run(request)
        if isinstance(result, ResultError):
            self.refused = True
            return result
        if self.refused and isinstance(result, Value):
            return Value(result.output * 2, grads=result.grads)
        return result


def test_a_refusal_that_changes_the_state_is_named() -> None:
    failure = failure_of(check_rejects_mismatch, ForgetfulAfterRefusal(), _mismatch_request())
    assert "refusal changed its state" in str(failure), str(failure)


def test_determinism_names_the_first_differing_element() -> None:
    failure = failure_of(check_bitwise_deterministic, Flaky(), REQUEST)
    message = str(failure)
    assert "output[0]" in message and repr(1.0) in message, message
    assert repr(float(np.nextafter(1.0, np.inf))) in message, message


class WrongAxisAdd(Reference):
    """add un-broadcasts b's gradient by summing rows where it should sum columns."""

    def run(self, request: Request) -> Result:
        result = super().run(request)
        ops = {n.op for n in request.program.nodes}
        if isinstance(result, ResultError) or ops != {"add"} or request.inputs["b"].shape != (2,):
            return result
        cot = np.asarray(request.cotangent)
        return Value(result.output,
                     grads={**result.grads, "b": cot.sum(axis=1).astype(cot.dtype)})


def test_mismatch_law_checks_add_with_a_cotangent_that_shows_the_summed_axes() -> None:
    failure = failure_of(check_rejects_mismatch, WrongAxisAdd(), _mismatch_request())
    assert "grads['b']" in str(failure), str(failure)
