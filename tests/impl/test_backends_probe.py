"""``resverify backends --probe cmd:COMMAND`` lists an external engine by what it claims.

A ``cmd:`` engine's modes, dtypes and ops exist only in its answer to the hello, so the
listing starts the engine, reads that answer and stops it. Checked against the C engine
(engines/c, built here; skipped without a C compiler) and the served NumPy reference, and
against engines that cannot be started, exit, answer garbage, misspell a claim or hang:
each of those is one line on standard error and exit status 2, with no engine left
running.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resverify.cli.main import main
from resverify.impl import external
from resverify.spec.ops import OP_TABLE
from tests.hostile_backends import NEVER
from tests.impl.test_c_engine import SOURCE, build


def engine_ops() -> list[str]:
    """The ops the C engine's source lists in its ``OPS`` array (an engine claims only those)."""
    match = re.search(r"OPS\[\] = \{(.*?)\};", SOURCE.read_text(), re.S)
    assert match, f"no OPS array in {SOURCE}"
    return re.findall(r'"([a-z_]+)"', match.group(1))


SERVED_NUMPY = f"cmd:{shlex.join([sys.executable, '-m', 'resverify.impl.serve', 'numpy'])}"
OLD_HELLO = '{"resverify": 1, "kind": "capabilities", "dtypes": ["float64"], "ops": ["add"]}'
"""A hello from before forward mode and the engine's version: no name, modes or about."""
BAD_HELLO = ('{"resverify": 1, "kind": "capabilities", "dtypes": ["f64"], '
             '"ops": ["add"]}')
"""What the C engine claims: every op of the IR but the layout ops."""


@pytest.fixture(scope="module")
def c_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory)


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    """The rows ``resverify backends --json ARGV`` prints (it must exit 0)."""
    code = main(["backends", "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, f"resverify backends --json {shlex.join(argv)}: exit {code}: {err}"
    return list(json.loads(out))


def recording_pid(command: str, pid_file: Path) -> str:
    """``cmd:`` running ``command`` as the process whose id it first writes to pid_file."""
    inner = f"echo $$ > {shlex.quote(str(pid_file))}; exec {command}"
    return f"cmd:{shlex.join(['sh', '-c', inner])}"


def pid_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited and been reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def gone(pid_file: Path) -> bool:
    """Whether the process whose id is in pid_file has exited and been reaped."""
    return pid_gone(int(pid_file.read_text()))


def test_probe_lists_the_c_engine_with_the_claims_of_its_hello_and_stops_it(
        c_engine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid_file = tmp_path / "pid"
    spec = recording_pid(shlex.quote(str(c_engine)), pid_file)
    rows = listed(capsys, "--probe", spec)
    assert [row["name"] for row in rows][-1] == spec, rows
    row = rows[-1]
    want = {"kind": "cmd", "library": "resverify-c-engine", "version": "1.4",
            "installed": True, "device": "cpu", "dtypes": ["float64", "float32"],
            "ops": engine_ops(), "modes": ["vjp", "jvp"], "engine_name": "c-engine"}
    got = {key: row[key] for key in want}
    assert got == want, f"--probe {spec} listed {got}, but should list {want}"
    about = row["about"]
    assert isinstance(about, dict) and "compiler" in about and "bug" not in about, row
    assert gone(pid_file), f"the probed engine (pid {pid_file.read_text().strip()}) still runs"


def test_probe_is_repeatable_and_each_engine_gets_its_own_row_in_order(
        c_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = f"cmd:{c_engine}"
    rows = listed(capsys, "--probe", SERVED_NUMPY, "--probe", engine)
    probed = [(row["name"], row["engine_name"], row["dtypes"]) for row in rows
              if row["kind"] == "cmd"]
    assert probed == [(SERVED_NUMPY, "numpy", ["float64", "float32", "float16"]),
                      (engine, "c-engine", ["float64", "float32"])], probed


def test_probe_row_in_the_table_shows_claims_version_and_the_hello_settings(
        c_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"cmd:{c_engine}"
    assert main(["backends", "--probe", spec]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in lines if line.startswith(f"{spec} "))
    claims = "all" if engine_ops() == sorted(OP_TABLE) else ",".join(engine_ops())
    assert row == [spec, "cmd", "resverify-c-engine", "1.4", "yes", "cpu", "float64,float32",
                   claims, "vjp,jvp"], row
    note = next(line for line in lines if line.startswith(f"{spec}: "))
    assert "name=c-engine" in note and "compiler=" in note, note


def test_probe_of_an_engine_that_says_only_dtypes_and_ops_lists_the_protocol_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"cmd:sh -c {shlex.quote(f'read line; echo {shlex.quote(OLD_HELLO)}')}"
    row = listed(capsys, "--probe", spec)[-1]
    want: dict[str, object] = {
        "name": spec, "library": "cmd", "version": None, "device": "external",
        "dtypes": ["float64"], "ops": ["add"], "modes": ["vjp"], "engine_name": spec,
        "about": {}, "note": ""}
    got = {key: row[key] for key in want}
    assert got == want, f"--probe {spec} listed {got}, but should list {want}"


def test_probed_engine_is_named_by_names_and_filtered_by_device(
        c_engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"cmd:{c_engine}"
    assert main(["backends", "--names", "--device", "cpu", "--probe", spec]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == spec
    assert main(["backends", "--names", "--device", "cuda", "--probe", spec]) == 0
    assert spec not in capsys.readouterr().out.splitlines()


BROKEN = {
    "not-a-cmd": ("numpy", "--probe takes cmd:COMMAND"),
    "empty-command": ("cmd:", "cmd: needs a command line"),
    "no-such-program": ("cmd:/nonexistent/resverify-engine", "cannot start"),
    "exits": ("cmd:sh -c 'exit 3'", "exited with status 3 (answering the hello)"),
    "garbage": ("cmd:sh -c 'read line; echo garbage'", "answered a line that is not JSON"),
    "misspelt-dtype": (f"cmd:sh -c {shlex.quote(f'read line; echo {shlex.quote(BAD_HELLO)}')}",
                       "bad answer to the hello"),
}
"""Each broken probe and a part of the one line it must be refused with."""


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_probe_of_a_broken_engine_is_one_line_and_exit_2(
        case: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec, said = BROKEN[case]
    code = main(["backends", "--probe", spec])
    out, err = capsys.readouterr()
    call = f"resverify backends --probe {spec!r}"
    assert code == 2, f"{call}: exit {code}, expected 2; stderr {err!r}"
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, f"{call}: {err!r}"
    assert said in err, f"{call}: {err!r} does not say {said!r}"
    assert out == "", f"{call} listed backends although it failed: {out[:200]!r}"


def test_probe_of_an_engine_that_never_answers_stops_at_the_time_limit_and_kills_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The hello's limit (here shortened from the protocol's 30 s) ends the probe.

    The engine sleeps a day: the probe can return only through the limit, so a timeout is
    the one outcome whatever the machine's speed. Its process id is taken where resverify
    starts it (an id the engine wrote itself could still be unwritten when the limit struck).
    """
    monkeypatch.setattr(external, "START_SECONDS", 0.3)
    monkeypatch.setenv("RESVERIFY_CMD_TIMEOUT", "0.3")
    started: list[int] = []
    popen = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(external.subprocess, "Popen", recording)
    code = main(["backends", "--probe", f"cmd:sleep {NEVER:.0f}"])
    err = capsys.readouterr().err
    assert code == 2 and "no complete answer within 0.3 s" in err, (code, err)
    assert len(started) == 1, f"the probe started {len(started)} engines, expected one"
    assert pid_gone(started[0]), f"the engine that never answered (pid {started[0]}) still runs"
