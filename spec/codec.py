"""Lossless JSON for programs, requests and results.

Every float travels as ``float.hex`` text (``"0x1.8p+1"``, ``"-0x0.0p+0"``, ``"inf"``,
``"nan"``), so signed zeros, subnormals and the last bit survive. Alphas travel as
exact rationals (``"1/3"``). Each document carries ``"resverify": FORMAT_VERSION`` and
its ``"kind"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from spec.errors import InvalidProgram
from spec.ir import Input, Node, Program, as_shape
from spec.request import Request, Result, ResultError, storage_dtype

FORMAT_VERSION = 1


def encode_array(array: np.ndarray) -> dict[str, Any]:
    flat = np.asarray(array, dtype=np.float64).ravel()
    return {"shape": list(array.shape), "data": [float(v).hex() for v in flat]}


def decode_array(doc: Mapping[str, Any], dtype: str, where: str) -> np.ndarray:
    if not isinstance(doc, Mapping) or "data" not in doc or "shape" not in doc:
        raise InvalidProgram(f"{where}: an array needs 'shape' and 'data'")
    shape = as_shape(doc["shape"], where)
    try:
        flat = [float.fromhex(v) if isinstance(v, str) else float(v) for v in doc["data"]]
    except (TypeError, ValueError) as exc:
        raise InvalidProgram(f"{where}: bad float in data: {exc}") from None
    if len(flat) != int(np.prod(shape, dtype=np.int64)):
        raise InvalidProgram(f"{where}: {len(flat)} values do not fill shape {list(shape)}")
    return np.array(flat, dtype=np.float64).reshape(shape).astype(storage_dtype(dtype))


def program_to_dict(program: Program) -> dict[str, Any]:
    nodes = []
    for node in program.nodes:
        entry: dict[str, Any] = {"name": node.name, "op": node.op, "args": list(node.args)}
        if node.alpha is not None:
            entry["alpha"] = str(node.alpha)
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
            Node(n["name"], n["op"], tuple(n["args"]), n.get("alpha")) for n in doc["nodes"]
        )
        return Program(inputs, nodes, doc["output"])
    except (KeyError, TypeError) as exc:
        raise InvalidProgram(f"malformed program: missing or bad field {exc}") from None


def request_to_dict(request: Request) -> dict[str, Any]:
    return {
        "resverify": FORMAT_VERSION,
        "kind": "request",
        "program": program_to_dict(request.program),
        "dtype": request.dtype,
        "inputs": {k: encode_array(v) for k, v in request.inputs.items()},
        "cotangent": None if request.cotangent is None else encode_array(request.cotangent),
    }


def request_from_dict(doc: Mapping[str, Any]) -> Request:
    _check_header(doc, "request")
    try:
        dtype = doc["dtype"]
        storage_dtype(dtype)
        inputs = {k: decode_array(v, dtype, f"input {k!r}") for k, v in doc["inputs"].items()}
        cot = doc.get("cotangent")
        cotangent = None if cot is None else decode_array(cot, dtype, "cotangent")
        return Request(program_from_dict(doc["program"]), inputs, dtype, cotangent)
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidProgram(f"malformed request: missing or bad field {exc}") from None


def result_to_dict(result: Result) -> dict[str, Any]:
    doc: dict[str, Any] = {"resverify": FORMAT_VERSION, "kind": "result"}
    if result.error is not None:
        err = result.error
        doc["error"] = {"kind": err.kind, "message": err.message,
                        "shapes": None if err.shapes is None else [list(s) for s in err.shapes]}
        return doc
    assert result.output is not None and result.grads is not None
    doc["dtype"] = str(result.output.dtype)
    doc["output"] = encode_array(result.output)
    doc["grads"] = {k: encode_array(v) for k, v in result.grads.items()}
    return doc


def result_from_dict(doc: Mapping[str, Any], dtype: str = "float64") -> Result:
    """Decode a result; ``dtype`` is the request's, used when the document names none."""
    _check_header(doc, "result")
    try:
        if doc.get("error") is not None:
            err = doc["error"]
            shapes = err.get("shapes")
            pair = None if shapes is None else (
                as_shape(shapes[0], "error shape"), as_shape(shapes[1], "error shape"))
            return Result(error=ResultError(err["kind"], str(err["message"]), pair))
        dtype = doc.get("dtype", dtype)
        grads = {k: decode_array(v, dtype, f"grad {k!r}") for k, v in doc["grads"].items()}
        return Result(output=decode_array(doc["output"], dtype, "output"), grads=grads)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise InvalidProgram(f"malformed result: missing or bad field {exc}") from None


def _check_header(doc: Mapping[str, Any], kind: str) -> None:
    if not isinstance(doc, Mapping):
        raise InvalidProgram(f"a {kind} document must be a JSON object")
    if doc.get("resverify") != FORMAT_VERSION:
        raise InvalidProgram(
            f"unsupported format version {doc.get('resverify')!r}; this resverify reads "
            f"{FORMAT_VERSION}"
        )
    if doc.get("kind") != kind:
        raise InvalidProgram(f"expected a {kind} document, got kind {doc.get('kind')!r}")


def dumps(obj: Request | Result) -> str:
    """One JSON line for a request or a result."""
    doc = request_to_dict(obj) if isinstance(obj, Request) else result_to_dict(obj)
    return json.dumps(doc, sort_keys=True)


def loads_request(text: str) -> Request:
    try:
        return request_from_dict(json.loads(text))
    except json.JSONDecodeError as exc:
        raise InvalidProgram(f"not valid JSON: {exc}") from None


def loads_result(text: str, dtype: str = "float64") -> Result:
    try:
        return result_from_dict(json.loads(text), dtype)
    except json.JSONDecodeError as exc:
        raise InvalidProgram(f"not valid JSON: {exc}") from None
