"""Zero flakes, measured: the whole property suite on a correct backend under N seeds.

A conformance suite that fails on a correct engine now and then is ignored. This runs
the suite (``ci`` profile: 25 examples a test, never derandomized) against each backend
given under N distinct Hypothesis seeds, one child pytest per (backend, seed), ``-j`` at a
time, and counts the failing tests. The statistical properties (the chi-square checks of
``properties/laws_variance.py``) state a false-alarm probability of at most 1e-9 per
example (``properties/stats.py``); the summary sets their observed failure count beside
that bound and the number of examples they ran.

    .venv/bin/python tools/flakes.py --runs 200 --backend numpy --backend torch --backend jax

Exit 0 when no test failed, 1 otherwise; ``--out FILE`` writes the counts as JSON, with
the seeds each backend ran and the commit of the tree. A count of hundreds of runs takes
longer than one sitting on a small machine, so counts made in parts (disjoint seeds) add up:

    .venv/bin/python tools/flakes.py --combine part1.json part2.json --out flakes.json

sums them, refusing parts that ran the same (backend, seed) twice or that lack their seeds.

Eager JAX compiles one XLA executable per primitive and shape (about 70% of its suite run);
the JAX children share JAX's own persistent compilation cache (``--jax-cache DIR``,
default ``build/jax-compile-cache``; ``--jax-cache none`` for none; a
``JAX_COMPILATION_CACHE_DIR`` already set wins), so a shape compiled under one seed is
loaded, not compiled, under the next. The executables are the ones XLA compiles; only
the time changes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.* as a script

from resverify.cli.runner import Interrupted, pytest_command
from resverify.impl import resolve_backend
from resverify.properties import known_failures
from resverify.properties.stats import FALSE_ALARM
from resverify.reports.json_report import known_entries
from resverify.reports.verdicts import expecting
from resverify.spec.errors import ResverifyError
from tools.mutant_runs import Command, Job, run_children

# the properties whose verdict is a statistical test with a stated false-alarm bound
STATISTICAL = ("independent_updates_add_their_variances",
               "inverse_sqrt_depth_scaling_keeps_unit_variance",
               "branch_depending_on_input_breaks_naive_variance_sum",
               "pre_norm_stream_variance_grows_linearly_with_depth",
               "post_norm_block_keeps_stream_variance_constant_with_depth")


JAX_CACHE = Path(__file__).resolve().parents[1] / "build" / "jax-compile-cache"


def jax_cache_environment(backends: list[str], folder: Path | None,
                          environ: dict[str, str]) -> dict[str, str]:
    """The environment variables that give the JAX children (``jax``, ``jax-jit``) JAX's
    persistent compilation cache in ``folder``, every executable cached however quick its
    compile (eager JAX compiles one per primitive and shape, each in milliseconds); none
    when no JAX backend runs, ``folder`` is None, or the caller set a cache of their own."""
    if folder is None or "JAX_COMPILATION_CACHE_DIR" in environ or not any(
            b.split("-")[0] == "jax" for b in backends):
        return {}
    return {"JAX_COMPILATION_CACHE_DIR": str(folder),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def command(backend: str, seed: int, profile: str) -> Command:
    def make(folder: Path) -> list[str]:
        return pytest_command(report_log=folder / "report-log.jsonl", backends=[backend],
                              profile=profile, seed=seed, vector_dir=folder / "vectors",
                              timeout=600.0)
    return make


class Tally:
    """Counts over every run: runs, tests, examples and failures, by property."""

    def __init__(self, known: list[dict[str, Any]] | None = None) -> None:
        self.known = known or []
        self.runs: Counter[str] = Counter()
        self.incomplete: list[str] = []
        self.examples: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []
        self.expected: list[dict[str, Any]] = []
        self.run_seconds: dict[str, float] = {}
        self.seeds: dict[str, set[int]] = {}
        self.tests = 0

    def add(self, job: Job) -> None:
        backend, seed = job.key.rsplit("@", 1)
        self.runs[backend] += 1
        self.run_seconds[job.key] = round(job.seconds, 1)
        self.seeds.setdefault(backend, set()).add(int(seed))
        if not job.suite.finished:
            self.incomplete.append(f"{job.key}: pytest exit {job.suite.exitstatus}, "
                                   f"process exit {job.suite.returncode}")
        for result in job.suite.results:
            self.tests += 1
            prop = str(result["properties"].get("property", result["nodeid"]))
            self.examples[prop] += int(result["properties"].get("examples") or 0)
            if result["outcome"] == "failed":
                failure = {"backend": backend, "seed": int(seed), "test": result["nodeid"],
                           "message": result["message"]}
                entry = self._known(result["properties"])
                if entry is None:
                    self.failures.append(failure)
                else:
                    self.expected.append({**failure, "known_failure": entry})

    def _known(self, prop: dict[str, Any]) -> int | None:
        """The number of the known-failures entry that expects this failed test (the rule of
        ``resverify check --known-failures``: its backend, property, dtype and kind, the
        entry's vector still failing), or None."""
        entry = expecting(self.known, prop)
        return None if entry is None else int(entry["entry"])

    def statistics(self) -> dict[str, Any]:
        """The statistical properties' examples, failures and the false alarms the bound
        allows in expectation (examples · bound)."""
        examples = sum(self.examples[p] for p in STATISTICAL)
        failed = sum(any(p in f["test"] for p in STATISTICAL) for f in self.failures)
        return {"properties": list(STATISTICAL), "examples": examples, "failures": failed,
                "bound_per_example": float(FALSE_ALARM),
                "expected_at_most": float(examples * FALSE_ALARM),
                "observed_rate": failed / examples if examples else None,
                "rate_upper_95": (3 / examples) if examples and not failed else None}

    def merge(self, doc: dict[str, Any], name: str) -> None:
        """Adds the counts of a document written by ``--out``; its seeds must be new."""
        if "seeds" not in doc:
            raise ValueError(f"{name} lists no seeds (written before flakes.py recorded "
                             "them), so its runs cannot be shown disjoint from the others")
        for backend, seeds in doc["seeds"].items():
            repeated = self.seeds.setdefault(backend, set()) & set(seeds)
            if repeated:
                raise ValueError(f"{name} repeats {backend} seeds already counted: "
                                 f"{sorted(repeated)[:5]}")
            self.seeds[backend] |= set(seeds)
        self.runs.update(doc["runs"])
        self.tests += doc["tests"]
        self.examples.update(doc["examples_by_property"])
        self.failures += doc["failures"]
        self.expected += doc.get("expected", [])
        self.run_seconds.update(doc.get("run_seconds", {}))
        self.incomplete += doc["incomplete"]

    def document(self, seconds: float) -> dict[str, Any]:
        return {"runs": dict(self.runs), "tests": self.tests, "failures": self.failures,
                "expected": self.expected,
                "incomplete": self.incomplete, "examples": sum(self.examples.values()),
                "examples_by_property": dict(sorted(self.examples.items())),
                "statistical": self.statistics(), "seconds": round(seconds, 1),
                "seeds": {b: sorted(s) for b, s in sorted(self.seeds.items())},
                "run_seconds": self.run_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="seeds per backend (default 200)")
    parser.add_argument("--first-seed", type=int, default=1000,
                        help="seeds are first-seed .. first-seed + runs - 1 (default 1000)")
    parser.add_argument("--backend", action="append", dest="backends", metavar="NAME")
    parser.add_argument("--profile", default="ci")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="runs at once (default 2)")
    parser.add_argument("--out", type=Path, help="write the counts as JSON")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="JSON",
                        help="run nothing: add up counts written by --out in parts")
    parser.add_argument("--known-failures", type=Path, metavar="FILE",
                        help="a known-failures file (as `resverify check --known-failures`): a "
                             "failed test it expects is counted as expected, not failed")
    parser.add_argument("--jax-cache", default=str(JAX_CACHE), metavar="DIR",
                        help="JAX's persistent compilation cache for the JAX children "
                             "(default build/jax-compile-cache; 'none' for none)")
    args = parser.parse_args(argv)
    if args.combine:
        return _combine(args.combine, args.out, parser)
    if args.runs < 1 or args.jobs < 1:
        parser.error("--runs and --jobs need at least 1")
    backends = args.backends or ["numpy"]
    seeds = range(args.first_seed, args.first_seed + args.runs)
    jobs = [(f"{b}@{s}", command(b, s, args.profile)) for s in seeds for b in backends]
    cache = jax_cache_environment(backends, None if args.jax_cache == "none"
                                  else Path(args.jax_cache), dict(os.environ))
    os.environ.update(cache)  # the children inherit it
    try:
        known = _known_entries(args.known_failures, backends)
    except ResverifyError as exc:
        parser.error(str(exc))
    tally, began = Tally(known), time.monotonic()

    def done(job: Job) -> None:
        failed, expected = len(tally.failures), len(tally.expected)
        tally.add(job)
        print(f"{job.key}: {len(job.suite.results)} tests, {len(tally.failures) - failed} "
              f"failed, {len(tally.expected) - expected} expected (known failures), "
              f"{job.seconds:.0f}s", file=sys.stderr, flush=True)

    stopped = ""
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        run_children(jobs, args.jobs, done)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep the runs that finished
        stopped = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
    finally:
        signal.signal(signal.SIGTERM, previous)
    doc = tally.document(time.monotonic() - began)
    doc["commit"], doc["profile"] = _commit(), args.profile
    doc["jax_compilation_cache"] = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    doc["known_failures"] = known
    if stopped:
        doc["interrupted"] = stopped
        print(f"stopped by {stopped} after {sum(doc['runs'].values())} of {len(jobs)} runs; "
              "the counts below are of the finished runs", file=sys.stderr)
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    _summary(doc)
    fixed = [e for e in known if e["status"] == "fixed"]
    return 0 if not doc["failures"] and not doc["incomplete"] and not stopped and not fixed \
        else 1


def _known_entries(path: Path | None, backends: list[str]) -> list[dict[str, Any]]:
    """The entries of a known-failures file, each vector judged on its backend first (as
    ``resverify check`` does: an entry whose vector passes now is ``fixed``)."""
    if path is None:
        return []
    entries = known_entries(known_failures.judge_entries(
        known_failures.load(path), {b: resolve_backend(b) for b in backends}), Path.cwd())
    for entry in entries:
        print(f"known failure {entry['entry']} ({entry['backend']}, "
              f"{entry['property'] or entry['claim']}): {entry['status']}", file=sys.stderr)
    return entries


def _combine(paths: list[Path], out: Path | None, parser: argparse.ArgumentParser) -> int:
    tally, seconds, parts, profiles = Tally(), 0.0, [], set()
    for path in paths:
        try:
            doc = json.loads(path.read_text())
            tally.merge(doc, str(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"cannot add {path}: {exc}")
        profiles.add(doc.get("profile"))
        if len(profiles) > 1:
            parser.error(f"cannot add {path}: its profile {doc.get('profile')!r} differs "
                         "from the other parts'")
        seconds += doc["seconds"]
        parts.append({"file": str(path), "commit": doc.get("commit"), "runs": doc["runs"],
                      "interrupted": doc.get("interrupted")})
    combined = tally.document(seconds)
    combined["parts"], combined["profile"] = parts, profiles.pop()
    if out is not None:
        out.write_text(json.dumps(combined, indent=2) + "\n")
    _summary(combined)
    return 0 if not combined["failures"] and not combined["incomplete"] else 1


def _commit() -> str | None:
    """The commit of the tree that ran, so parts counted on different trees say so."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() or None


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _summary(doc: dict[str, Any]) -> None:
    stats = doc["statistical"]
    runs = ", ".join(f"{b} {n}" for b, n in doc["runs"].items())
    print(f"suite runs: {runs}; {doc['tests']} tests, {doc['examples']} examples, "
          f"{len(doc['failures'])} failed, {len(doc.get('expected', []))} expected "
          f"(known failures), {len(doc['incomplete'])} incomplete "
          f"({doc['seconds']:.0f}s)")
    print(f"statistical properties: {stats['failures']} failures in {stats['examples']} "
          f"examples; stated bound {stats['bound_per_example']:g} per example allows "
          f"{stats['expected_at_most']:.3g} in expectation; observed rate "
          f"{stats['observed_rate']}, 95% upper bound {stats['rate_upper_95']}")
    for failure in doc["failures"]:
        print(f"FAILED {failure['backend']} seed {failure['seed']}: {failure['test']}: "
              f"{failure['message'][:200]}")
    for failure in doc.get("expected", []):
        print(f"expected (known failure {failure['known_failure']}) {failure['backend']} seed "
              f"{failure['seed']}: {failure['test']}")


if __name__ == "__main__":
    sys.exit(main())
