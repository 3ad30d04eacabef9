"""``resverify --help`` starts light: none of the heavy libraries is imported for it.

Checked in a fresh interpreter (a subprocess), since this test process has them all.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("sympy", "torch", "jax", "tensorflow", "matplotlib")

PROBE = f"""
import contextlib, io, sys
from resverify.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
assert code == 0 and "resverify" in out.getvalue(), (code, out.getvalue())
print(" ".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def heavy_imports(*argv: str) -> list[str]:
    """The heavy libraries a fresh interpreter has imported after ``resverify ARGV``."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_help_imports_no_heavy_library() -> None:
    found = heavy_imports("--help")
    assert found == [], f"resverify --help imported {found}, but should import none of {HEAVY}"
