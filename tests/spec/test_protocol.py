"""The protocol's documents agree with resverify: the message schemas, the worked exchange
in docs/external-protocol.md, and what resverify actually sends to an engine."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from resverify.impl import NumpyBackend
from resverify.impl.backend import DEVICE_PATTERN
from resverify.impl.external import ExternalBackend
from resverify.impl.serve import answer
from resverify.spec import DTYPES, OPS, InvalidDocument, Request, dumps, loads_request
from resverify.spec.codec import (
    decode_number,
    protocol_schema,
    validate_message,
    with_table_ops,
)
from resverify.spec.fixtures import (
    linear_block_request,
    seed_cases,
    shared_operand_request,
    stack_request,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "external-protocol.md"


def worked_exchange() -> list[tuple[str, str]]:
    """The ``(direction, line)`` pairs of the document's worked exchange."""
    text = DOC.read_text()
    block = re.search(r"## A worked exchange.*?```jsonl\n(.*?)```", text, re.S)
    assert block, f"{DOC} has no worked exchange block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert all(line[:2] in ("> ", "< ") for line in lines), lines
    return [(line[0], line[2:]) for line in lines]


def installed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the values that depend on the installed NumPy (a capabilities
    document's ``version`` and ``about`` values) masked; their keys are kept."""
    if doc.get("kind") != "capabilities":
        return doc
    return {**doc, "version": "...", "about": dict.fromkeys(doc.get("about", {}), "...")}


def test_schema_is_a_valid_json_schema_with_every_message() -> None:
    schema = protocol_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert {"hello", "capabilities", "request", "result"} <= set(schema["$defs"])


def test_schema_names_agree_with_the_ir_and_the_capabilities() -> None:
    defs = protocol_schema()["$defs"]
    assert defs["dtype"]["enum"] == list(DTYPES), defs["dtype"]
    assert defs["op"]["enum"] == sorted(OPS), defs["op"]
    pattern = re.compile(defs["device"]["pattern"])
    for name in ["cpu", "cuda", "cuda:0", "cuda:12", "tpu:1", "xpu", "mps", "external",
                 "gpu", "cuda:", "cuda:x", "CPU", " cpu", "cpu:0"]:
        assert bool(pattern.search(name)) == bool(DEVICE_PATTERN.fullmatch(name)), name


def test_the_shipped_schema_lists_the_ops_of_the_op_table() -> None:
    """Every part of the schema that lists ops is generated from OP_TABLE: the op enum, the
    argument counts, the attribute fields and which ops require each attribute."""
    shipped = protocol_schema()
    generated = with_table_ops(shipped)
    for part in ("op", "node"):
        assert shipped["$defs"][part] == generated["$defs"][part], (
            f"spec/schema/protocol.schema.json $defs.{part} = {shipped['$defs'][part]}, but "
            f"OP_TABLE gives {json.dumps(generated['$defs'][part])}")
    assert shipped == generated


def test_the_schema_check_can_fail() -> None:
    """An op the schema does not list is found."""
    shipped = protocol_schema()
    stale = json.loads(json.dumps(shipped))
    stale["$defs"]["op"]["enum"].remove("tanh")
    stale["$defs"]["node"]["allOf"].pop()
    assert with_table_ops(stale) == shipped != stale


def test_worked_exchange_is_what_resverify_sends_and_the_reference_answers() -> None:
    exchange = worked_exchange()
    assert [d for d, _ in exchange] == [">", "<"] * (len(exchange) // 2), exchange
    kinds = []
    for (_, sent), (_, said) in zip(exchange[::2], exchange[1::2], strict=True):
        doc = json.loads(sent)
        kinds.append(doc["kind"])
        validate_message(doc, doc["kind"])
        if doc["kind"] == "request":
            assert dumps(loads_request(sent)) == sent, "not what resverify writes"
        reply = json.loads(said)
        validate_message(reply, "capabilities" if doc["kind"] == "hello" else "result")
        want = json.loads(answer(NumpyBackend(), sent))
        assert installed(reply) == installed(want), (
            f"the document says {said}\nthe reference says {want}")
    assert kinds == ["hello", "request", "request", "request"], kinds
    assert "jvp" in json.loads(exchange[1][1])["modes"], exchange[1]
    results = [json.loads(said) for d, said in exchange[3::2]]
    assert "output" in results[0] and "tangent" not in results[0], results[0]
    assert results[1]["tangent"] == {"data": ["0x1.8000000000000p+0", "-0x1.0000000000000p-2"],
                                     "shape": [2]}, results[1]  # [1.5, -0.25], as the text says
    assert results[2]["error"]["kind"] == "shape_mismatch", results[2]


def test_the_documented_double_rounding_example_rounds_once() -> None:
    example = "1.0000000596046447753906251"
    assert f'"{example}"' in DOC.read_text()
    assert float(example) == 1 + 2**-24  # through float64 it lands on the float32 midpoint
    assert decode_number(example, "float32") == 1 + 2**-23
    assert decode_number("1.5", "float64") == 1.5 and decode_number("10", "float64") == 10


RECORDER = '''
import sys
sys.path.insert(0, {root!r})
from resverify.impl import NumpyBackend
from resverify.impl.serve import answer
with open({log!r}, "a") as log:
    for line in sys.stdin:
        log.write(line)
        log.flush()
        print(answer(NumpyBackend(), line), flush=True)
'''


def test_everything_resverify_sends_to_an_engine_follows_the_schema(tmp_path: Path) -> None:
    script, log = tmp_path / "recorder.py", tmp_path / "sent.jsonl"
    script.write_text(RECORDER.format(root=str(ROOT), log=str(log)))
    backend = ExternalBackend(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
    base = linear_block_request()
    forward = Request(base.program, base.inputs, "float64", base.cotangent,
                      {k: -v for k, v in base.inputs.items()})
    requests = [linear_block_request(), shared_operand_request(dtype="float32"),
                stack_request(3, True, "float16"), forward,
                *(r for r, _, _ in seed_cases().values())]
    try:
        for request in requests:
            backend.run(request)
    finally:
        backend.close()
    sent = log.read_text().splitlines()
    assert len(sent) == 1 + len(requests), sent[:2]
    assert sum("tangents" in json.loads(line) for line in sent) == 1, "one forward-mode request"
    validator = jsonschema.Draft202012Validator(protocol_schema())
    for line in sent:
        errors = [e.message[:200] for e in validator.iter_errors(json.loads(line))]
        assert not errors, (errors, line[:200])


def test_saved_vector_with_its_vector_entry_follows_the_schema_and_loads() -> None:
    doc = json.loads(dumps(linear_block_request()))
    doc["vector"] = {"property": "p", "backend": "numpy", "message": "m", "kind": "law"}
    validate_message(doc, "request")
    assert loads_request(json.dumps(doc)).program == linear_block_request().program


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["program"]["nodes"][0].update(alpha="1/2"), "alpha"),
        (lambda d: d["program"]["nodes"][0].update(op="conv"), "'conv' is not one of"),
        (lambda d: d["inputs"]["x"]["data"].__setitem__(0, "0x1.8"), "does not match"),
        (lambda d: d.update(dtype="f64"), "'f64' is not one of"),
        (lambda d: d.pop("resverify"), 'lacks the "resverify" header field'),
        (lambda d: d.update(extra=1), "Additional properties"),
    ],
)
def test_invalid_request_is_refused_with_one_line_naming_the_problem(
        change: Callable[[dict[str, Any]], object], message: str) -> None:
    doc = json.loads(dumps(linear_block_request()))
    change(doc)
    with pytest.raises(InvalidDocument, match=message) as info:
        loads_request(json.dumps(doc))
    assert "\n" not in str(info.value), info.value


def test_result_with_an_error_and_a_tangent_is_refused() -> None:
    doc = {"resverify": 1, "kind": "result", "tangent": {"shape": [], "data": ["0x1p+0"]},
           "error": {"kind": "unsupported", "message": "no"}}
    with pytest.raises(InvalidDocument, match="should not be valid") as info:
        validate_message(doc, "result")
    assert "\n" not in str(info.value), info.value


def test_forward_mode_fields_are_optional_so_a_version_one_document_stays_valid() -> None:
    schema = protocol_schema()["$defs"]
    assert "tangents" not in schema["request"]["required"], schema["request"]["required"]
    caps = {"resverify": 1, "kind": "capabilities", "dtypes": ["float64"], "ops": ["add"]}
    validate_message(caps, "capabilities")
    for extra in ({"modes": ["jvp", "vjp"]}, {"version": "1.2"}, {"about": {"fma": "on"}}):
        validate_message({**caps, **extra}, "capabilities")
