"""docs/findings.md stays true: each replay command it prints names a saved vector that
still fails on that backend, and passes on the NumPy reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resverify.cli.main import main
from tests.installed import require_installed

REPO = Path(__file__).resolve().parents[2]
FINDINGS = REPO / "docs" / "findings.md"
REPLAY = re.compile(r"resverify replay (\S+\.json) --backend (\S+)")
COMMANDS = sorted(set(REPLAY.findall(FINDINGS.read_text())))


def test_findings_print_replay_commands() -> None:
    assert COMMANDS, f"no `resverify replay VECTOR --backend NAME` in {FINDINGS}"


@pytest.mark.parametrize(("vector", "backend"), COMMANDS)
def test_each_finding_still_fails_on_its_backend(
        vector: str, backend: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert (REPO / vector).is_file(), f"{vector} (cited in docs/findings.md) does not exist"
    require_installed(backend)
    monkeypatch.chdir(REPO)
    code = main(["replay", vector, "--backend", backend, "--runs", "1"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out, f"replay {vector} on {backend} exited {code}:\n{out}"


@pytest.mark.parametrize("vector", sorted({v for v, _ in COMMANDS}))
def test_each_finding_vector_passes_on_the_reference(
        vector: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    code = main(["replay", vector, "--backend", "numpy", "--runs", "1"])
    out = capsys.readouterr().out
    assert code == 0, f"replay {vector} on numpy exited {code}:\n{out}"
