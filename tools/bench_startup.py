"""Bench section ``startup``: ``resverify --help`` against ``python -c pass``.

Both run as fresh interpreters (subprocesses of this one), interleaved. The row is a cost:
how many times the bare interpreter's start-up the command's help takes. The listed heavy
libraries must not be imported for it (``tests/cli/test_main.py`` checks that).
"""

from __future__ import annotations

import subprocess
import sys

from tools.bench_timing import Row, interleaved

SECTION = "startup"
HELP = ("import contextlib, io; from resverify.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])")


def _python(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)


def rows(quick: bool = False) -> list[Row]:
    """One row: ``resverify --help`` in ``python -c pass`` times."""
    timing = interleaved({"pass": lambda: _python("pass"), "help": lambda: _python(HELP)},
                         rounds=2 if quick else 7, target=0.0)
    ratio = timing.seconds["help"] / timing.seconds["pass"]
    return [Row(SECTION, "resverify --help, fresh interpreter", "python -c pass",
                "resverify --help", timing.seconds["pass"], timing.seconds["help"], ratio,
                unit="x baseline",
                note="imports none of sympy, torch, jax, tensorflow, matplotlib "
                     "(tests/cli/test_main.py)")]
