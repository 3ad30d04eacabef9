"""tools/flakes.py keeps what finished when it is stopped: a flake count of many suite runs
takes hours, and Ctrl-C or a SIGTERM (a CI time limit, ``timeout``) must leave the counts of
the runs that ended, marked as interrupted, rather than nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from resverify.cli.runner import Interrupted, SuiteRun
from resverify.spec import dumps
from resverify.spec.fixtures import linear_block_request
from resverify.spec.request import Request
from tests.installed import require_installed
from tools.mutant_runs import Command, Job

TOOL = Path(__file__).resolve().parents[2] / "tools" / "flakes.py"


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


def _part(path: Path, seeds: dict[str, list[int]], failures: int = 0) -> Path:
    runs = {backend: len(s) for backend, s in seeds.items()}
    failed = [{"backend": b, "seed": s[0], "test": "properties/test_x.py::test_law",
               "message": "off"} for b, s in seeds.items()][:failures]
    doc = {"runs": runs, "tests": 2 * sum(runs.values()), "failures": failed, "incomplete": [],
           "examples": 50 * sum(runs.values()),
           "examples_by_property": {"law": 25 * sum(runs.values()),
                                    "independent_updates_add_their_variances":
                                        25 * sum(runs.values())},
           "seconds": 10.0, "seeds": seeds, "commit": "abc", "profile": "ci"}
    path.write_text(json.dumps(doc))
    return path


def test_flake_counts_made_in_parts_with_disjoint_seeds_add_up(tmp_path: Path) -> None:
    one = _part(tmp_path / "one.json", {"torch": [1, 2, 3], "jax": [1]})
    two = _part(tmp_path / "two.json", {"torch": [4, 5]}, failures=1)
    out = tmp_path / "sum.json"
    code = _tool().main(["--combine", str(one), str(two), "--out", str(out)])
    doc = json.loads(out.read_text())
    got = (code, doc["runs"], doc["seeds"], doc["tests"], doc["examples"],
           len(doc["failures"]), doc["statistical"]["examples"], len(doc["parts"]))
    expected = (1, {"torch": 5, "jax": 1}, {"jax": [1], "torch": [1, 2, 3, 4, 5]}, 12, 300,
                1, 150, 2)
    assert got == expected, f"--combine one.json two.json gives {got}, expected {expected}"


@pytest.mark.parametrize("second", [{"torch": [3, 4]}, None])
def test_flake_counts_that_repeat_a_seed_or_lack_their_seeds_are_refused(
        second: dict[str, list[int]] | None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    one = _part(tmp_path / "one.json", {"torch": [1, 2, 3]})
    two = _part(tmp_path / "two.json", second or {"torch": [7]})
    if second is None:
        doc = json.loads(two.read_text())
        del doc["seeds"]
        two.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as stop:
        _tool().main(["--combine", str(one), str(two)])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    want = "repeats torch seeds already counted: [3]" if second else "lists no seeds"
    assert (stop.value.code, want in error) == (2, True), (
        f"--combine with a part {second or 'without seeds'} exits {stop.value.code} with "
        f"{error!r}, expected exit 2 naming {want!r}")


def test_only_jax_children_get_the_persistent_compilation_cache_and_a_users_own_wins(
        tmp_path: Path) -> None:
    env = _tool().jax_cache_environment
    assert env(["numpy", "torch"], tmp_path, {}) == {}
    assert env(["numpy", "jax"], None, {}) == {}
    assert env(["jax"], tmp_path, {"JAX_COMPILATION_CACHE_DIR": "/mine"}) == {}
    for backends in (["jax"], ["numpy", "jax-jit"]):
        got = env(backends, tmp_path, {})
        assert got == {"JAX_COMPILATION_CACHE_DIR": str(tmp_path),
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}, (backends, got)


def test_a_jax_child_given_that_environment_fills_the_cache(tmp_path: Path) -> None:
    """The variable names are JAX's: a JAX run under them writes executables to the cache
    (eager JAX's quick per-primitive compiles included)."""
    require_installed("jax")
    cache = tmp_path / "cache"
    env = {**os.environ, **_tool().jax_cache_environment(["jax"], cache, {})}
    request = tmp_path / "request.json"
    request.write_text(dumps(linear_block_request()))
    done = subprocess.run([sys.executable, "-m", "resverify.cli.main", "run", str(request),
                           "--backend", "jax"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert cache.is_dir() and any(cache.iterdir()), f"nothing cached in {cache}: {done.stderr}"


MUTANT = "tests.mutants:TangentDropsIdentity"
TANGENT_LAW = "tangent_matches_spec_within_budget"


def _failed(dtype: str) -> dict[str, object]:
    return {"nodeid": f"properties/test_jvp.py::test_{TANGENT_LAW}[{dtype}]", "outcome": "failed",
            "message": "tangent[0] off", "properties": {
                "property": TANGENT_LAW, "backend": "mutant-tangent-drops-identity",
                "dtype": dtype, "examples": 3, "failure_kind": "law",
                "failures": [{"kind": "law", "message": "tangent[0] off"}]}}


def _runs_failing(results: list[dict[str, object]]) -> Callable[..., dict[str, Job]]:
    def fake(commands: Sequence[tuple[str, Command]], processes: int,
             on_done: Callable[[Job], None] | None = None) -> dict[str, Job]:
        job = Job(commands[0][0], Path("."))
        job.suite = SuiteRun(began=True, collected=len(results), exitstatus=1, returncode=1)
        job.suite.results += results
        assert on_done is not None
        on_done(job)
        return {job.key: job}
    return fake


def _known_file(tmp_path: Path, backend: str) -> Path:
    base = linear_block_request()
    vector = tmp_path / "tangent.json"
    vector.write_text(dumps(Request(base.program, base.inputs, base.dtype, base.cotangent,
                                    {n: np.full(v.shape, 0.5) for n, v in base.inputs.items()})))
    path = tmp_path / "known.toml"
    path.write_text(f'[[failure]]\nbackend = "{backend}"\nproperty = "{TANGENT_LAW}"\n'
                    f'vector = "tangent.json"\nreason = "planted"\n')
    return path


def test_a_failure_a_known_failures_entry_expects_is_counted_expected_not_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The rule of ``resverify check --known-failures``: the entry's vector still fails on
    its backend, and the failed test has its backend, property, dtype (the vector's, float64)
    and kind; the same law failing in float32 is no known failure."""
    tool = _tool()
    monkeypatch.setattr(tool, "run_children",
                        _runs_failing([_failed("float64"), _failed("float32")]))
    out = tmp_path / "flakes.json"
    code = tool.main(["--runs", "1", "--backend", MUTANT, "--known-failures",
                      str(_known_file(tmp_path, MUTANT)), "--out", str(out)])
    doc = json.loads(out.read_text())
    got = (code, [f["test"][-9:] for f in doc["failures"]],
           [(f["test"][-9:], f["known_failure"]) for f in doc["expected"]],
           [e["status"] for e in doc["known_failures"]])
    want = (1, ["[float32]"], [("[float64]", 1)], ["expected"])
    assert got == want, f"flakes.py --known-failures gives {got}, expected {want}"
    progress = f"{MUTANT}@1000: 2 tests, 1 failed, 1 expected (known failures), 0s"
    err = capsys.readouterr().err
    assert progress in err.splitlines(), f"progress lines {err!r} lack {progress!r}"
    assert doc["run_seconds"] == {f"{MUTANT}@1000": 0.0}, doc["run_seconds"]


def test_a_known_failure_whose_vector_passes_now_fails_the_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry whose vector passes on its backend (the reference here) is ``fixed``: the
    count exits 1 although no test failed, as ``resverify check`` does."""
    tool = _tool()
    monkeypatch.setattr(tool, "run_children", _runs_failing([]))
    out = tmp_path / "flakes.json"
    code = tool.main(["--runs", "1", "--backend", "numpy", "--known-failures",
                      str(_known_file(tmp_path, "numpy")), "--out", str(out)])
    doc = json.loads(out.read_text())
    got = (code, doc["failures"], [e["status"] for e in doc["known_failures"]])
    assert got == (1, [], ["fixed"]), (
        f"a fixed known failure gives {got}, expected (1, [], ['fixed'])")
