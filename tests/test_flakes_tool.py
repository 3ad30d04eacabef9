"""tools/flakes.py keeps what finished when it is stopped: a flake count of many suite runs
takes hours, and Ctrl-C or a SIGTERM (a CI time limit, ``timeout``) must leave the counts of
the runs that ended, marked as interrupted, rather than nothing."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from resverify.reports.mutant_runs import Command, Job
from resverify.reports.runner import Interrupted, SuiteRun

TOOL = Path(__file__).resolve().parent.parent / "tools" / "flakes.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("resverify_flakes_tool", TOOL)
    assert spec is not None and spec.loader is not None, TOOL
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_run_then(stop: BaseException) -> Callable[..., dict[str, Job]]:
    def fake(commands: Sequence[tuple[str, Command]], processes: int,
             on_done: Callable[[Job], None] | None = None) -> dict[str, Job]:
        key = commands[0][0]
        job = Job(key, Path("."))
        job.suite = SuiteRun(began=True, collected=1, exitstatus=0, returncode=0)
        job.suite.results.append({"nodeid": "properties/test_x.py::test_law", "outcome": "passed",
                                  "message": "", "properties": {"property": "law",
                                                                "examples": 7}})
        assert on_done is not None
        on_done(job)
        raise stop
    return fake


@pytest.mark.parametrize(("stop", "name"), [(Interrupted("SIGTERM"), "SIGTERM"),
                                            (KeyboardInterrupt(), "SIGINT")])
def test_a_stopped_flake_count_keeps_the_finished_runs_and_says_it_was_stopped(
        stop: BaseException, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _tool()
    monkeypatch.setattr(tool, "run_children", _one_run_then(stop))
    out = tmp_path / "flakes.json"
    code = tool.main(["--runs", "5", "--backend", "numpy", "--out", str(out)])
    doc = json.loads(out.read_text())
    got = (code, doc.get("interrupted"), doc["runs"], doc["tests"], doc["examples"])
    assert got == (1, name, {"numpy": 1}, 1, 7), (
        f"flakes.py stopped by {name} after one of 5 runs gives {got}, expected "
        f"(1, {name!r}, {{'numpy': 1}}, 1, 7)")
