"""``make lint`` holds on a fresh clone without torch, not only beside it.

Why a test: with torch missing, mypy (``ignore_missing_imports``) reads every torch name as
``Any``, so a ``# type: ignore[arg-type]`` that torch's stubs need becomes an unused ignore,
which ``warn_unused_ignores`` fails (eight of them once failed ``make lint`` on a fresh clone).
The test hides torch without a second install: a bare venv whose one ``.pth`` points at a
folder of links to every entry of this interpreter's site-packages but torch's, and mypy
asked to resolve imports as that interpreter would (``--python-executable``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ("torch", "functorch", "torchgen")


def _without_torch(tmp_path: Path) -> Path:
    """A Python that sees this environment's packages, torch's aside."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: plain `make lint` is already the check without it")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    links = tmp_path / "site"
    links.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.split("-")[0] not in HIDDEN and not entry.name.endswith(".pth"):
            (links / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "links.pth").write_text(f"{links}\n", encoding="utf-8")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('torch') is None, u.find_spec('numpy') is None)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.split() == ["True", "False"], f"torch hidden, numpy seen: {probe.stdout}"
    return python


def _mypy(python: Path, cache: Path, *files: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mypy", "--python-executable", str(python), "--cache-dir",
           str(cache), *files]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_mypy_is_clean_without_torch(tmp_path: Path) -> None:
    python = _without_torch(tmp_path)
    done = _mypy(python, tmp_path / "cache")
    assert done.returncode == 0, f"mypy without torch: exit {done.returncode}, expected 0:\n" \
        f"{done.stdout[-3000:]}"


@pytest.mark.slow
def test_the_check_without_torch_can_fail(tmp_path: Path) -> None:
    """An ignore that only torch's stubs need is reported unused once torch is hidden."""
    python = _without_torch(tmp_path)
    sample = tmp_path / "needs_torch.py"
    sample.write_text("import torch\n\nx: int = torch.zeros(1)  # type: ignore[assignment]\n",
                      encoding="utf-8")
    beside = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "a"),
                             "--warn-unused-ignores", str(sample)], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert beside.returncode == 0, f"with torch the ignore is needed: {beside.stdout}"
    done = _mypy(python, tmp_path / "b", "--warn-unused-ignores", "--ignore-missing-imports",
                 str(sample))
    assert done.returncode == 1 and 'Unused "type: ignore" comment' in done.stdout, \
        f"without torch: exit {done.returncode}, {done.stdout!r}, expected the unused ignore"
