"""tools/flakes.py keeps what finished when it is stopped: a flake count of many suite runs
takes hours, and Ctrl-C or a SIGTERM (a CI time limit, ``timeout``) must leave the counts of
the runs that ended, marked as interrupted, rather than nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from resverify.reports.mutant_runs import Command, Job
from resverify.reports.runner import Interrupted, SuiteRun
from resverify.spec import dumps
from resverify.spec.fixtures import linear_block_request
from resverify.spec.request import Request
from tests.installed import require_installed

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
    done = subprocess.run([sys.executable, "-m", "resverify.reports.cli", "run", str(request),
                           "--backend", "jax"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert cache.is_dir() and any(cache.iterdir()), f"nothing cached in {cache}: {done.stderr}"


MUTANT = "resverify.impl.mutants:TangentDropsIdentity"
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


SMALL = "shared_operand or zero_branch"  # 20 tests, seconds on numpy


def _count(tool: ModuleType, tmp_path: Path, name: str, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"{name}.json"
    code = tool.main(["--first-seed", "11", "-j", "1", "-k", SMALL, "--out", str(out), *args])
    return code, json.loads(out.read_text())


def test_a_warm_batch_gives_each_seed_the_run_a_process_of_its_own_gives(
        tmp_path: Path) -> None:
    """``--warm 3`` runs three seeds' suites in one process; each seed's tests, examples and
    verdicts are those of its own child (``--warm 1``). (These example counts do not depend
    on the seed; that each run draws its own seed's examples is the next test's law.)"""
    tool = _tool()
    cold = _count(tool, tmp_path, "cold", "--runs", "3", "--backend", "numpy")
    warm = _count(tool, tmp_path, "warm", "--runs", "3", "--backend", "numpy", "--warm", "3")
    fields = ("runs", "tests", "failures", "incomplete", "seeds", "run_examples",
              "examples_by_property")
    got, want = ((code, {f: doc[f] for f in fields}) for code, doc in (warm, cold))
    assert got == want, f"flakes.py --warm 3 gives {got}, expected the --warm 1 count {want}"
    assert (warm[1]["warm"], warm[1]["select"]) == (3, SMALL), (warm[1]["warm"], warm[1]["select"])


DRAWS = """
from pathlib import Path
from hypothesis import given, settings, strategies as st

@settings(max_examples=20, database=None, derandomize=False)
@given(n=st.integers())
def test_draw(pytestconfig, n):
    seed = pytestconfig.getoption("hypothesis_seed")
    with open(Path(__file__).parent / f"draws-{seed}.txt", "a") as out:
        out.write(f"{n}\\n")
"""


def test_a_warm_batch_draws_each_seeds_own_examples(tmp_path: Path) -> None:
    """The batch child runs pytest once per seed in one process; each run draws the examples
    its seed draws in a process of its own, and two seeds draw different ones."""
    cold, warm = tmp_path / "cold", tmp_path / "warm"
    runs = []
    for folder in (cold, warm):
        folder.mkdir()
        (folder / "test_draws.py").write_text(DRAWS)
    for seed in (1, 2):
        args = [str(warm / "test_draws.py"), "-q", "-p", "no:cacheprovider",
                f"--hypothesis-seed={seed}"]
        runs.append({"folder": str(warm), "args": args})
        subprocess.run([sys.executable, "-m", "pytest", str(cold / "test_draws.py"),
                        *args[1:]], cwd=cold, check=True, capture_output=True, timeout=120)
    (warm / "runs.json").write_text(json.dumps(runs))
    subprocess.run([sys.executable, str(TOOL.parent / "flakes_batch.py"), str(warm / "runs.json")],
                   cwd=warm, check=True, capture_output=True, timeout=120)
    got, want = ([(d / f"draws-{s}.txt").read_text().split() for s in (1, 2)]
                 for d in (warm, cold))
    assert got == want, f"the batch's draws by seed {got} differ from each seed's own {want}"
    assert want[0] != want[1], f"seeds 1 and 2 drew the same examples {want[0]}"


def test_a_warm_batch_still_fails_a_broken_backend_under_each_seed(tmp_path: Path) -> None:
    tool = _tool()
    code, doc = _count(tool, tmp_path, "broken", "--runs", "2", "--backend", MUTANT,
                       "--warm", "2", "-k", TANGENT_LAW)
    got = (code, doc["runs"], sorted({f["seed"] for f in doc["failures"]}))
    want = (1, {MUTANT: 2}, [11, 12])
    assert got == want, f"flakes.py --warm 2 on {MUTANT} gives {got}, expected {want}"


def _first_run_then(end: Callable[[Job, Path], None]) -> Callable[..., dict[str, Job]]:
    """A run_children that starts the first batch, lets its child finish only the batch's
    first seed (a listing cut to that run), then ``end(job, scratch)``."""
    def fake(commands: Sequence[tuple[str, Command]], processes: int,
             on_done: Callable[[Job], None] | None = None) -> dict[str, Job]:
        key, command = commands[0]
        scratch = Path(tempfile.mkdtemp())
        argv = command(scratch)
        listing = Path(argv[-1])
        runs = json.loads(listing.read_text())
        listing.write_text(json.dumps(runs[:1]))
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
        job = Job(key, scratch)
        assert on_done is not None
        end(job, Path(runs[1]["folder"]))
        if job.suite.returncode is not None:
            on_done(job)
        return {key: job}
    return fake


def _stop(job: Job, second: Path) -> None:
    raise Interrupted("SIGTERM")


def _crash_in_second(job: Job, second: Path) -> None:
    first = second.parent / second.name.replace("@12", "@11")
    records = (first / "report-log.jsonl").read_text().splitlines()
    (second / "report-log.jsonl").write_text("\n".join(records[:3]) + "\n")  # then died
    job.suite = SuiteRun(returncode=-9)


@pytest.mark.parametrize(("end", "interrupted", "incomplete"),
                         [(_stop, "SIGTERM", 0), (_crash_in_second, None, 1)])
def test_a_warm_batch_that_ends_early_keeps_the_seeds_it_finished(
        end: Callable[[Job, Path], None], interrupted: str | None, incomplete: int,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of seeds 11-13 whose child finished seed 11: stopped by us, the count keeps
    seed 11 and drops the run it stopped; crashed inside seed 12, seed 12 is an incomplete
    run (the count fails) and seed 13 was never run."""
    tool = _tool()
    monkeypatch.setattr(tool, "run_children", _first_run_then(end))
    code, doc = _count(tool, tmp_path, "ended", "--runs", "3", "--backend", "numpy",
                       "--warm", "3")
    got = (code, doc.get("interrupted"), doc["runs"], sorted(doc["run_examples"]),
           len(doc["incomplete"]), doc["run_examples"]["numpy@11"] > 0)
    want = (1, interrupted, {"numpy": 1 + incomplete},
            ["numpy@11", "numpy@12"][:1 + incomplete], incomplete, True)
    assert got == want, f"a batch ended by {end.__name__} gives {got}, expected {want}"
