"""Engines in another process: the JSON-lines protocol, and every way an engine can misbehave."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from impl import NumpyBackend, resolve_backend
from impl.external import ExternalBackend
from spec import UsageError
from spec.fixtures import linear_block_request, stack_request

SERVE = f"{shlex.quote(sys.executable)} -m impl.serve"

ENGINE = '''
import json, sys, time
for line in sys.stdin:
    doc = json.loads(line)
    if doc["kind"] == "hello":
        print(json.dumps({"resverify": 1, "kind": "capabilities", "name": "fake",
                          "dtypes": ["float64"], "ops": ["linear", "residual_add"]}), flush=True)
        continue
    {behaviour}
'''


def engine(tmp_path: Path, behaviour: str) -> str:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE.replace("{behaviour}", behaviour))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def test_served_reference_gives_bitwise_the_in_process_result():
    backend = resolve_backend(f"cmd:{SERVE} numpy")
    try:
        assert backend.capabilities == NumpyBackend.capabilities
        for request in (linear_block_request(), stack_request(4, True, "float32")):
            here, there = NumpyBackend().run(request), backend.run(request)
            assert here.output is not None and there.output is not None
            assert there.output.tobytes() == here.output.tobytes()
            assert there.grads is not None and here.grads is not None
            assert {k: v.tobytes() for k, v in there.grads.items()} == {
                k: v.tobytes() for k, v in here.grads.items()}
    finally:
        assert isinstance(backend, ExternalBackend)
        backend.close()


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("sys.exit(3)", "exited with status 3"),
        ("print('hello there', flush=True)", "not JSON"),
        ("print('[1, 2]', flush=True)", "not an object"),
        ("time.sleep(30)", "no answer within 0.5 s"),
        ("print(json.dumps({'resverify': 1, 'kind': 'result'}), flush=True)", "malformed result"),
    ],
)
def test_misbehaving_engine_gives_a_backend_error_and_is_restarted(tmp_path, behaviour, message):
    backend = ExternalBackend(engine(tmp_path, behaviour), timeout=0.5)
    try:
        assert backend.name == "fake" and backend.capabilities.dtypes == ("float64",)
        for _ in range(2):
            result = backend.run(linear_block_request())
            assert result.error is not None and result.error.kind == "backend_error"
            assert message in result.error.message, result.error.message
    finally:
        backend.close()


def test_engine_that_cannot_start_or_greet_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot start"):
        resolve_backend(f"cmd:{tmp_path / 'no-such-engine'}")
    with pytest.raises(UsageError, match="exited with status 0"):
        resolve_backend(f"cmd:{shlex.quote(sys.executable)} -c pass")
    with pytest.raises(UsageError, match="needs a command line"):
        resolve_backend("cmd:")
