"""Bench section ``suite``: where a ``resverify check`` run spends its time, per backend.

Two kinds of rows, every one against the NumPy reference measured in the same run:

* per call: one small request (the seed's residual block with a linear branch, float64)
  run again and again on each backend: an adapter's fixed cost per call (torch's op
  dispatch, jax's eager dispatch or re-tracing, a process round trip over ``cmd:``), which
  a property suite of thousands of tiny examples pays on every example;
* whole runs (``--only suite``, minutes each): ``resverify check`` with the ``ci`` profile
  on numpy, torch, jax and one ``cmd:`` engine (the C engine of ``engines/c`` when a C
  compiler is found, else ``python -m resverify.impl.serve numpy``), and on numpy with
  ``-n 2`` against ``-n 0``. Runs are sequential, in the order listed, one each.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.bench_timing import Row, interleaved, skipped

SECTION = "suite"
TARGET_BACKEND, TARGET_PARALLEL = 2.0, 1.6
SERVE = f"{shlex.quote(sys.executable)} -m resverify.impl.serve numpy"


def _c_engine(folder: Path) -> str | None:
    """Build engines/c (when a C compiler and the source are here) and return its path."""
    source = Path(__file__).resolve().parents[1] / "engines" / "c" / "resverify_engine.c"
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or not source.exists():
        return None
    binary = folder / "resverify-engine"
    subprocess.run([compiler, "-O2", "-std=c11", "-o", str(binary), str(source), "-lm"],
                   check=True, capture_output=True, timeout=120)
    return str(binary)


def _backends(folder: Path) -> dict[str, str]:
    from resverify.impl.registry import BUILTINS

    names: dict[str, str] = {n: n for n in ("numpy", "torch", "jax", "jax-jit", "autograd")
                             if n in BUILTINS and BUILTINS[n].missing() is None}
    engine = _c_engine(folder)
    if engine is not None:
        names["cmd: C engine"] = f"cmd:{engine}"
    names["cmd: serve numpy"] = f"cmd:{SERVE}"
    return names


def _per_call(names: dict[str, str], quick: bool) -> list[Row]:
    from resverify.impl import resolve_backend
    from resverify.spec.fixtures import linear_block_request

    request = linear_block_request()
    backends = {label: resolve_backend(name) for label, name in names.items()}
    fns: dict[str, Callable[[], object]] = {
        label: functools.partial(b.run, request) for label, b in backends.items()}
    try:
        timing = interleaved(fns, rounds=3 if quick else 7)
    finally:
        for backend in backends.values():
            close = getattr(backend, "close", None)
            if callable(close):
                close()
    base = timing.seconds["numpy"]
    return [Row(SECTION, f"one small request on {label}", "numpy", label, base,
                timing.seconds[label], timing.seconds[label] / base, unit="x baseline")
            for label in names if label != "numpy"]


def _check(backend: str, folder: Path, workers: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "resverify.cli.main", "check", "--backend",
                    backend, "--profile", "ci", "--no-claims", "-n", workers,
                    "--report-dir", str(folder / "report")],
                   capture_output=True, timeout=3600, check=False)
    return time.perf_counter() - started


WHOLE = ("numpy", "torch", "jax", "cmd: C engine", "cmd: serve numpy")
"""Backends whose whole ``check`` run is timed (each takes minutes on a loaded machine)."""


def _whole_runs(names: dict[str, str], folder: Path) -> list[Row]:
    chosen = {label: name for label, name in names.items() if label in WHOLE}
    if "cmd: C engine" in chosen:
        chosen.pop("cmd: serve numpy", None)  # one cmd: engine is enough
    runs = {label: _check(name, folder, "0") for label, name in chosen.items()}
    runs["numpy -n 2"] = _check("numpy", folder, "2")
    base = runs["numpy"]
    out = [Row(SECTION, f"check --profile ci on {label}", "numpy", label, base, seconds,
               seconds / base, f"<= {TARGET_BACKEND:g}x baseline",
               seconds / base <= TARGET_BACKEND, unit="x baseline",
               note="one run each, sequential: -n 0, claims off")
           for label, seconds in runs.items() if label not in ("numpy", "numpy -n 2")]
    ratio = base / runs["numpy -n 2"]
    out.append(Row(SECTION, "check --profile ci on numpy, -n 2", "-n 0", "-n 2", base,
                   runs["numpy -n 2"], ratio, f">= {TARGET_PARALLEL:g}x faster",
                   ratio >= TARGET_PARALLEL, note="on this machine's cores, as loaded"))
    return out


def rows(quick: bool = False) -> list[Row]:
    """Per-call rows always; whole ``check`` runs unless ``quick``."""
    with tempfile.TemporaryDirectory() as tmp:
        names = _backends(Path(tmp))
        out = _per_call(names, quick)
        if quick:
            out.append(skipped(SECTION, "whole check runs", "--quick"))
        else:
            out += _whole_runs(names, Path(tmp))
    return out
