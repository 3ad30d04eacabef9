"""The project's promises about itself: two Quick start commands, CI runs the test one."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```[^\n]*\n(.*?)```", section, re.S)
    assert block, "README's Quick start has no fenced code block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_holds_exactly_two_commands() -> None:
    commands = quick_start_commands()
    assert len(commands) == 2, f"Quick start block has {commands}, expected two commands"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_command = quick_start_commands()[1]
    script = (ROOT / ".ci" / "run").read_text()
    lines = [line.strip() for line in script.splitlines()]
    runnable = [line for line in lines if line and not line.startswith("#")]
    assert test_command in runnable, (
        f".ci/run lines {runnable} do not include the README test command {test_command!r}"
    )
    assert "set -euo pipefail" in runnable or "set -e" in runnable, ".ci/run must stop on failure"


def test_make_targets_of_the_quick_start_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for command in quick_start_commands():
        words = shlex.split(command)
        if words[0] == "make":
            assert re.search(rf"^{words[1]}:", makefile, re.M), f"no make target {words[1]}"


def test_pinned_constraints_cover_every_runtime_dependency() -> None:
    pins = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    }
    for name in ("numpy", "sympy", "mpmath", "hypothesis", "pytest"):
        assert name in pins, f"{name} is not pinned in constraints.txt"



def test_lint_keeps_the_complexity_gate_and_types_the_tools() -> None:
    """``make lint`` (ruff check ., mypy) fails on a function above complexity 12 and
    type-checks the tools beside the packages and the tests."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    assert "C90" in lint["select"], lint["select"]
    assert lint["mccabe"]["max-complexity"] <= 12, lint["mccabe"]
    assert "tools" in config["tool"]["mypy"]["files"], config["tool"]["mypy"]["files"]
