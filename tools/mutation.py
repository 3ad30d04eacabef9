"""The mutation score of resverify's own code, with mutmut, on a copy of the repository.

A test suite is as strong as the bugs it notices in the code it tests. mutmut makes small
changes to the functions of the chosen modules (a ``<`` for a ``<=``, a constant off by
one, a dropped argument) and runs the chosen tests against each: a change no test
notices (a *survivor*) is behaviour the tests do not pin.

Why a copy: mutmut writes every mutant into ``mutants/`` beside the sources and runs the
tests from there, and resverify's one import name is a folder of links
(``resverify/spec -> ../spec``), while mutmut names a module after its file's path; the
copy's ``resverify/`` holds real folders, so the module mutmut mutates,
``resverify/spec/compare.py``, is the ``resverify.spec.compare`` the tests import.
Why a venv of its own: mutmut and its terminal UI stay out of the project's venv (mutmut
3.3.1 even installed a top-level ``tests`` package there, shadowing this repository's
``tests/``); its venv reuses the project venv's packages through a ``.pth`` file.

    .venv/bin/python tools/mutation.py                       # compare, budget, rounding
    .venv/bin/python tools/mutation.py --suite exact         # or ops, impl, enclosure: see SUITES
    .venv/bin/python tools/mutation.py --module spec/exact.py --test tests/spec/test_exact.py

Prints the score (killed / mutants that ran) by module and every survivor with its diff
(``--out FILE`` writes them as JSON); exit 0. ``--survivors-of FILE`` re-runs only the
survivors (and the mutants no test reached or never run) of an earlier ``--out``, ``--only TEXT``
narrows that to the mutants whose names hold TEXT, ``--rerun timeout`` adds the mutants
that timed out. The venv and the copy live in
``build/mutation/`` (``--work DIR``); each suite has its own copy there, so suites may
run at once.
The copy's ``conftest.py`` clears resverify's ``functools`` caches at the start of each
mutant's test session: mutmut forks those sessions from a process that already ran the
tests, and a cached SymPy derivation would otherwise hide every mutant of an op's
``symbolic`` form.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = "mutmut==3.8.1"
MODULES = ("spec/compare.py", "spec/budget.py", "spec/rounding.py")
TESTS = ("tests/spec/test_compare.py", "tests/spec/test_budget.py",
         "tests/spec/test_rounding.py")
EXACT_TESTS = ("tests/spec/test_exact.py", "tests/spec/ops/test_norms.py")
SUITES = {
    "budget": (MODULES, TESTS),
    "exact": (("spec/exact.py",), EXACT_TESTS),
    "ops": (("spec/ops/*.py",), (*EXACT_TESTS, "tests/spec/ops/test_table.py",
                                 "tests/spec/test_derive.py",
                                 "tests/spec/ops/test_exact_rules.py",
                                 "tests/spec/ops/test_sigmoid.py",
                                 "tests/spec/ops/test_budget_rules.py")),
    "impl": (("impl/tensor.py", "impl/ops.py", "impl/numpy_backend.py"),
             ("tests/impl/test_reference.py", "tests/impl/test_jvp_reference.py")),
    "enclosure": (("spec/enclosure.py", "spec/ball.py"),
                  ("tests/spec/test_enclosure.py", "tests/spec/ops/test_enclosure_rules.py",
                   "tests/properties/test_laws_variance.py")),
}
"""Named module and test selections (``--suite``): the tests chosen are those that exercise
the modules and run in seconds, since mutmut runs them once per mutant. Tests marked
``slow`` never run under mutmut (:data:`PYTEST_ARGS`): ``tests/spec/test_budget.py`` holds
forward-mode and norm budgets over whole stacks on every installed adapter, minutes a run.
``enclosure`` leaves out the budget's tests and the exact interpreter's, which do not
import ``spec/enclosure.py``."""
PYTEST_ARGS = ("-m", "not slow")
PACKAGES = ("spec", "impl", "properties", "reports")
LINE = re.compile(r"^\s*(?P<key>\S+__mutmut_\d+): (?P<status>.+)$")
RERUN = ("survived", "no tests", "not checked")
"""The verdicts ``--survivors-of`` re-runs: new tests may cover a mutant no test reached, and
a run stopped early leaves mutants never run ("not checked")."""
FRESH_CACHES = '''

import functools as _functools
import sys as _sys

import pytest as _pytest


@_pytest.fixture(autouse=True, scope="session")
def _mutation_fresh_caches() -> None:
    """mutmut forks each mutant's test run from a process that ran every test once: a
    cache filled there (SymPy derivations, tanh enclosures) would hand the mutant's tests
    the unmutated results. Added by tools/mutation.py to its copy only."""
    for name, module in list(_sys.modules.items()):
        if name.startswith("resverify."):
            for value in list(vars(module).values()):
                if isinstance(value, _functools._lru_cache_wrapper):
                    value.cache_clear()
'''


def mutmut_venv(work: Path) -> Path:
    """``work/venv`` with mutmut, seeing the project venv's packages; its bin folder."""
    env = work / "venv"
    python = env / "bin" / "python"
    if not (env / "bin" / "mutmut").exists():
        venv.create(env, with_pip=True)
        subprocess.run([python, "-m", "pip", "install", "-q", MUTMUT], check=True)
        site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig."
                                    "get_paths()['purelib'])"], check=True, text=True,
                                   capture_output=True).stdout.strip())
        shutil.rmtree(site / "tests", ignore_errors=True)
        (site / "zz-resverify-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env / "bin"


def repository_copy(work: Path, modules: list[str], tests: list[str],
                    name: str = "repo") -> Path:
    """A fresh copy ``work/name`` of the working tree's files (tracked and not ignored) with
    mutmut's configuration, and ``resverify/`` holding real folders instead of links."""
    copy = work / name
    shutil.rmtree(copy, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           check=True, text=True, capture_output=True).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file() or source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name, follow_symlinks=False)
    for package in PACKAGES:  # real folders, so module names are resverify.spec.*
        (copy / "resverify" / package).unlink()
        shutil.copytree(copy / package, copy / "resverify" / package)
    with (copy / "conftest.py").open("a") as conftest:
        conftest.write(FRESH_CACHES)
    mutated = sorted({Path(m).parts[0] for m in modules})
    (copy / "setup.cfg").write_text(
        "[mutmut]\nsource_paths=\n" + "".join(f"    resverify/{p}/\n" for p in mutated)
        + "only_mutate=\n" + "".join(f"    resverify/{m}\n" for m in modules)
        + "also_copy=\n"
        + "".join(f"    resverify/{p}/\n" for p in PACKAGES if p not in mutated)
        + "    resverify/__init__.py\n    resverify/py.typed\n    conftest.py\n    examples/\n"
        + "pytest_add_cli_args=\n" + "".join(f"    {a}\n" for a in PYTEST_ARGS)
        + "pytest_add_cli_args_test_selection=\n" + "".join(f"    {t}\n" for t in tests))
    return copy


def results(bin_dir: Path, copy: Path) -> dict[str, str]:
    """Every mutant's status, as ``mutmut results --all true`` prints it."""
    said = subprocess.run([bin_dir / "mutmut", "results", "--all", "true"], cwd=copy,
                          check=True, text=True, capture_output=True).stdout
    return {m["key"]: m["status"] for m in map(LINE.match, said.splitlines()) if m}


def score(statuses: dict[str, str]) -> dict[str, Any]:
    """Killed, survived and the rest by module; the score is killed / (killed + survived)."""
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for key, status in statuses.items():
        by_module[key.split(".x")[0].split(".x_")[0]][status] += 1
    table = {}
    for module, counts in sorted(by_module.items()):
        ran = counts["killed"] + counts["survived"]
        table[module] = {**counts, "score": round(counts["killed"] / ran, 4) if ran else None}
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="budget",
                        help="a named selection of modules and tests (default budget: "
                        f"{' '.join(MODULES)} with {' '.join(TESTS)})")
    parser.add_argument("--module", action="append", dest="modules", metavar="PATH",
                        help="module to mutate, repeatable (instead of the suite's)")
    parser.add_argument("--test", action="append", dest="tests", metavar="PATH",
                        help="test file to run, repeatable (instead of the suite's)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "mutation")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write scores and survivors as JSON")
    parser.add_argument("--survivors-of", type=Path, metavar="JSON",
                        help="re-run only the survivors of an earlier --out, keeping its "
                        "other verdicts (the score after new tests, without a full run); "
                        "mutants that had no test or were never run are re-run too")
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="with --survivors-of: re-run only the mutants whose name holds "
                        "TEXT (repeatable, e.g. 'ǁTanhǁ'); the others keep their verdicts")
    parser.add_argument("--rerun", action="append", default=[], metavar="STATUS",
                        help="with --survivors-of: re-run the mutants of this verdict too "
                        "(repeatable, e.g. 'timeout' after a run on a loaded machine)")
    args = parser.parse_args(argv)
    if args.only and args.survivors_of is None:
        parser.error("--only narrows a --survivors-of re-run: give --survivors-of JSON")
    modules = args.modules or list(SUITES[args.suite][0])
    tests = args.tests or list(SUITES[args.suite][1])
    args.work = args.work.resolve()  # mutmut runs in the copy: paths must not be relative
    args.work.mkdir(parents=True, exist_ok=True)
    bin_dir = mutmut_venv(args.work)
    copy = repository_copy(args.work, modules, tests,
                           "repo" if args.modules or args.suite == "budget" else args.suite)
    earlier = json.loads(args.survivors_of.read_text())["statuses"] if args.survivors_of else {}
    again = sorted(k for k, s in earlier.items() if (s in RERUN or s in args.rerun)
                   and (not args.only or any(text in k for text in args.only)))
    if again or not earlier:
        subprocess.run([bin_dir / "mutmut", "run", "--max-children", str(args.max_children),
                        *again], cwd=copy, check=False)
    now = results(bin_dir, copy)
    statuses = {**earlier, **{k: now.get(k, "not checked") for k in again}} if earlier else now
    survivors = sorted(k for k, s in statuses.items() if s == "survived")
    diffs = {k: subprocess.run([bin_dir / "mutmut", "show", k], cwd=copy, text=True,
                               capture_output=True).stdout for k in survivors}
    table = score(statuses)
    for module, row in table.items():
        print(f"{module}: {row.get('killed', 0)} killed, {row.get('survived', 0)} survived, "
              f"score {row['score']}  {dict(row)}")
    for key in survivors:
        print(f"--- survived: {key}\n{diffs[key]}")
    if args.out is not None:
        args.out.write_text(json.dumps({"modules": modules, "tests": tests, "scores": table,
                                        "statuses": statuses, "survivors": diffs},
                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
