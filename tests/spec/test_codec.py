"""The wire format: one rule for every number (read exactly, rounded once to the dtype)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec import InvalidDocument, ResverifyError, dumps, loads_request, loads_result
from resverify.spec.codec import decode_number
from resverify.spec.fixtures import linear_block_request
from resverify.spec.request import Request, Value

# One float32 ulp at 1 is 2**-23; 1 + 2**-24 is the float32 midpoint between 1 and 1 + 2**-23.
F32_TIE_UP = Fraction(1) + Fraction(1, 2**24) + Fraction(1, 10**30)  # just above the midpoint
F16_TIE_UP = Fraction(1) + Fraction(1, 2**11) + Fraction(1, 10**30)


def decimal(q: Fraction, digits: int = 40) -> str:
    """``q`` written as a decimal with ``digits`` digits after the point (exact for these q)."""
    whole, rest = divmod(q.numerator * 10**digits, q.denominator)
    assert rest == 0, q
    text = str(whole).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}"


@pytest.mark.parametrize(
    ("text", "dtype", "expected"),
    [
        ("1.5", "float64", 1.5),
        ("10", "float64", 10.0),
        ("-0.25", "float32", -0.25),
        ("1e3", "float16", 1000.0),
        ("0.1", "float64", 0.1),
        ("0x1.8p+1", "float64", 3.0),
        ("0x1.8000000000000p+1", "float32", 3.0),
        ("0X1.8P+1", "float64", 3.0),
        ("-0x0.0p+0", "float64", -0.0),
        ("0x1p-1074", "float64", 5e-324),
        ("inf", "float16", math.inf),
        ("-inf", "float64", -math.inf),
        ("INF", "float64", math.inf),
    ],
)
def test_number_spellings_decode_to_their_value(text: str, dtype: str, expected: float) -> None:
    got = decode_number(text, dtype)
    assert got == expected and math.copysign(1, got) == math.copysign(1, expected), (
        f"decode_number({text!r}, {dtype}) = {got!r}, expected {expected!r}")


@pytest.mark.parametrize("text", ["nan", "-nan", "NAN"])
def test_nan_spellings_decode_to_nan(text: str) -> None:
    assert math.isnan(decode_number(text, "float64")), text


@pytest.mark.parametrize(
    "text", ["1.5.2", "0x", "0x1.8", "1/3", "", " 1", "1_000", "+1", "0x1p", "infinity", "1e",
             ".5", "01"])
def test_malformed_numbers_are_refused(text: str) -> None:
    with pytest.raises(InvalidDocument, match="number"):
        decode_number(text, "float64")


@pytest.mark.parametrize(
    ("exact", "dtype", "nearest"),
    [
        # Rounded through float64 first, these land exactly on the dtype's midpoint and
        # round-to-even then goes down: the double-rounding error a single rounding avoids.
        (F32_TIE_UP, "float32", 1 + 2**-23),
        (F16_TIE_UP, "float16", 1 + 2**-10),
        (Fraction(1) + Fraction(1, 2**8) + Fraction(1, 10**30), "bfloat16", 1 + 2**-7),
    ],
)
def test_decimal_is_rounded_once_to_the_dtype(exact: Fraction, dtype: str, nearest: float) -> None:
    text = decimal(exact)
    assert float(text) == 1 + 2.0 ** -{"float32": 24, "float16": 11, "bfloat16": 8}[dtype]
    got = decode_number(text, dtype)
    assert got == nearest, f"decode_number({text!r}, {dtype}) = {got!r}, expected {nearest!r}"


@pytest.mark.parametrize(
    ("dtype", "tie", "even"),
    [("float32", 1 + 2**-24, 1.0), ("float32", 1 + 3 * 2**-24, 1 + 2**-22),
     ("float16", 1 + 2**-11, 1.0), ("bfloat16", 1 + 2**-8, 1.0),
     ("float16", 65520.0, math.inf), ("float16", 2.0**-25, 0.0),
     ("float16", 3 * 2.0**-26, 2.0**-24)],
)
def test_exact_ties_round_to_even_and_overflow_to_infinity(
        dtype: str, tie: float, even: float) -> None:
    for text in (float.hex(tie), str(Decimal(tie))):
        got = decode_number(text, dtype)
        assert got == even, f"decode_number({text!r}, {dtype}) = {got!r}, expected {even!r}"


def test_huge_exponents_saturate_without_computing_the_power() -> None:
    assert decode_number("1e999999999", "float64") == math.inf
    assert decode_number("-1e-999999999", "float64") == 0.0
    assert math.copysign(1, decode_number("-1e-999999999", "float64")) == -1
    assert decode_number("0x1p+999999999", "float32") == math.inf
    assert decode_number("-0x1p+1024", "float64") == -math.inf
    assert decode_number("0x1.fffffffffffff8p+1023", "float64") == math.inf
    assert decode_number("0x1.fffffffffffff7p+1023", "float64") == 1.7976931348623157e308


def test_json_numbers_are_read_as_decimal_not_through_a_binary_float() -> None:
    request = linear_block_request(dtype="float32")
    doc = json.loads(dumps(request))
    exact = decimal(F32_TIE_UP)
    doc["inputs"]["x"]["data"][0] = "@@"
    text = json.dumps(doc).replace('"@@"', exact)
    again = loads_request(text)
    assert again.inputs["x"][0] == np.float32(1 + 2**-23), (again.inputs["x"][0], exact)
    doc["inputs"]["x"]["data"][0] = 10
    assert loads_request(json.dumps(doc)).inputs["x"][0] == 10.0


def test_bare_nan_and_infinity_tokens_are_not_json() -> None:
    doc = json.loads(dumps(linear_block_request()))
    text = json.dumps(doc).replace(doc["inputs"]["x"]["data"][0].join('""'), "NaN", 1)
    with pytest.raises(InvalidDocument, match="NaN"):
        loads_request(text)


def test_bfloat16_result_says_bfloat16() -> None:
    pytest.importorskip("torch")
    from resverify.impl.torch_backend import TorchBackend

    request = linear_block_request(dtype="bfloat16")
    result = TorchBackend().run(request)
    doc = json.loads(dumps(result, request.dtype))
    assert doc["dtype"] == "bfloat16", doc
    assert isinstance(loads_result(dumps(result, request.dtype), "bfloat16"), Value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "request"}', 'lacks the "resverify" header field'),
        ('{"resverify": 99, "kind": "request"}', "unsupported format version 99"),
        ('[1]', "must be a JSON object"),
    ],
)
def test_header_errors_name_what_is_wrong_in_one_line(text: str, message: str) -> None:
    with pytest.raises(InvalidDocument, match=message) as info:
        loads_request(text)
    assert "\n" not in str(info.value)


@settings(max_examples=300, deadline=None)
@given(x=st.floats(allow_nan=False), dtype=st.sampled_from(["float64", "float32", "float16"]))
def test_every_spelling_of_a_double_rounds_like_numpy_casts_it(x: float, dtype: str) -> None:
    """A double is exact in hex and in its full decimal expansion, so both must round to
    the dtype like NumPy's (correctly rounded) cast from float64."""
    with np.errstate(over="ignore"):
        want = float(np.float64(x).astype(dtype))
    texts = [float.hex(x)]
    if math.isfinite(x):
        texts.append(str(Decimal(x)))
        if dtype == "float64":  # the shortest repr is exact only after rounding to float64
            texts.append(repr(x))
    for text in texts:
        got = decode_number(text, dtype)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (
            f"decode_number({text!r}, {dtype}) = {got!r}, expected {want!r}")


def forward_request(dtype: str = "float64") -> Request:
    """The seed linear block asking for forward mode, with tangents that need every bit."""
    base = linear_block_request(dtype=dtype)
    tiny = {"float64": 5e-324, "float32": 2.0**-149, "float16": 2.0**-24}[dtype]
    tangents = {"x": np.array([-0.0, tiny]),  # a signed zero and the smallest subnormal
                "w": np.array([[1 / 3, -2.0], [np.inf, 0.1]]).astype(dtype)}
    return Request(base.program, base.inputs, dtype, base.cotangent, tangents)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_request_tangents_round_trip_bit_for_bit(dtype: str) -> None:
    request = forward_request(dtype)
    back = loads_request(dumps(request))
    assert back.forward_mode and back.tangents is not None and request.tangents is not None
    for name, want in request.tangents.items():
        got = back.tangents[name]
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (name, got, want)


def test_reverse_mode_request_and_result_are_written_as_before_without_tangent_fields() -> None:
    request = linear_block_request()
    assert "tangents" not in json.loads(dumps(request))
    value = Value(np.ones(2), {"x": np.ones(2), "w": np.ones((2, 2))})
    assert "tangent" not in json.loads(dumps(value, "float64"))
    assert not loads_request(dumps(request)).forward_mode


def test_result_tangent_round_trips_bit_for_bit_in_its_dtype() -> None:
    tangent = np.array([-0.0, np.float32(1 / 3)], dtype=np.float32)
    value = Value(np.ones(2, np.float32), {"x": np.ones(2, np.float32)}, tangent)
    back = loads_result(dumps(value, "float32"), "float32")
    assert isinstance(back, Value) and back.tangent is not None
    assert back.tangent.dtype == np.float32 and back.tangent.tobytes() == tangent.tobytes()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["tangents"].pop("w"), r"tangents \['x'\] do not match"),
        (lambda d: d["tangents"]["x"].update(shape=[3], data=["1", "2", "3"]),
         "tangent 'x' has shape"),
        (lambda d: d["tangents"]["x"]["data"].__setitem__(0, "one"), "does not match"),
    ],
)
def test_malformed_tangents_are_refused_with_one_line(
        change: Callable[[dict[str, Any]], object], message: str) -> None:
    doc = json.loads(dumps(forward_request()))
    change(doc)
    with pytest.raises(ResverifyError, match=message) as info:
        loads_request(json.dumps(doc))
    assert "\n" not in str(info.value), info.value


SHAPE_INVALID_WITH_COTANGENT = {
    "resverify": 1, "kind": "request", "dtype": "float64",
    "program": {"inputs": [{"name": "x", "shape": [2, 2]}, {"name": "b", "shape": [2]}],
                "nodes": [{"name": "y", "op": "residual_add", "args": ["x", "b"]}],
                "output": "y"},
    "inputs": {"x": {"shape": [2, 2], "data": [1, 1, 1, 1]}, "b": {"shape": [2], "data": [1, 2]}},
    "cotangent": {"shape": [2], "data": [1, 2]},
}


def test_a_json_shape_invalid_request_is_told_to_write_a_null_cotangent() -> None:
    with pytest.raises(InvalidDocument) as caught:
        loads_request(json.dumps(SHAPE_INVALID_WITH_COTANGENT))
    message = str(caught.value)
    expected = '"cotangent": null'
    assert expected in message and "None" not in message, \
        f"message {message!r}, expected it to say {expected!r} and not None"
    assert "got shape [2]" in message and "\n" not in message, message
    null = dict(SHAPE_INVALID_WITH_COTANGENT, cotangent=None)
    assert not loads_request(json.dumps(null)).shape_valid, "the null cotangent is read"
