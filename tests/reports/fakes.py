"""Helpers of the report tests (no tests here): a tiny stand-in property suite, a stand-in
claim checker, :func:`run_check` that runs ``resverify check`` on them, and
:func:`descendants` and :func:`alive`, which say which processes a run left behind.

It behaves like the real suite from the runner's point of view: a ``--backend`` option
(repeatable), a ``--vector-dir`` option, the Hypothesis profiles dev/ci/thorough, and
``record_property`` of ``property``, ``backend``, ``dtype``, ``examples`` and, on failure,
``vector`` and ``replay``. ``mode`` adds a failing test (its message carries hostile
HTML), or a test that interrupts pytest, kills it, or hangs, after the others finished.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"

CONFTEST = '''
import pytest
from hypothesis import settings

for _name, _n in (("dev", 5), ("ci", 4), ("thorough", 50)):
    settings.register_profile(_name, max_examples=_n, deadline=None, database=None,
                              derandomize=_name == "ci")


def pytest_addoption(parser):
    parser.addoption("--backend", action="append", default=[])
    parser.addoption("--vector-dir", default="resverify-vectors")


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", metafunc.config.getoption("backend") or ["numpy"])
'''

PASSING = '''
import os
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

HOSTILE = {hostile!r}


def _examples(test):
    seen = []
    given(st.integers(-5, 5), st.integers(-5, 5))(lambda a, b: seen.append(test(a, b)))()
    return len(seen)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_addition_commutes(backend_name, dtype, record_property):
    record_property("property", "addition_commutes")
    record_property("backend", backend_name)
    record_property("dtype", dtype)
    record_property("examples", _examples(lambda a, b: a + b == b + a or 1 / 0))


def test_unclaimed_dtype_is_skipped(backend_name, record_property):
    record_property("property", "bfloat16_rounding")
    record_property("backend", backend_name)
    pytest.skip("backend does not claim bfloat16")
'''

FAILING = '''

def test_zero_branch_is_identity(backend_name, record_property, pytestconfig):
    from resverify.spec.codec import dumps
    from resverify.spec.fixtures import linear_block_request

    record_property("property", "zero_branch_is_identity")
    record_property("backend", backend_name)
    record_property("dtype", "float64")
    record_property("examples", 1)
    folder = Path(pytestconfig.getoption("--vector-dir"))
    folder.mkdir(parents=True, exist_ok=True)
    vector = folder / ("zero_branch-" + backend_name + ".json")
    vector.write_text(dumps(linear_block_request()))
    record_property("vector", str(vector))
    record_property("replay", "resverify replay " + str(vector) + " --backend " + backend_name)
    raise AssertionError("output[0]=1.0, but should be 2 [backend said: " + HOSTILE + "] "
                         + repr(object())  # an address differs run to run
                         + " vector: " + str(vector))
'''

STOPPING = '''

def test_zz_{name}(backend_name):
    {action}


def test_zzz_never_reached(backend_name):
    pass
'''

SPINNING = '''

@pytest.mark.filterwarnings("error")
def test_zz_spin(backend_name):
    """A Hypothesis test that collects garbage until it is stopped: a signal delivered to
    this process lands in Hypothesis' gc callback, where an exception can only be
    'unraisable'. It never ends by itself, so the signal lands in it whatever the speed."""
    import gc

    from hypothesis import settings

    @settings(max_examples=1, deadline=None, database=None)
    @given(st.integers())
    def spin(x):
        while True:
            [[] for _ in range(100)]
            gc.collect()

    spin()


def test_zzz_never_reached(backend_name):
    pass
'''


def write_fake_suite(folder: Path, mode: str = "pass") -> Path:
    """Write the fake suite into ``folder``; mode is pass, fail, interrupt, crash, slow or spin
    (a test that runs until it is stopped, in time.sleep or in the garbage collector)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conftest.py").write_text(CONFTEST)
    body = PASSING.format(hostile=HOSTILE)
    if mode == "fail":
        body += FAILING
    elif mode == "interrupt":
        body += STOPPING.format(name="interrupt", action="raise KeyboardInterrupt")
    elif mode == "crash":
        body += STOPPING.format(name="crash", action="os._exit(3)")
    elif mode == "slow":
        body += STOPPING.format(name="slow", action="__import__('time').sleep(86400)")
    elif mode == "spin":
        body += SPINNING
    (folder / "test_fake_properties.py").write_text(textwrap.dedent(body))
    return folder


def fake_claims(backend_name: str) -> list[dict]:
    """A stand-in claim checker: one claim that holds, one whose statement is hostile."""
    return [
        {"id": "S25", "source": "004_fake.txt", "section": "depth",
         "statement": "(1+a)^L at a=-1/2, L=3 is 1/8", "expected": "1/8", "observed": "1/8",
         "status": "pass", "note": None},
        {"id": "S99", "source": "004_fake.txt", "section": None,
         "statement": "hostile text " + HOSTILE, "expected": "1 | 2", "observed": "1 | 2",
         "status": "pass", "note": f"checked on {backend_name}"},
    ]


def run_check(
        mp: pytest.MonkeyPatch, root: Path, *args: str, mode: str = "fail",
        report_dir: str = "out") -> tuple[int, Path]:
    """``resverify check`` on the fake suite in ``root`` (the working directory), with the
    fake claim checker; returns (exit code, report folder)."""
    from resverify.cli.main import main

    suite = root / f"suite-{mode}"
    if not suite.exists():
        write_fake_suite(suite, mode)
    mp.chdir(root)
    mp.delenv("GITHUB_STEP_SUMMARY", raising=False)
    mp.setattr("resverify.cli.claim_source.find_checker", lambda: fake_claims)
    code = main(["check", "--suite", str(suite.relative_to(root)), "--report-dir", report_dir,
                 *args])
    return code, root / report_dir


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process, read from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(stat.parent.name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    table = process_table()
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        kids = {p for p, (ppid, _) in table.items() if ppid == parent} - found
        found |= kids
        todo += kids
    return found


def alive(pids: set[int]) -> set[int]:
    """The processes of ``pids`` that still run (a zombie has ended)."""
    table = process_table()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def two_machine_reports(root: Path) -> tuple[Path, Path]:
    """report.json of two runs of ``numpy`` on the fake suite, as two machines would write
    them: the first passes, the second fails one test (its message hostile HTML)."""
    paths = []
    for mode in ("pass", "fail"):
        with pytest.MonkeyPatch.context() as mp:
            code, folder = run_check(mp, root, "--backend", "numpy", "--no-plots", mode=mode,
                                     report_dir=f"run-{mode}")
        assert code == (0 if mode == "pass" else 1), f"check on the {mode} suite exit {code}"
        paths.append(folder / "report.json")
    return paths[0], paths[1]
