"""Bench section ``encoding``: a result document of 4,096 float64, per element against whole.

Baseline: what resverify's codec did before :mod:`resverify.spec.hexfloat`: ``float.hex``
per element to write; to read, a JSON Schema check of every element and
:func:`resverify.spec.codec.decode_number` per element. Candidate: today's
:mod:`resverify.spec.codec` (``dumps`` and ``loads_result``), which formats and parses the
canonical spelling for the whole array and schema-checks only other spellings. Both sides
include ``json.dumps`` and ``json.loads``, as an exchange with a ``cmd:`` engine pays them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from tools.bench_timing import Row, interleaved

SECTION = "encoding"
TARGET = 20.0


def _scalar_validator() -> Any:
    """The result schema with every array element checked against the number schema."""
    import jsonschema

    from resverify.spec.codec import protocol_schema

    schema = protocol_schema()
    defs = json.loads(json.dumps(schema["$defs"]))
    defs["array"]["properties"]["data"]["items"] = defs["number"]
    return jsonschema.Draft202012Validator(
        {"$schema": schema["$schema"], "$defs": defs, "$ref": "#/$defs/result"})


def _document(data: list[str], size: int) -> dict[str, Any]:
    return {"resverify": 1, "kind": "result", "dtype": "float64",
            "output": {"shape": [size], "data": data}, "grads": {}}


def _scalar_write(values: np.ndarray) -> str:
    return json.dumps(_document([float(v).hex() for v in values], values.size), sort_keys=True)


def _scalar_read(text: str, validator: Any) -> np.ndarray:
    from resverify.spec.codec import decode_number, parse_json

    doc = parse_json(text)
    validator.validate(doc)
    return np.array([decode_number(v, "float64") for v in doc["output"]["data"]])


def _fast_write(values: np.ndarray) -> str:
    from resverify.spec.codec import dumps
    from resverify.spec.request import Value

    return dumps(Value(values, {}), "float64")


def _fast_read(text: str) -> np.ndarray:
    from resverify.spec.codec import loads_result

    result = loads_result(text)
    return np.asarray(getattr(result, "output"))  # noqa: B009 - a Value, or a failed check


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
        out.append(Row(SECTION, f"{case}, {size} float64", "per element",
                       "spec.codec (vectorised)", timing.seconds["scalar"],
                       timing.seconds["vectorised"], ratio, target,
                       ratio >= TARGET if target else None))
    return out
