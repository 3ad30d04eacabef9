"""A verdict of ``resverify check`` depends on the backend and the seed, never on the
directory it was started from: the suite's child pytest reads resverify's own
configuration only (``properties/suite.ini``), a backend's warnings are notes and never a
verdict, and a difference between runs replays with the runs it took to show."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resverify.cli.main import main
from tests.verdict_backends import PERIOD, WARNING

ROOT = Path(__file__).resolve().parents[2]
LAWS = "identical_results or never_mutates_inputs or layer_norm_is_invariant"
"""Three laws, the last over a norm whose rows NumPy may find empty: a quick, varied run."""

HOSTILE = {
    "pytest.ini": "[pytest]\naddopts = -x -p no:randomly\nfilterwarnings = error\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--maxfail=1"\n',
    "conftest.py": ("import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
                    "def pytest_runtest_call(item):\n"
                    "    pytest.fail('the working directory fails every test')\n"),
}


def _check(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # tests.verdict_backends in the child
    main(["check", "--no-claims", "--no-plots", "--report-dir", "out", *args])
    return dict(json.loads((folder / "out" / "report.json").read_text()))


def _verdicts(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a run decided, test by test: status, examples, what they reached."""
    return sorted((p["id"], p["status"], p["examples"], tuple(p["reached"].items()),
                   tuple(p["backend_warnings"])) for p in doc["properties"])


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_working_directory_configuration_never_reaches_the_suite(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty, hostile = tmp_path / "empty", tmp_path / "hostile"
    empty.mkdir()
    hostile.mkdir()
    for name, text in HOSTILE.items():
        (hostile / name).write_text(text)
    plain = _check(empty, monkeypatch, "--", "-k", LAWS)
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x -W error")
    spoiled = _check(hostile, monkeypatch, "--", "-k", LAWS)
    assert plain["status"] == spoiled["status"] == "pass", (plain["status"],
                                                              spoiled["status"])
    assert _verdicts(spoiled) == _verdicts(plain), (
        "a hostile pytest.ini, pyproject.toml, conftest.py and PYTEST_ADDOPTS changed the "
        "verdicts of resverify check")
    assert {p["id"].split("::")[0] for p in plain["properties"]} <= {
        "test_hygiene.py", "test_norm.py"}, "node ids depend on the working directory"


@pytest.mark.parametrize("start", ["repository", "elsewhere"])
def test_backend_warning_is_a_note_from_every_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    """The repository root's pyproject.toml turns warnings into errors for resverify's own
    tests; a backend's warning is still a note when ``check`` starts there."""
    folder = ROOT if start == "repository" else tmp_path
    report = tmp_path / "report"
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    main(["check", "--no-claims", "--no-plots", "--report-dir", str(report),
          "--backend", "tests.verdict_backends:WarnsOnEveryCall", "--", "-k", LAWS])
    doc = json.loads((report / "report.json").read_text())
    ran = [p for p in doc["properties"] if p["status"] != "skipped"]
    assert doc["status"] == "pass" and ran, (doc["status"], [p["message"] for p in ran])
    heard = {w for p in ran for w in p["backend_warnings"]}
    assert heard and all(w.startswith(f"RuntimeWarning: {WARNING} (") for w in heard), heard


def test_determinism_failure_prints_a_replay_that_reproduces_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _check(tmp_path, monkeypatch, "--backend",
                 "tests.verdict_backends:LastBitEveryTenthCall", "--", "-k",
                 "identical_results and float64")
    failed = [p for p in doc["properties"] if p["status"] == "fail"]
    assert [p["property"] for p in failed] == ["same_request_gives_bitwise_identical_results"], (
        [(p["property"], p["status"]) for p in doc["properties"]])
    replay = failed[0]["replay"]
    argv = shlex.split(replay)
    runs = int(argv[argv.index("--runs") + 1])
    assert runs >= PERIOD and f"first seen after {runs} runs" in failed[0]["message"], (
        replay, failed[0]["message"])
    cli = [sys.executable, "-m", "resverify.cli.main", *argv[1:]]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    again = subprocess.run(cli, cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=False)
    assert again.returncode == 1 and "non-deterministic" in again.stdout, (
        replay, again.returncode, again.stdout, again.stderr)
    short = argv[:argv.index("--runs")] + argv[argv.index("--runs") + 2:]
    fewer = subprocess.run([sys.executable, "-m", "resverify.cli.main", *short[1:]],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert fewer.returncode == 0, ("three runs were expected to miss a difference that shows "
                                   f"once in {PERIOD} calls", fewer.stdout)
