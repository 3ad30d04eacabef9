"""tools/gpu-check.sh, the one command a session with a lent CUDA machine runs (issue 27), is
tested here on the CPU through its dry run: the CPU backends stand in for the GPU variants,
and the summary must carry one row per step with the counts of each variant's report.json.
GPU time is short, so a plumbing bug found on the GPU machine costs a rerun it may not have."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gpu-check.sh"
ONE_TEST = "residual_stack_gradient_is_one_plus_a_to_the_depth and float64"
DRY_VARIANTS = ("cpu-torch", "cpu-torch-tf32", "cpu-jax", "cpu-jax-highest")


def _run(out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("OUT", None)
    env.pop("RESVERIFY_GPU_CHECK_CPU", None)
    return subprocess.run(["bash", str(TOOL), "--dry-run", "--out", str(out), "-n", "0",
                           "--no-claims", "--select", ONE_TEST, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _rows(summary: Path) -> dict[str, list[str]]:
    """The summary's table rows by step name (cells unescaped, header and rule left out)."""
    rows: dict[str, list[str]] = {}
    for line in summary.read_text().splitlines():
        if not line.startswith("| ") or line.startswith(("| step ", "| ---")):
            continue
        cells = [c.strip().replace("\\|", "|")
                 for c in line.strip("|").replace("\\|", "\x00").split("|")]
        cells = [c.replace("\x00", "|") for c in cells]
        rows[cells[0]] = cells
    return rows


def _report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_the_script_parses_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(TOOL)], check=True)
    if shutil.which("shellcheck") is not None:
        done = subprocess.run(["shellcheck", str(TOOL)], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stdout


def test_an_unknown_option_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "--no-such-option", timeout=60)
    assert done.returncode == 2
    assert "unknown option --no-such-option" in done.stderr


@pytest.mark.slow
def test_the_dry_run_writes_a_row_per_variant_with_the_counts_of_its_report(
        tmp_path: Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = tmp_path / "summary.md"
    assert summary.read_text().startswith("# gpu-check summary (dry run: CPU backends)")
    rows = _rows(summary)
    assert list(rows) == ["install", "env", *DRY_VARIANTS]
    assert "torch" in (tmp_path / "env.txt").read_text()
    for name in DRY_VARIANTS:
        report = _report(tmp_path / name / "report.json")
        counts = report["summary"]["properties"]
        step, rc, seconds, passed, failed, skipped, _settings, _ = rows[name]
        assert step == name
        assert rc == f"0 ({report['status']})"
        assert int(seconds) >= 0
        assert (int(passed), int(failed), int(skipped)) == (
            counts["pass"], counts["fail"], counts["skipped"])
        assert counts["pass"] == 1, counts
        assert report["run"]["pytest_args"] == ["-k", ONE_TEST]
        assert report["run"]["profile"] == "ci"
    # each variant's environment reached the backend: its report's about shows the setting
    assert "jax_default_matmul_precision=default" in rows["cpu-jax"][6]
    assert "jax_default_matmul_precision=highest" in rows["cpu-jax-highest"][6]
    assert "cuda.matmul.allow_tf32=False" in rows["cpu-torch"][6]
    assert "cuda.matmul.allow_tf32=True" in rows["cpu-torch-tf32"][6]


@pytest.mark.slow
def test_a_failure_and_a_timeout_each_get_their_row(tmp_path: Path) -> None:
    done = _run(tmp_path, "--variant", "bad|tests.mutants:AlphaSquared||a mutant|300",
                "--variant", "slow|tests.hostile_backends:Sleeps||cut short|8")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _rows(tmp_path / "summary.md")
    assert list(rows) == ["install", "env", "bad", "slow"]

    bad = _report(tmp_path / "bad" / "report.json")
    failed = [e for e in bad["properties"] if e["status"] == "fail"]
    assert rows["bad"][1] == "1 (fail)"
    assert rows["bad"][4] == str(bad["summary"]["properties"]["fail"]) == "1"
    first = rows["bad"][7]
    assert first.startswith(failed[0]["id"])
    assert "bad/vectors/" in first and "(1+a)^L" in first

    # cut short by SIGINT: resverify still wrote its (incomplete) report
    assert rows["slow"][1].startswith("124")
    assert rows["slow"][7].startswith("TIMED OUT after 8s")
    assert _report(tmp_path / "slow" / "report.json")["complete"] is False


def test_a_variant_past_the_budget_is_skipped_and_still_gets_its_row(tmp_path: Path) -> None:
    done = _run(tmp_path, "--budget", "1", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _rows(tmp_path / "summary.md")
    assert list(rows) == ["install", "env", *DRY_VARIANTS]
    for name in DRY_VARIANTS:
        assert rows[name][1] == "skipped"
        assert "budget 1s" in rows[name][7]
        assert not (tmp_path / name).exists()
