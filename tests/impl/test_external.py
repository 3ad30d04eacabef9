"""Engines in another process: the JSON-lines protocol, and every way an engine can misbehave.

A misbehaving engine makes ``run`` raise the matching BackendFault (timeout, crash,
bad_result) within the timeout; the engine is killed, with every process it started, and
started afresh for the next request.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resverify.impl import NumpyBackend, resolve_backend
from resverify.impl.external import ExternalBackend
from resverify.impl.serve import answer
from resverify.spec import Input, Node, Program, UsageError, dumps
from resverify.spec.errors import BackendCrash, BackendTimeout, BadResult
from resverify.spec.fixtures import linear_block_request, stack_request
from resverify.spec.request import Request, Result, ResultError, Value
from tests.hostile_backends import NEVER

ROOT = Path(__file__).resolve().parents[2]
SERVE = f"{shlex.quote(sys.executable)} -m resverify.impl.serve"

# An engine that misbehaves ({behaviour}) on the first request it ever gets (a marker file
# remembers it across restarts), and answers like the NumPy reference otherwise.
ENGINE = '''
import json, os, subprocess, sys, time
sys.path.insert(0, {root!r})
from resverify.impl import NumpyBackend
from resverify.impl.serve import answer
MARK = {mark!r}
for line in sys.stdin:
    doc = json.loads(line)
    with open(MARK + ".log", "a") as log:
        log.write(f"{{os.getpid()}} {{doc['kind']}}\\n")
    if doc["kind"] == "hello":
        print(json.dumps({{"resverify": 1, "kind": "capabilities", "name": "fake",
                          "dtypes": ["float64"], "ops": ["linear", "residual_add"]}}), flush=True)
        continue
    if os.path.exists(MARK):
        print(answer(NumpyBackend(), line), flush=True)
        continue
    open(MARK, "w").close()
    {behaviour}
'''


# Starting an engine (Python, NumPy) can take seconds on a loaded machine: the hello and
# the well-behaved requests get this long; only a request the engine never answers gets a
# short limit (it sleeps a day, so a timeout is its one outcome whatever the machine's speed).
PATIENT = 30.0
SHORT = 0.5
TRICKLE_SECONDS = 600
HANG = f"time.sleep({NEVER:.0f})"


def engine(tmp_path: Path, behaviour: str) -> str:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE.format(root=str(ROOT), mark=str(tmp_path / "misbehaved"),
                                    behaviour=behaviour))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (it may linger as a zombie only if not our child)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_served_reference_gives_bitwise_the_in_process_result() -> None:
    backend = resolve_backend(f"cmd:{SERVE} numpy")
    try:
        assert backend.capabilities == NumpyBackend.capabilities
        stack = stack_request(4, True, "float32")
        forward = Request(stack.program, stack.inputs, "float32", stack.cotangent,
                          {k: v[::-1].copy() for k, v in stack.inputs.items()})
        for request in (linear_block_request(), stack, forward):
            here, there = NumpyBackend().run(request), backend.run(request)
            assert isinstance(here, Value) and isinstance(there, Value)
            assert there.output.tobytes() == here.output.tobytes()
            assert {k: v.tobytes() for k, v in there.grads.items()} == {
                k: v.tobytes() for k, v in here.grads.items()}
            assert (there.tangent is None) == (here.tangent is None) == (request is not forward)
            if here.tangent is not None and there.tangent is not None:
                assert there.tangent.tobytes() == here.tangent.tobytes(), (there, here)
    finally:
        assert isinstance(backend, ExternalBackend)
        backend.close()


HOSTILE = [
    ("sys.exit(3)", BackendCrash, "exited with status 3"),
    (f"os.close(1); {HANG}", BackendCrash, "closed its output"),
    ("print('hello there', flush=True)", BadResult, "not JSON"),
    ("print('[1, 2]', flush=True)", BadResult, "must be a JSON object"),
    ("print(json.dumps({'resverify': 1, 'kind': 'result'}), flush=True)", BadResult,
     "'output' is a required property"),
    ("print(json.dumps({'resverify': 1, 'kind': 'capabilities'}), flush=True)", BadResult,
     "expected a result document"),
    ("print(answer(NumpyBackend(), line).replace('float64', 'float32'), flush=True)", BadResult,
     "float32 for a float64 request"),
    ("sys.stdout.write(2 * (answer(NumpyBackend(), line) + '\\n')); sys.stdout.flush()",
     BadResult, "more than one line"),
    (HANG, BackendTimeout, "no complete answer within 0.5 s"),
    (f"sys.stdout.write('{{\"resverify\": 1'); sys.stdout.flush(); {HANG}",
     BackendTimeout, "no complete answer within 0.5 s"),
]
"""(behaviour, fault, message); only the engines that never answer get the short limit: a
crash or a bad answer is read as soon as it is written, whatever the limit."""


@pytest.mark.parametrize(("behaviour", "fault", "message"), HOSTILE,
                         ids=[f"{f.__name__}-{m}" for _, f, m in HOSTILE])
def test_misbehaving_engine_raises_its_fault_and_the_next_request_runs_on_a_fresh_engine(
        tmp_path: Path, behaviour: str, fault: type[Exception], message: str) -> None:
    backend = ExternalBackend(engine(tmp_path, behaviour), timeout=PATIENT)
    try:
        assert backend.name == "fake" and backend.capabilities.dtypes == ("float64",)
        first = backend.pid
        assert first is not None, "the engine was started"
        backend.timeout = SHORT if fault is BackendTimeout else PATIENT
        with pytest.raises(fault, match=message) as info:
            backend.run(linear_block_request())
        assert "\n" not in str(info.value), info.value
        assert gone(first), f"engine {first} still runs after {fault.__name__}"
        backend.timeout = PATIENT
        again = backend.run(linear_block_request())
        want = NumpyBackend().run(linear_block_request())
        assert isinstance(again, Value) and isinstance(want, Value), again
        assert again.output.tolist() == want.output.tolist(), (again, want)
        assert backend.pid != first
        firsts: dict[str, str] = {}
        for entry in (tmp_path / "misbehaved.log").read_text().splitlines():
            pid, kind = entry.split()
            firsts.setdefault(pid, kind)
        assert list(firsts.values()) == ["hello", "hello"], firsts
    finally:
        backend.close()


@pytest.mark.parametrize(
    "behaviour",
    [
        # half a line, then silence
        "sys.stdout.write('{\"resverify\": 1, \"kind\": \"res'); sys.stdout.flush(); "
        + HANG,
        # a line that trickles out a byte every 0.2 s and would take TRICKLE_SECONDS to end
        "[(sys.stdout.write(' '), sys.stdout.flush(), time.sleep(0.2)) "
        f"for _ in range({TRICKLE_SECONDS * 5})]",
    ],
    ids=["half-line", "slow-line"],
)
def test_timeout_bounds_an_unfinished_or_slow_line(tmp_path: Path, behaviour: str) -> None:
    """The limit bounds the whole line: it never strikes early, and a line that keeps
    trickling in does not restart it (which would wait TRICKLE_SECONDS, 300 times the limit:
    the bound on ``took`` is that far above any honest time, not a speed goal)."""
    backend = ExternalBackend(engine(tmp_path, behaviour), timeout=PATIENT)
    try:
        backend.timeout = 2.0
        began = time.monotonic()
        with pytest.raises(BackendTimeout, match="within 2 s"):
            backend.run(linear_block_request())
        took = time.monotonic() - began
        assert 2.0 <= took < TRICKLE_SECONDS / 2, (
            f"a 2 s timeout returned after {took:.2f} s (the line would end after "
            f"{TRICKLE_SECONDS} s)")
    finally:
        backend.close()


def test_timed_out_engine_leaves_no_process_behind(tmp_path: Path) -> None:
    """The engine starts a child of its own before it answers the hello (so the child runs
    whatever the machine's speed), then never answers its request."""
    pid_file = tmp_path / "child.pid"
    command = engine(tmp_path, HANG)
    script = tmp_path / "engine.py"
    script.write_text(f"import subprocess\nchild = subprocess.Popen(['sleep', '{NEVER:.0f}'])\n"
                      f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
                      + script.read_text())
    backend = ExternalBackend(command, timeout=PATIENT)
    try:
        first = backend.pid
        assert first is not None, "the engine was started"
        child = int(pid_file.read_text())
        assert not gone(child), f"the engine's child {child} ended before the request"
        backend.timeout = SHORT
        with pytest.raises(BackendTimeout):
            backend.run(linear_block_request())
        assert gone(first), f"engine {first} left running or unreaped"
        deadline = time.monotonic() + PATIENT  # the killed child may take a moment to end
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), f"the engine's own child {child} outlived it"
    finally:
        backend.close()
    assert backend.pid is None


class _Struck(BaseException):
    """A test's time limit (pytest-timeout's, the suite's ExampleTimeout) striking."""


def test_an_exchange_cut_short_by_a_time_limit_leaves_no_process_behind(tmp_path: Path) -> None:
    """The engine never answers; the suite's own limit strikes first (a BaseException from
    a signal, as pytest-timeout raises it): the engine is killed, not left to sleep a day."""
    backend = ExternalBackend(engine(tmp_path, HANG), timeout=PATIENT)

    def strike(signum: int, frame: object) -> None:
        raise _Struck

    previous = signal.signal(signal.SIGALRM, strike)
    try:
        first = backend.pid
        assert first is not None, "the engine was started"
        signal.setitimer(signal.ITIMER_REAL, SHORT)
        with pytest.raises(_Struck):
            backend.run(linear_block_request())
        assert gone(first) and backend.pid is None, f"engine {first} left running"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        backend.close()


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_a_slow_start_is_not_a_timeout_but_a_slow_request_is(tmp_path: Path) -> None:
    """The engine takes longer to start than the request limit (it sleeps past it), and its
    first request never gets an answer; the limit is 2 s, a thousand times what the quick
    answer after the restart takes, so only the start and the hang decide the outcome."""
    limit = 2.0
    command = engine(tmp_path, HANG)
    script = tmp_path / "engine.py"
    script.write_text(f"import time; time.sleep({limit + 0.5})\n" + script.read_text())
    backend = ExternalBackend(command, timeout=limit)
    try:
        with pytest.raises(BackendTimeout, match=r"within 2 s"):
            backend.run(linear_block_request())
        result = backend.run(linear_block_request())  # restarted: slow hello, quick answer
        assert isinstance(result, Value), result
    finally:
        backend.close()


def test_closing_the_backend_ends_the_engine(tmp_path: Path) -> None:
    backend = ExternalBackend(engine(tmp_path, "pass"))
    pid = backend.pid
    assert pid is not None
    backend.close()
    assert gone(pid) and backend.pid is None


def test_unclaimed_request_is_unsupported_without_asking_the_engine(tmp_path: Path) -> None:
    backend = ExternalBackend(engine(tmp_path, "sys.exit(3)"), timeout=PATIENT)
    try:
        result = backend.run(stack_request(2, True, "float32"))
        assert isinstance(result, ResultError) and result.kind == "unsupported", result
        assert "float32" in result.message
        assert not (tmp_path / "misbehaved").exists()
    finally:
        backend.close()


def hello_engine(tmp_path: Path, capabilities: dict[str, object]) -> str:
    script = tmp_path / "hello.py"
    caps = {"resverify": 1, "kind": "capabilities", **capabilities}
    script.write_text(f"import json, sys\nsys.stdin.readline()\n"
                      f"print(json.dumps({caps!r}), flush=True)\nsys.stdin.read()\n")
    return f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


@pytest.mark.parametrize(
    ("capabilities", "message"),
    [
        ({"dtypes": ["f64"], "ops": ["add"]}, "'f64' is not one of"),
        ({"dtypes": ["float64"], "ops": ["add", "group_norm"]}, "'group_norm' is not one of"),
        ({"dtypes": ["float64"]}, "'ops' is a required property"),
        ({"ops": ["add"]}, "'dtypes' is a required property"),
        ({"dtypes": [], "ops": ["add"]}, "should be non-empty"),
        ({"dtypes": ["float64"], "ops": ["add"], "device": "gpu0"}, "'gpu0' does not match"),
        ({"dtypes": ["float64"], "ops": ["add"], "kind": "result"}, "capabilities"),
    ],
)
def test_hello_with_unknown_or_missing_names_is_a_one_line_usage_error(
        tmp_path: Path, capabilities: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        resolve_backend(hello_engine(tmp_path, capabilities))
    assert "\n" not in str(info.value), info.value


def test_hello_naming_a_device_is_accepted(tmp_path: Path) -> None:
    backend = resolve_backend(
        hello_engine(tmp_path, {"dtypes": ["float64"], "ops": ["add"], "device": "cuda:1"}))
    assert isinstance(backend, ExternalBackend)
    assert backend.capabilities.device == "cuda:1"
    backend.close()


def test_engine_that_cannot_start_or_greet_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot start"):
        resolve_backend(f"cmd:{tmp_path / 'no-such-engine'}")
    with pytest.raises(UsageError, match="exited with status 0"):
        resolve_backend(f"cmd:{shlex.quote(sys.executable)} -c pass")
    with pytest.raises(UsageError, match="needs a command line"):
        resolve_backend("cmd:")


def test_serve_refuses_what_is_not_a_valid_message_with_one_line() -> None:
    for line, message in [('{"kind": "request"}', 'lacks the "resverify" header field'),
                          ('{"resverify": 1, "kind": "hello", "x": []', "not valid JSON"),
                          ('{"resverify": 1, "kind": "request"}', "'program' is a required")]:
        doc = json.loads(answer(NumpyBackend(), line))
        assert doc["error"]["kind"] == "backend_error", doc
        assert message in doc["error"]["message"], (line, doc)


def test_serve_answers_a_backend_that_raises_or_returns_none_with_a_backend_error() -> None:
    class Raises(NumpyBackend):
        def run(self, request: Request) -> Result:
            raise RuntimeError("fell over")

    class ReturnsNone(NumpyBackend):
        def run(self, request: Request) -> Any:  # not a Result, on purpose
            return None

    line = dumps(linear_block_request())
    for backend, message in [(Raises(), "RuntimeError: fell over"),
                             (ReturnsNone(), "run() must return a Result, got None")]:
        doc = json.loads(answer(backend, line))
        assert doc["error"] == {"kind": "backend_error", "message": message, "shapes": None}


def test_served_bfloat16_result_says_bfloat16() -> None:
    pytest.importorskip("torch")
    request = linear_block_request(dtype="bfloat16")
    doc = json.loads(answer(resolve_backend("torch"), dumps(request)))
    assert doc.get("dtype") == "bfloat16", doc


# An engine that claims forward mode for add(a, b) programs: it answers like the NumPy
# reference and adds the output tangent t_a + t_b, unless {mistake} says otherwise; every
# line it gets is logged.
JVP_ENGINE = '''
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
from resverify.impl import NumpyBackend
from resverify.impl.serve import answer
from resverify.spec.codec import decode_array, encode_array
for line in sys.stdin:
    with open({log!r}, "a") as log:
        log.write(line)
    doc = json.loads(line)
    if doc["kind"] == "hello":
        print(json.dumps({{"resverify": 1, "kind": "capabilities", "name": "adder",
                          "dtypes": ["float64"], "ops": ["add"], "modes": ["vjp", "jvp"]}}),
              flush=True)
        continue
    tangents = doc.pop("tangents", None)
    result = json.loads(answer(NumpyBackend(), json.dumps(doc)))
    mistake = {mistake!r}
    if (tangents is not None and mistake != "none") or mistake == "extra":
        parts = [decode_array(t, "float64", "t") for t in (tangents or doc["inputs"]).values()]
        result["tangent"] = encode_array(sum(parts))
    print(json.dumps(result), flush=True)
'''


def add_request(forward: bool) -> Request:
    program = Program((Input("a", (2,)), Input("b", (2,))), (Node("y", "add", ("a", "b")),), "y")
    inputs = {"a": np.array([1.0, 2.0]), "b": np.array([0.5, -4.0])}
    tangents = {"a": np.array([0.25, -0.0]), "b": np.array([1.0, 3.0])} if forward else None
    return Request(program, inputs, "float64", np.ones(2), tangents)


def jvp_engine(tmp_path: Path, mistake: str = "") -> tuple[ExternalBackend, Path]:
    script, log = tmp_path / "adder.py", tmp_path / "sent.jsonl"
    script.write_text(JVP_ENGINE.format(root=str(ROOT), log=str(log), mistake=mistake))
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    return ExternalBackend(command, timeout=PATIENT), log


def test_engine_claiming_jvp_is_sent_tangents_and_its_output_tangent_is_read(
        tmp_path: Path) -> None:
    backend, log = jvp_engine(tmp_path)
    try:
        assert backend.capabilities.modes == ("vjp", "jvp"), backend.capabilities
        result = backend.run(add_request(forward=True))
        reverse = backend.run(add_request(forward=False))
    finally:
        backend.close()
    assert isinstance(result, Value) and result.tangent is not None, result
    assert result.tangent.tolist() == [1.25, 3.0], result.tangent
    assert isinstance(reverse, Value) and reverse.tangent is None, reverse
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert ["tangents" in doc for doc in sent] == [False, True, False], sent


@pytest.mark.parametrize(("mistake", "message"), [
    ("none", "no output tangent for a request with tangents"),
    ("extra", "an output tangent for a request without tangents"),
])
def test_engine_whose_tangent_does_not_follow_the_request_is_a_bad_result(
        tmp_path: Path, mistake: str, message: str) -> None:
    backend, _ = jvp_engine(tmp_path, mistake)
    try:
        with pytest.raises(BadResult, match=message):
            backend.run(add_request(forward=mistake == "none"))
    finally:
        backend.close()


def test_version_one_engine_is_never_sent_a_forward_mode_request(tmp_path: Path) -> None:
    backend = ExternalBackend(engine(tmp_path, "sys.exit(3)"), timeout=PATIENT)
    try:
        assert backend.capabilities.modes == ("vjp",), backend.capabilities
        base = linear_block_request()
        forward = Request(base.program, base.inputs, "float64", base.cotangent,
                          {k: np.ones_like(v) for k, v in base.inputs.items()})
        result = backend.run(forward)
    finally:
        backend.close()
    assert isinstance(result, ResultError) and result.kind == "unsupported", result
    assert "mode jvp not claimed" in result.message, result
    kinds = (tmp_path / "misbehaved.log").read_text().split()[1::2]
    assert kinds == ["hello"], kinds
    assert not (tmp_path / "misbehaved").exists()


def test_hello_claiming_modes_without_vjp_is_a_usage_error(tmp_path: Path) -> None:
    command = hello_engine(tmp_path, {"dtypes": ["float64"], "ops": ["add"], "modes": ["jvp"]})
    with pytest.raises(UsageError, match=r"modes: \[.jvp.\] does not contain") as info:
        resolve_backend(command)
    assert "\n" not in str(info.value), info.value


# Claims forward mode on its first start only; exits on its first request.
FICKLE = '''
import json, os, sys
mark = {mark!r}
first = not os.path.exists(mark)
open(mark, "a").close()
for line in sys.stdin:
    if json.loads(line)["kind"] == "hello":
        modes = ["vjp", "jvp"] if first else ["vjp"]
        print(json.dumps({{"resverify": 1, "kind": "capabilities", "dtypes": ["float64"],
                          "ops": ["add"], "modes": modes}}), flush=True)
    else:
        sys.exit(3)
'''


def test_engine_restarted_with_other_capabilities_is_a_bad_result(tmp_path: Path) -> None:
    script = tmp_path / "fickle.py"
    script.write_text(FICKLE.format(mark=str(tmp_path / "started")))
    backend = ExternalBackend(f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}",
                              timeout=PATIENT)
    try:
        assert backend.capabilities.modes == ("vjp", "jvp"), backend.capabilities
        with pytest.raises(BackendCrash, match="exited with status 3"):
            backend.run(add_request(forward=True))
        with pytest.raises(BadResult, match="restarted with other capabilities") as info:
            backend.run(add_request(forward=True))  # it would be sent tangents it cannot read
        assert "\n" not in str(info.value), info.value
    finally:
        backend.close()


def test_engine_writing_before_it_is_asked_is_named_so_and_restarted(tmp_path: Path) -> None:
    """An engine that answers, then writes an unrequested line (a stray log line on stdout),
    is a bad result on the next request, named as output written before the request, not
    as an answer of more than one line; the request after that runs on a fresh engine."""
    written = tmp_path / "stray-written"
    behaviour = (f"print(answer(NumpyBackend(), line), flush=True); time.sleep(0.1); "
                 f"print('loading weights...', flush=True); open({str(written)!r}, 'w').close()")
    backend = ExternalBackend(engine(tmp_path, behaviour), timeout=PATIENT)
    try:
        first = backend.run(linear_block_request())
        assert isinstance(first, Value), first
        deadline = time.monotonic() + PATIENT
        while not written.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert written.exists(), "the engine never wrote its stray line"
        with pytest.raises(BadResult) as info:
            backend.run(linear_block_request())
        assert "wrote before it was asked" in str(info.value), (
            f"an engine's unrequested line gave {info.value!r}, expected 'wrote before it "
            "was asked'")
        again = backend.run(linear_block_request())
        assert isinstance(again, Value), again
    finally:
        backend.close()
