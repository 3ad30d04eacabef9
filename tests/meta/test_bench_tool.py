"""``tools/bench.py`` (``make bench``) runs, prints its table and writes its JSON (timings not
asserted); its ``--help`` imports none of the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench import main

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench.py"
HEAVY = ("sympy", "torch", "jax", "tensorflow", "matplotlib")
PROBE = f"""
import contextlib, io, runpy, sys
sys.argv = [{str(TOOL)!r}, "--help"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        assert exc.code == 0 and "usage: tools/bench.py" in out.getvalue(), exc.code
print(" ".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def test_bench_quick_writes_every_row_of_the_chosen_sections(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = main(["--quick", "--only", "encoding", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["sections"] == ["encoding"]
    cases = [row["case"] for row in doc["rows"]]
    assert cases == ["write, 4096 float64", "read, 4096 float64", "round trip, 4096 float64"]
    for row in doc["rows"]:
        assert row["ratio"] == pytest.approx(row["baseline_s"] / row["candidate_s"]), row
        assert row["case"] in text
    assert "measured interleaved in this run" in text


def test_bench_refuses_an_unknown_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "encoding,warp"]) == 2
    assert "unknown section(s) ['warp']" in capsys.readouterr().err


def test_bench_help_imports_no_heavy_library() -> None:
    """In a fresh interpreter, run as a script (``python tools/bench.py --help``)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    found = done.stdout.split()
    assert found == [], f"tools/bench.py --help imported {found}, but should import none"
