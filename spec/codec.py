"""Lossless JSON for programs, requests and results: the wire format of resverify.

One rule for every number: it is read *exactly*, then rounded once to the request's
dtype, round to nearest with ties to even (values beyond the dtype's largest finite
number by half an ulp or more become infinities). Spellings, as strings:

* hex floats, ``float.hex`` or C99 ``%a`` / ``%A`` (``"0x1.8p+1"``, ``"-0x0p+0"``; the
  ``p`` exponent is required, letters in any case);
* decimals in JSON number grammar (``"1.5"``, ``"10"``, ``"-2.5e-3"``), read as decimal;
* ``"inf"``, ``"-inf"``, ``"nan"`` (any case; ``"-nan"`` is NaN too).

A bare JSON number is read as a decimal too (``json.loads`` with ``parse_float=Decimal``,
never through a binary float first). resverify itself always writes ``float.hex``, so
signed zeros, subnormals and the last bit survive. Alphas travel as exact rationals
(``"1/3"``) or integers. Each document carries ``"resverify": FORMAT_VERSION`` and its
``"kind"``, and is checked against ``spec/schema/protocol.schema.json`` when read.

Forward mode travels in optional fields, so the format stays version 1: a request that
asks for the output tangent carries ``"tangents"`` (one array per input) and its result a
``"tangent"``; a reverse-mode request and its result are written exactly as before. Only
an engine whose capabilities claim ``"modes": ["vjp", "jvp"]`` is ever sent tangents
(:mod:`resverify.impl.external`), so an engine written before forward mode existed never
sees a field it does not know.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from resverify.spec.errors import InvalidDocument, InvalidProgram
from resverify.spec.hexfloat import format_hex, format_hex_json, parse_hex
from resverify.spec.ir import ATTRIBUTES, KINDS, Input, Node, Program, as_shape
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import (
    NO_OUTPUT,
    Request,
    Result,
    ResultError,
    Value,
    output_shape,
    storage_dtype,
)

FORMAT_VERSION = 1
MESSAGE_KINDS = ("hello", "capabilities", "request", "result")

# dtype -> (precision in bits including the leading one, smallest and largest normal exponent)
_FORMATS: dict[str, tuple[int, int, int]] = {
    "float64": (53, -1022, 1023),
    "float32": (24, -126, 127),
    "float16": (11, -14, 15),
    "bfloat16": (8, -126, 127),
}
_HEX = re.compile(r"(-?)0x([0-9a-f]+(?:\.[0-9a-f]*)?|\.[0-9a-f]+)p([+-]?[0-9]+)", re.I)
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"(-?)(inf|nan)", re.I)
_SPELLINGS = "a hex float like 0x1.8p+1, a decimal like 1.5, inf, -inf or nan"
# Beyond these binary exponents every dtype has overflowed, or rounded to zero.
_HUGE, _TINY = 1100, -1200


def round_to_dtype(value: float | Fraction, dtype: str) -> float:
    """The ``dtype`` value nearest to the exact ``value`` (ties to even), as a Python float.

    A float keeps the sign of its zero; a Fraction has none (callers that read ``"-0"``
    give the signed zero themselves).
    """
    if isinstance(value, float) and (
            not math.isfinite(value) or value == 0 or dtype == "float64"):
        return value
    if value == 0:
        return 0.0
    negative = value < 0
    precision, emin, emax = _FORMATS[dtype]
    if isinstance(value, float):
        size = abs(value)
        shift = max(math.frexp(size)[1] - 1, emin) - precision + 1
        scaled: float | Fraction = math.ldexp(size, -shift)  # exact: a power-of-two scaling
    else:
        exact = Fraction(abs(value.numerator), value.denominator)
        exponent = exact.numerator.bit_length() - exact.denominator.bit_length()
        if exact.numerator << max(-exponent, 0) < exact.denominator << max(exponent, 0):
            exponent -= 1
        shift = max(exponent, emin) - precision + 1
        scaled = exact / Fraction(2) ** shift
    mantissa = round(scaled)  # round half to even, for floats and Fractions alike
    overflow = mantissa.bit_length() + shift > emax + 1
    rounded = math.inf if overflow else math.ldexp(mantissa, shift)
    return -rounded if negative else rounded


def decode_number(value: object, dtype: str, where: str = "value") -> float:
    """One wire number (a string spelling, a JSON integer or decimal) rounded once to ``dtype``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise InvalidDocument(f"{where}: {value!r} is not a number; write {_SPELLINGS}")
    if isinstance(value, float):
        return round_to_dtype(value, dtype)
    if isinstance(value, int):
        return round_to_dtype(float(value) if abs(value) < 2**53 else Fraction(value), dtype)
    if isinstance(value, Decimal):
        return _decimal(value, dtype)
    if hexa := _HEX.fullmatch(value):
        return _hex(value, hexa, dtype)
    if _DECIMAL.fullmatch(value):
        return _decimal(Decimal(value), dtype)
    if word := _WORD.fullmatch(value):
        if word[2].lower() == "nan":
            return math.nan
        return -math.inf if word[1] else math.inf
    raise InvalidDocument(f"{where}: {value[:40]!r} is not a number; write {_SPELLINGS}")


def _decimal(value: Decimal, dtype: str) -> float:
    negative = value.is_signed()
    if not value.is_finite():
        raise InvalidDocument(f"{value} is not a finite decimal; write inf, -inf or nan")
    if value.is_zero() or value.adjusted() < -400:  # below half the smallest subnormal
        return -0.0 if negative else 0.0
    if value.adjusted() > 400:  # above every dtype's largest finite number
        return -math.inf if negative else math.inf
    if dtype == "float64":
        return float(value)  # correctly rounded, once
    return round_to_dtype(Fraction(value), dtype)


def _hex(text: str, match: re.Match[str], dtype: str) -> float:
    negative = bool(match[1])
    whole, _, fraction = match[2].partition(".")
    digits = (whole + fraction).lstrip("0")
    mantissa = int(digits or "0", 16)
    exponent = int(match[3]) - 4 * len(fraction)
    if mantissa == 0 or mantissa.bit_length() + exponent < _TINY:
        return -0.0 if negative else 0.0
    if mantissa.bit_length() + exponent > _HUGE:
        return -math.inf if negative else math.inf
    if len(digits.rstrip("0")) <= 13 and mantissa.bit_length() + exponent <= 1024:
        value = float.fromhex(text)  # at most 53 bits and in range: exact, or rounded once
        if dtype == "float64" or abs(value) >= 2.0**-1022:
            return round_to_dtype(value, dtype)
    exact = Fraction(mantissa) * Fraction(2) ** exponent
    return round_to_dtype(-exact if negative else exact, dtype)


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """``{"shape", "data"}`` with every element as ``float.hex`` text (written at once by
    :func:`resverify.spec.hexfloat.format_hex`, the same text)."""
    return {"shape": list(array.shape), "data": format_hex(np.asarray(array))}


Parsed = dict[int, tuple[np.ndarray, np.ndarray]]
"""``id(data list) -> parse_hex(data)``: the parse validation made, reused to decode."""


def decode_array(doc: Mapping[str, Any], dtype: str, where: str,
                 parsed_by_id: Parsed | None = None) -> np.ndarray:
    """An array document read exactly and rounded once to ``dtype``.

    The canonical ``float.hex`` spelling (all resverify writes) is read for the whole
    array at once (:func:`resverify.spec.hexfloat.parse_hex`); every other element, and
    every value that is not exactly a ``dtype`` value, goes through :func:`decode_number`.
    """
    if not isinstance(doc, Mapping) or "data" not in doc or "shape" not in doc:
        raise InvalidDocument(f"{where}: an array needs 'shape' and 'data'")
    shape = as_shape(doc["shape"], where)
    data = doc["data"]
    if not isinstance(data, list):
        raise InvalidDocument(f"{where}: 'data' must be a list of numbers")
    known = (parsed_by_id or {}).get(id(data))
    values, parsed = (known[0].copy(), known[1].copy()) if known else parse_hex(data)
    parsed &= _representable(values, dtype)
    for i in np.flatnonzero(~parsed).tolist():
        values[i] = decode_number(data[i], dtype, f"{where} element {i}")
    if len(values) != math.prod(shape):
        raise InvalidDocument(f"{where}: {len(values)} values do not fill shape {list(shape)}")
    return values.reshape(shape).astype(storage_dtype(dtype))


def _representable(values: np.ndarray, dtype: str) -> np.ndarray:
    """Where a float64 value is already a ``dtype`` value (NaN and infinities are)."""
    if dtype == "float64":
        return np.ones(values.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "bfloat16":  # a float32 whose low 16 bits are zero
            narrow = values.astype(np.float32)
            ok = (narrow.view(np.uint32) & np.uint32(0xFFFF)) == 0
        else:
            narrow = values.astype(storage_dtype(dtype))
            ok = np.ones(values.shape, dtype=bool)
        same = narrow.astype(np.float64) == values
    return ok & (same | ~np.isfinite(values))


def program_to_dict(program: Program) -> dict[str, Any]:
    nodes = []
    for node in program.nodes:
        entry: dict[str, Any] = {"name": node.name, "op": node.op, "args": list(node.args)}
        for attr in ATTRIBUTES:  # scale's alpha, a norm's eps: exact "p/q" strings
            value = getattr(node, attr)
            if value is not None:
                entry[attr] = str(value)
        for attr, value in node.params.items():  # a layout op's ints: numbers, lists
            entry[attr] = list(value) if isinstance(value, tuple) else value
        nodes.append(entry)
    return {
        "inputs": [{"name": i.name, "shape": list(i.shape)} for i in program.inputs],
        "nodes": nodes,
        "output": program.output,
    }


def program_from_dict(doc: Mapping[str, Any]) -> Program:
    try:
        inputs = tuple(Input(i["name"], i["shape"]) for i in doc["inputs"])
        nodes = tuple(
            Node(n["name"], n["op"], tuple(n["args"]), **{a: n.get(a) for a in ATTRIBUTES},
                 params={a: n[a] for a in KINDS if a in n and a not in ATTRIBUTES})
            for n in doc["nodes"]
        )
        return Program(inputs, nodes, doc["output"])
    except (KeyError, TypeError) as exc:
        raise InvalidProgram(f"malformed program: missing or bad field {exc}") from None


ArrayEncoder = Callable[[np.ndarray], dict[str, Any]]


def request_to_dict(request: Request, encode: ArrayEncoder = encode_array) -> dict[str, Any]:
    """The request document; ``"tangents"`` only for a forward-mode request and
    ``"accumulate"`` only when the request declares an accumulation dtype, so a request
    without either is written as before."""
    doc: dict[str, Any] = {
        "resverify": FORMAT_VERSION,
        "kind": "request",
        "program": program_to_dict(request.program),
        "dtype": request.dtype,
        "inputs": {k: encode(v) for k, v in request.inputs.items()},
        "cotangent": encode(request.cotangent) if request.shape_valid else None,
    }
    if request.tangents is not None:
        doc["tangents"] = {k: encode(v) for k, v in request.tangents.items()}
    if request.accumulate is not None:
        doc["accumulate"] = request.accumulate
    return doc


def request_from_dict(doc: Mapping[str, Any]) -> Request:
    """Decode a request document (a saved vector's ``"vector"`` entry is ignored)."""
    seen = _validate(doc, "request")
    dtype = doc["dtype"]
    inputs = {k: decode_array(v, dtype, f"input {k!r}", seen) for k, v in doc["inputs"].items()}
    cot = doc["cotangent"]
    cotangent = None if cot is None else decode_array(cot, dtype, "cotangent", seen)
    sent = doc.get("tangents")
    tangents = None if sent is None else {
        k: decode_array(v, dtype, f"tangent {k!r}", seen) for k, v in sent.items()}
    program = program_from_dict(doc["program"])
    given = NO_OUTPUT.shape if cotangent is None else cotangent.shape
    if given != NO_OUTPUT.shape and output_shape(program) is None:
        raise InvalidDocument(  # in the document's own spelling (Request says None)
            "a shape-invalid program has no output to take a cotangent: write "
            f'"cotangent": null (got shape {list(given)})')
    return Request(program, inputs, dtype, cotangent, tangents,
                   accumulate=doc.get("accumulate"))


def result_to_dict(result: Result, dtype: str | None = None,
                   encode: ArrayEncoder = encode_array) -> dict[str, Any]:
    """The result document, labelled with the dtype its output is in.

    ``dtype`` is the request's: the label when the output is stored in it (so a bfloat16
    result, held in float32, says bfloat16); an output in another dtype is labelled with
    its own, for the reader to refuse.
    """
    doc: dict[str, Any] = {"resverify": FORMAT_VERSION, "kind": "result"}
    if isinstance(result, ResultError):
        err = result
        doc["error"] = {"kind": err.kind, "message": err.message,
                        "shapes": None if err.shapes is None else [list(s) for s in err.shapes]}
        return doc
    own = str(result.output.dtype)
    doc["dtype"] = dtype if dtype is not None and storage_dtype(dtype) == own else own
    doc["output"] = encode(result.output)
    doc["grads"] = {k: encode(v) for k, v in result.grads.items()}
    if result.tangent is not None:
        doc["tangent"] = encode(result.tangent)
    return doc


def result_from_dict(doc: Mapping[str, Any], dtype: str = "float64") -> Result:
    """Decode a result; ``dtype`` is the request's, used when the document names none."""
    seen = _validate(doc, "result")
    if "error" in doc:
        err = doc["error"]
        shapes = err.get("shapes")
        pair = None if shapes is None else (
            as_shape(shapes[0], "error shape"), as_shape(shapes[1], "error shape"))
        return ResultError(err["kind"], err["message"], pair)
    dtype = doc.get("dtype", dtype)
    grads = {k: decode_array(v, dtype, f"grad {k!r}", seen) for k, v in doc["grads"].items()}
    tangent = doc.get("tangent")
    return Value(decode_array(doc["output"], dtype, "output", seen), grads,
                 None if tangent is None else decode_array(tangent, dtype, "tangent", seen))


def packaged_schema(package: str, name: str) -> dict[str, Any]:
    """The JSON Schema ``schema/<name>`` shipped as data of ``package``."""
    text = resources.files(package).joinpath(f"schema/{name}").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def protocol_schema() -> dict[str, Any]:
    """The JSON Schema of every protocol message (``spec/schema/protocol.schema.json``)."""
    return packaged_schema("resverify.spec", "protocol.schema.json")


def with_table_ops(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The protocol ``schema`` with every part that lists ops generated from
    :data:`~resverify.spec.ops.OP_TABLE`: the op names (sorted), a node's argument count
    (the fewest and most any op takes), its attribute fields, and for each attribute the
    ops that require it (and that every other op refuses it). The shipped schema must
    equal its own regeneration (``tests/spec/test_protocol.py``): a new op changes the
    published protocol, and this says how."""
    out: dict[str, Any] = json.loads(json.dumps(schema))
    defs = out["$defs"]
    defs["op"] = {"enum": sorted(OP_TABLE)}
    node = defs["node"]
    arities = [op.arity for op in OP_TABLE.values()]
    node["properties"]["args"].update(minItems=min(arities), maxItems=max(arities))
    takers: dict[str, list[str]] = {}
    for name, op in OP_TABLE.items():
        for attribute in op.attributes:
            takers.setdefault(attribute, []).append(name)
    for attribute in takers:
        node["properties"][attribute] = dict(KINDS[attribute].schema)
    node["allOf"] = [
        {"if": {"properties": {"op": {"const": names[0]} if len(names) == 1
                               else {"enum": sorted(names)}}},
         "then": {"required": [attribute]},
         "else": {"not": {"required": [attribute]}}}
        for attribute, names in takers.items()]
    return out


@cache
def _validator(kind: str) -> Any:
    """The ``kind`` message's structure; array elements are checked by :func:`_elements`."""
    import jsonschema

    schema = protocol_schema()
    defs = json.loads(json.dumps(schema["$defs"]))
    del defs["array"]["properties"]["data"]["items"]  # jsonschema would visit each one
    sub = _inline(defs[kind], defs, ())  # references resolved once, not on every message
    return jsonschema.Draft202012Validator({"$schema": schema["$schema"], "$defs": defs, **sub})


def _inline(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """``node`` with every ``{"$ref": "#/$defs/NAME"}`` replaced by that definition."""
    if isinstance(node, list):
        return [_inline(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref", "")
    name = ref.removeprefix("#/$defs/")
    if len(node) == 1 and ref.startswith("#/$defs/") and name not in seen:
        return _inline(defs[name], defs, (*seen, name))
    return {key: _inline(value, defs, seen) for key, value in node.items()}


@cache
def _number_validator() -> Any:
    import jsonschema

    schema = protocol_schema()
    return jsonschema.Draft202012Validator(
        {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/number"})


def _arrays(doc: Mapping[str, Any], kind: str) -> list[tuple[str, list[Any]]]:
    """``(path, data)`` of every array of a structurally valid ``kind`` message."""
    found = []
    for field, many in (("inputs", True), ("cotangent", False), ("tangents", True),
                        ("output", False), ("grads", True), ("tangent", False)):
        entry = doc.get(field)
        if not isinstance(entry, Mapping) or kind not in ("request", "result"):
            continue
        named = entry.items() if many else [(None, entry)]
        found += [("/".join(p for p in (field, name, "data") if p), array["data"])
                  for name, array in named if isinstance(array, Mapping)]
    return found


def _elements(doc: Mapping[str, Any], kind: str, seen: Parsed) -> Any:
    """The first array element that breaks the number schema, as a jsonschema error
    (each array's parse is kept in ``seen`` for the decoder).

    Elements in the canonical ``float.hex`` spelling are valid by construction (that is
    what :func:`resverify.spec.hexfloat.parse_hex` reads); only the others are checked
    one by one, which keeps validating a large array cheap.
    """
    for path, data in _arrays(doc, kind):
        _, parsed = seen[id(data)] = parse_hex(data)
        for i in np.flatnonzero(~parsed).tolist():
            error = next(iter(_number_validator().iter_errors(data[i])), None)
            if error is not None:
                return f"{path}/{i}", error
    return None


def validate_message(doc: object, kind: str) -> None:
    """Raise a one-line InvalidDocument unless ``doc`` is a valid ``kind`` message."""
    _validate(doc, kind)


def _validate(doc: object, kind: str) -> Parsed:
    """:func:`validate_message`, returning the parse of every array's elements."""
    if not isinstance(doc, Mapping):
        raise InvalidDocument(f"a {kind} document must be a JSON object, got {_short(doc)}")
    if "resverify" not in doc:
        raise InvalidDocument(
            f'the {kind} document lacks the "resverify" header field '
            f'(expected "resverify": {FORMAT_VERSION})')
    if doc["resverify"] != FORMAT_VERSION or isinstance(doc["resverify"], bool):
        raise InvalidDocument(
            f"unsupported format version {doc['resverify']!r}; this resverify reads "
            f"{FORMAT_VERSION}")
    if doc.get("kind") != kind:
        raise InvalidDocument(f"expected a {kind} document, got kind {doc.get('kind')!r}")
    import jsonschema

    seen: Parsed = {}
    error = jsonschema.exceptions.best_match(_validator(kind).iter_errors(doc))
    where = "top level"
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or where
    elif (found := _elements(doc, kind, seen)) is not None:
        where, error = found
    if error is not None:
        raise InvalidDocument(
            f"malformed {kind} document: missing or bad field at {where}: {_message(error)}")
    return seen


def _message(error: Any) -> str:
    """jsonschema's message, with the offending value shortened to stay on one line."""
    text = str(error.message)
    value = repr(error.instance)
    if len(value) > 60:
        text = text.replace(value, _short(error.instance))
    return " ".join(text.split())[:300]


def _short(value: object) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else f"{text[:57]}..."


def _reject_constant(name: str) -> float:
    raise InvalidDocument(f"{name} is not JSON; write the string \"nan\", \"inf\" or \"-inf\"")


def parse_json(text: str) -> Any:
    """``json.loads`` that keeps JSON decimals exact (as ``Decimal``) and refuses NaN tokens."""
    try:
        return json.loads(text, parse_float=Decimal, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidDocument(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidDocument("not valid JSON: nested too deeply") from None


def dumps(obj: Request | Result, dtype: str | None = None) -> str:
    """One JSON line for a request or a result (``dtype``: the request's, for a result).

    The text is ``json.dumps(request_to_dict(obj), sort_keys=True)`` (or the result's); each
    array's data is written by :func:`resverify.spec.hexfloat.format_hex_json` straight into
    the text, in place of a unique placeholder string.
    """
    token = f"resverify-array-{uuid.uuid4().hex}-"
    arrays: dict[str, str] = {}

    def later(array: np.ndarray) -> dict[str, Any]:
        key = f'"{token}{len(arrays)}"'
        arrays[key] = format_hex_json(np.asarray(array))
        return {"shape": list(array.shape), "data": key[1:-1]}

    doc = (request_to_dict(obj, later) if isinstance(obj, Request)
           else result_to_dict(obj, dtype, later))
    text = json.dumps(doc, sort_keys=True)
    for key, data in arrays.items():
        text = text.replace(key, data, 1)
    return text


def loads_request(text: str) -> Request:
    return request_from_dict(parse_json(text))


def loads_result(text: str, dtype: str = "float64") -> Result:
    return result_from_dict(parse_json(text), dtype)
