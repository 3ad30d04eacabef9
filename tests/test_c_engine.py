"""The worked C engine (engines/c) passes the property suite over ``cmd:``.

It was written from docs/external-protocol.md and the message schemas alone; building it
with the C compiler on PATH (``cc``) and running the float64 property suite against it
checks that those documents are enough to write an engine. Skipped where there is no C
compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from resverify.impl.about import describe_backend
from resverify.impl.external import ExternalBackend
from resverify.spec.codec import validate_message
from resverify.spec.fixtures import seed_cases
from resverify.spec.request import Request, Value
from tests.test_jvp_adapters import column_mismatches

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "engines" / "c" / "resverify_engine.c"


@pytest.fixture(scope="module")
def c_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to build engines/c")
    exe = tmp_path_factory.mktemp("c-engine") / "resverify-engine"
    done = subprocess.run(
        [compiler, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
         str(SOURCE), "-lm"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{compiler} failed to build {SOURCE}:\n{done.stderr}"
    return exe


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_c_engine_tangent_is_each_exact_jacobian_column_of_the_seed_fixtures(
        c_engine: Path, dtype: str) -> None:
    backend = ExternalBackend(str(c_engine), timeout=10)
    try:
        assert backend.capabilities.modes == ("vjp", "jvp"), backend.capabilities
        for case, (request, _, _) in sorted(seed_cases().items()):
            wrong = column_mismatches(backend, request, dtype, every=True)
            assert not wrong, f"{len(wrong)} columns differ, first {wrong[:2]} [{case}]"
    finally:
        backend.close()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_c_engine_reproduces_the_seed_fixtures_exactly(c_engine: Path, dtype: str) -> None:
    backend = ExternalBackend(str(c_engine), timeout=10)
    try:
        assert backend.name == "c-engine", backend.name
        about = describe_backend(backend)
        assert (about["library"], about["version"]) == ("resverify-c-engine", "1.2"), about
        assert about["compiler"].split()[0] in ("gcc", "clang", "unknown"), about
        assert about["FLT_EVAL_METHOD"] in ("0", "1", "2", "-1"), about
        for case, (request, output, grads) in sorted(seed_cases().items()):
            result = backend.run(Request(request.program, request.inputs, dtype,
                                         request.cotangent))
            call = f"[c-engine {dtype} {case}: {request.program.describe()}]"
            assert isinstance(result, Value), f"{result} {call}"
            got = tuple(float(v) for v in result.output.ravel())
            assert got == tuple(float(v) for v in output), f"output={got} {call}"
            for name, want in grads.items():
                got = tuple(float(v) for v in result.grads[name].ravel())
                assert got == tuple(float(v) for v in want), f"grad[{name}]={got} {call}"
    finally:
        backend.close()


def test_c_engine_passes_the_float64_property_suite(c_engine: Path, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "RESVERIFY_PROFILE": "ci", "RESVERIFY_VECTOR_DIR": str(tmp_path / "v")}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
               "-q", "--backend", f"cmd:{c_engine}", "properties", "-k", "float64",
               f"--junitxml={junit}"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    out = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, out
    cases = list(ET.parse(junit).iter("testcase"))
    assert cases, out
    examples = {}
    for case in cases:
        assert case.find("failure") is None and case.find("error") is None, out
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if case.find("skipped") is None and "examples" in props:
            examples[case.get("name")] = int(str(props["examples"]))
    assert examples and all(n > 0 for n in examples.values()), examples
    assert sum(examples.values()) >= 10 * len(examples), examples


def test_c_engine_answers_the_documented_worked_exchange(c_engine: Path) -> None:
    from tests.test_protocol import worked_exchange

    exchange = [line for _, line in worked_exchange()]
    pairs = list(zip(exchange[::2], exchange[1::2], strict=True))
    sent = "".join(asked + "\n" for asked, _ in pairs)
    done = subprocess.run([str(c_engine)], input=sent, capture_output=True, text=True,
                          timeout=30, check=True)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    documented = [json.loads(said) for _, said in pairs]
    hello = answers[0]
    validate_message(hello, "capabilities")
    assert hello["modes"] == ["vjp", "jvp"], hello
    assert len(answers) == len(documented), done.stdout
    for got, want in zip(answers[1:], documented[1:], strict=True):
        validate_message(got, "result")
        if "error" in want:
            assert got["error"]["kind"] == want["error"]["kind"], got
            assert got["error"]["shapes"] == want["error"]["shapes"], got
            continue
        assert ("tangent" in got) == ("tangent" in want), (got, want)
        tangent = ("tangent",) if "tangent" in want else ()
        for key in ("output", *(f"grads/{k}" for k in want["grads"]), *tangent):
            mine, theirs = got, want
            for part in key.split("/"):
                mine, theirs = mine[part], theirs[part]
            values = [float.fromhex(v) for v in mine["data"]]
            assert values == [float.fromhex(v) for v in theirs["data"]], (key, mine, theirs)
            assert mine["shape"] == theirs["shape"], key
