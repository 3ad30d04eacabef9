"""The vectorised hex-float reader and writer are the scalar ones, bit for bit, and the
codec's text is the text ``json.dumps`` writes of its documents.

Each test compares :mod:`resverify.spec.hexfloat` with the scalar implementation it
replaces (``float.hex`` and :func:`resverify.spec.codec.decode_number`) on every class of
bit pattern: normals, subnormals, both zeros, both infinities and NaNs with any sign and
payload (the wire format carries no payload: every NaN is written ``nan``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from resverify.impl import resolve_backend
from resverify.properties.cases import Case
from resverify.properties.strategies import Sizes, residual_cases
from resverify.spec.codec import (
    decode_number,
    dumps,
    loads_request,
    request_to_dict,
    result_to_dict,
)
from resverify.spec.hexfloat import format_hex, format_hex_json, parse_hex

EXP, MANT = 0x7FF << 52, (1 << 52) - 1


def _from_bits(bits: list[int]) -> np.ndarray:
    return np.array(bits, dtype=np.uint64).view(np.float64)


# Every class of float64 bit pattern: sign × (zero, subnormal, normal, inf, nan payload).
bit_patterns = st.one_of(
    st.integers(0, 2**64 - 1),
    st.builds(lambda s, m: s << 63 | m, st.integers(0, 1), st.integers(0, MANT)),  # subnormal
    st.builds(lambda s: s << 63, st.integers(0, 1)),  # ±0
    st.builds(lambda s, m: s << 63 | EXP | m, st.integers(0, 1), st.integers(0, MANT)),
)


def _same(a: float, b: float) -> bool:
    """Equal bit for bit, NaNs equal to each other whatever their payload."""
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                  == math.copysign(1, b))


@given(st.lists(bit_patterns, max_size=64))
@example([0, 1 << 63, 1, MANT, 1 << 52, EXP, EXP | 1, 1 << 63 | EXP | 5, 0x7FEF << 48])
def test_format_hex_is_float_hex_for_every_bit_pattern(bits: list[int]) -> None:
    values = _from_bits(bits)
    expected = [float(v).hex() for v in values]
    assert format_hex(values) == expected, (
        f"format_hex({bits}) = {format_hex(values)}, but should be {expected}")


@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=5),
                  elements=st.floats(allow_nan=True, allow_subnormal=True)))
def test_format_hex_flattens_any_shape_like_the_codec(values: np.ndarray) -> None:
    assert format_hex(values) == [float(v).hex() for v in values.ravel()]


@given(st.lists(bit_patterns, max_size=64))
def test_parse_hex_reads_back_every_written_value(bits: list[int]) -> None:
    values = _from_bits(bits)
    text = format_hex(values)
    got, parsed = parse_hex(text)
    assert parsed.all(), f"parse_hex left {[t for t, p in zip(text, parsed, strict=True) if not p]}"
    for want, have, spelled in zip(values.tolist(), got.tolist(), text, strict=True):
        assert _same(have, want), f"parse_hex({spelled!r}) = {have!r}, but should be {want!r}"
        assert _same(have, decode_number(spelled, "float64")), spelled


SCHEMA_NUMBER = (r"\A(-?0[xX]([0-9a-fA-F]+(\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+"
                 r"|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|-?([iI][nN][fF]|[nN][aA][nN]))"
                 r"\Z")
other = st.one_of(st.from_regex(SCHEMA_NUMBER), st.text(max_size=30),
                  st.integers(), st.none(), st.booleans(),
                  bit_patterns.map(lambda b: float(_from_bits([b])[0]).hex().upper()))


@given(st.lists(st.one_of(other, bit_patterns.map(lambda b: float(_from_bits([b])[0]).hex())),
                max_size=40))
@example(["0x1.8p+1", "0x1.8000000000000p+01", "0x1.8000000000000p+1 ", "0x2.0000000000000p+0",
          "0x1.0000000000000p+1024", "0x0.0000000000000p-1022", "0x0.8000000000000p-1021",
          "-nan", "+0x1.0000000000000p+0", "0x1.0000000000000p-1074", "Inf", "-0x0.0p+0"])
def test_parse_hex_reads_exactly_what_the_scalar_reader_reads_or_leaves_it(
        data: list[object]) -> None:
    got, parsed = parse_hex(data)
    for value, have, ok in zip(data, got.tolist(), parsed.tolist(), strict=True):
        if ok:
            want = decode_number(value, "float64")
            assert _same(have, want), f"parse_hex([{value!r}]) = {have!r}, but should be {want!r}"


@pytest.mark.parametrize("spelling", ["0x1.8p+1", "0X1.8000000000000P+1", "1.5", "inf ",
                                      "0x1.8000000000000p+0001", "0x1.8000000000000p+1" + "0" * 9])
def test_parse_hex_leaves_every_other_spelling_to_the_scalar_reader(spelling: str) -> None:
    _, parsed = parse_hex([spelling])
    assert not parsed[0], f"parse_hex([{spelling!r}]) claimed a non-canonical spelling"


def test_parse_hex_of_nothing_is_empty() -> None:
    values, parsed = parse_hex([])
    assert values.shape == parsed.shape == (0,)


@given(st.lists(bit_patterns, max_size=40))
def test_format_hex_json_is_the_json_text_of_format_hex(bits: list[int]) -> None:
    values = _from_bits(bits)
    assert format_hex_json(values) == json.dumps(format_hex(values))


@given(residual_cases(sizes=Sizes(max_width=8, max_weight=32)),
       st.sampled_from(["float64", "float32", "float16", "bfloat16"]))
def test_dumps_writes_the_text_json_dumps_writes_of_the_document(case: Case, dtype: str) -> None:
    request = case.request(dtype)
    assert dumps(request) == json.dumps(request_to_dict(request), sort_keys=True)
    result = resolve_backend("numpy").run(request)
    assert dumps(result, dtype) == json.dumps(result_to_dict(result, dtype), sort_keys=True)
    assert loads_request(dumps(request)).program == request.program
