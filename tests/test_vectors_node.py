"""docs/vectors.md's consumer in another language: engines/node/run_corpus.mjs, a float64
engine in JavaScript, runs an exported corpus in its own test run (TAP output) without
Python, passes it, and fails it when its deliberate bug is planted (--bug)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from resverify.reports import corpus

ROOT = Path(__file__).resolve().parents[1]
CONSUMER = ROOT / "engines" / "node" / "run_corpus.mjs"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    corpus.export(out, ["op_", "seed_fixture", "shared_operand", "rejects_every_shape",
                        "forward_and_gradients", "_stack_gradient"])
    return out


def _consume(folder: Path, *flags: str) -> tuple[int, list[str]]:
    assert NODE is not None
    done = subprocess.run([NODE, str(CONSUMER), str(folder), *flags], capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, done.stdout.splitlines()


def test_node_engine_passes_every_entry_it_claims(folder: Path) -> None:
    code, lines = _consume(folder)
    failed = [line for line in lines if line.startswith("not ok")]
    assert code == 0 and not failed, (code, failed[:5])
    ran = [line for line in lines if line.startswith("ok") and "# SKIP" not in line]
    assert len(ran) >= 40, len(ran)
    assert any("op_tanh" in line for line in ran) and any("error" in line or "mismatch" in line
                                                          for line in ran), ran


def test_node_engine_with_its_planted_bug_fails_the_merges_gradient(folder: Path) -> None:
    code, lines = _consume(folder, "--bug")
    failed = [line for line in lines if line.startswith("not ok")]
    assert code == 1, code
    assert any("op_residual_add" in line and "grads[a]" in line for line in failed), failed
    assert any("seed_fixture_S06" in line for line in failed), failed
    assert not any("op_mul" in line or "op_linear" in line for line in failed), failed
