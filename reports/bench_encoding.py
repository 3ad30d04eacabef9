"""Bench section ``encoding``: the wire format's numbers, one at a time against vectorised.

Baseline: what resverify's codec did per element before :mod:`resverify.spec.hexfloat`:
``float.hex`` per element to write, and to read a JSON Schema check of every element plus
:func:`resverify.spec.codec.decode_number` per element. Candidate: :func:`format_hex` and
:func:`parse_hex` on the whole array. The round trip rows include ``json.dumps`` and
``json.loads`` on both sides, as an exchange with a ``cmd:`` engine pays them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from resverify.reports.bench_timing import Row, interleaved

SECTION = "encoding"
TARGET = 20.0


def _scalar_validator() -> Any:
    import jsonschema

    from resverify.spec.codec import protocol_schema

    schema = protocol_schema()
    return jsonschema.Draft202012Validator(
        {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/array"})


def _scalar_write(values: np.ndarray) -> str:
    return json.dumps({"shape": list(values.shape), "data": [float(v).hex() for v in values]})


def _scalar_read(text: str, validator: Any) -> np.ndarray:
    from resverify.spec.codec import decode_number, parse_json

    doc = parse_json(text)
    validator.validate(doc)
    return np.array([decode_number(v, "float64") for v in doc["data"]])


def _fast_write(values: np.ndarray) -> str:
    from resverify.spec.hexfloat import format_hex

    return json.dumps({"shape": list(values.shape), "data": format_hex(values)})


def _fast_read(text: str) -> np.ndarray:
    from resverify.spec.codec import parse_json
    from resverify.spec.hexfloat import parse_hex

    values, parsed = parse_hex(parse_json(text)["data"])
    assert parsed.all(), "the canonical spelling must always parse"
    return values


def rows(quick: bool = False, size: int = 4096) -> list[Row]:
    """Write, read and round-trip ``size`` float64 values, scalar against vectorised."""
    rounds = 3 if quick else 7
    values = np.random.default_rng(0).standard_normal(size)
    values[:4] = [0.0, -0.0, 5e-324, -np.inf]
    validator = _scalar_validator()
    text = _scalar_write(values)
    if _fast_write(values) != text or not np.array_equal(_fast_read(text), values):
        raise AssertionError("vectorised and scalar encodings differ")
    cases: dict[str, dict[str, Callable[[], object]]] = {
        "write": ({"scalar": lambda: _scalar_write(values),
                   "vectorised": lambda: _fast_write(values)}),
        "read": ({"scalar": lambda: _scalar_read(text, validator),
                  "vectorised": lambda: _fast_read(text)}),
        "round trip": ({"scalar": lambda: _scalar_read(_scalar_write(values), validator),
                        "vectorised": lambda: _fast_read(_fast_write(values))}),
    }
    out = []
    for case, fns in cases.items():
        timing = interleaved(fns, rounds)
        ratio = timing.ratio("scalar", "vectorised")
        target = f">= {TARGET:g}x faster" if case == "round trip" else ""
        out.append(Row(SECTION, f"{case}, {size} float64", "scalar (per element)",
                       "vectorised (spec.hexfloat)", timing.seconds["scalar"],
                       timing.seconds["vectorised"], ratio, target,
                       ratio >= TARGET if target else None))
    return out
