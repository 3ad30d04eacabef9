"""What ``make verify`` prints while it installs: one line saying what is installed and
about how long it takes, and no setuptools warning about the ``resverify/`` link folder."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
WARNING = "Editable installation."
"""How setuptools' warning begins (pip shows it as a BuildBackendWarning): 'Please be
careful with folders in your working directory with the same name as your package'."""


def _recipe(target: str) -> list[str]:
    """The recipe lines of ``target`` (tabs and make's ``@`` dropped)."""
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert match, f"no recipe for {target} in the Makefile"
    return [line[1:].lstrip("@") for line in match.group(1).splitlines()]


def _filter() -> str:
    """The PYTHONWARNINGS value the Makefile installs under."""
    match = re.search(r'^QUIET_INSTALL\s*:?=\s*PYTHONWARNINGS="([^"]+)"', MAKEFILE, re.M)
    assert match, "the Makefile defines no QUIET_INSTALL with a PYTHONWARNINGS filter"
    return match.group(1)


def test_install_says_first_what_it_installs_and_about_how_long_it_takes() -> None:
    first = _recipe("$(STAMP)")[0]
    assert first.startswith("echo "), f"the install's first line {first!r} prints nothing"
    said = " ".join(shlex.split(first)[1:])
    assert "constraints.txt" in said and "$(VENV)" in said, said
    assert re.search(r"\d+\s*(s|seconds|minutes?)\b", said), f"no duration in {said!r}"


@pytest.mark.parametrize("target", ["$(STAMP)", "backends"])
def test_every_editable_install_runs_with_the_warning_filtered(target: str) -> None:
    installs = [line for line in _recipe(target) if "pip install" in line and " -e " in line]
    assert installs, f"{target} has no editable install"
    for line in installs:
        assert line.startswith("$(QUIET_INSTALL) "), f"{line!r} runs without $(QUIET_INSTALL)"


def _editable_build(tmp_path: Path, warnings: str | None) -> str:
    """setuptools' editable build of this checkout's HEAD, called the way pip calls it (its
    ``build_editable`` hook, in a process of its own) but installing nothing anywhere; what
    it printed to stderr, where pip picks its warnings up."""
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if warnings is not None:
        env["PYTHONWARNINGS"] = warnings
    hook = f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path)!r})"
    done = subprocess.run([sys.executable, "-c", hook], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr


def test_makefiles_filter_silences_the_editable_install_warning_and_only_with_it(
        tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="the editable install needs setuptools here")
    plain = _editable_build(tmp_path / "plain", None)
    assert WARNING in plain, f"setuptools no longer warns; the filter may go: {plain[-2000:]!r}"
    quiet = _editable_build(tmp_path / "quiet", _filter())
    assert WARNING not in quiet and "Warning" not in quiet, (
        f"the filtered build still warned: {quiet[-2000:]!r}")


def _blocks_extras() -> tuple[str, list[str]]:
    """The pip line of ``make blocks`` and the extras it installs."""
    (line,) = [line for line in _recipe("blocks") if "pip install" in line and " -e " in line]
    found = re.search(r"-e '\.\[([^\]]+)\]'", line)
    assert found, f"make blocks installs no extras of this checkout: {line!r}"
    return line, found.group(1).split(",")


def test_make_blocks_installs_torch_pinned_by_the_constraints() -> None:
    """Every block check drives torch: ``make blocks`` installs it, with the constraints that
    keep its CPU build (unconstrained, pip may pick a 5.8 GB CUDA build)."""
    line, extras = _blocks_extras()
    assert "torch" in extras and "-c constraints.txt" in line, \
        f"make blocks: {line!r}, expected the torch extra and -c constraints.txt"


DISTRIBUTIONS = {"torch": "torch", "blocks-hf": "transformers", "blocks-jax": "dm-haiku",
                 "blocks-xt": "x-transformers", "blocks-diffusers": "diffusers",
                 "blocks-torchtune": "torchtune", "blocks-litgpt": "litgpt"}


@pytest.mark.parametrize("doc", ["README.md", "docs/commands.md", "docs/blocks.md",
                                 "docs/blocks-install.md"])
def test_the_docs_say_what_make_blocks_installs(doc: str) -> None:
    """Each page that says what ``make blocks`` installs names each library it installs,
    in the same line (a row of a table, or the sentence that says it)."""
    _, extras = _blocks_extras()
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    first = next((i for i, line in enumerate(lines) if "make blocks`" in line
                  and ("install" in line or line.startswith("| `make blocks`"))), None)
    assert first is not None, f"{doc} never says what `make blocks` installs"
    end = first + 1 if lines[first].startswith("|") else \
        next((j for j in range(first, len(lines)) if not lines[j].strip()), len(lines))
    said = " ".join(lines[first:end])
    for extra in extras:
        name = DISTRIBUTIONS.get(extra, extra)
        assert name in said, f"{doc}: {said!r} does not name {name} ({extra})"
