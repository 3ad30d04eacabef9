"""A mistyped backend name is one line that says how to fix it: a close built-in name is
suggested, a bare module is told to name its ``:attr``, and an import failure names the
working folder it searched and the exception."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resverify.impl import resolve_backend
from resverify.spec import UsageError

REPO = Path(__file__).resolve().parents[2]
REQUEST = "examples/request.json"


def usage_error(name: str) -> str:
    with pytest.raises(UsageError) as caught:
        resolve_backend(name)
    message = str(caught.value)
    assert "\n" not in message, f"{name}: a message of several lines: {message!r}"
    return message


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "resverify"), *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False, env=dict(os.environ, PYTHONPATH=""))


@pytest.mark.parametrize(("typed", "meant"), [("nunpy", "numpy"), ("torhc", "torch"),
                                              ("jax_jit", "jax-jit"), ("Numpy", "numpy")])
def test_a_misspelt_backend_name_suggests_the_close_builtin(typed: str, meant: str) -> None:
    message = usage_error(typed)
    assert f"did you mean '{meant}'?" in message, \
        f"{typed}: message {message!r}, expected it to suggest {meant!r}"
    assert message.startswith(f"unknown backend '{typed}'"), message


def test_a_name_close_to_nothing_gets_no_suggestion() -> None:
    message = usage_error("frobnicate")
    assert "did you mean" not in message and "module:attr" in message, message


def test_a_module_without_an_attribute_is_told_to_name_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    message = usage_error("examples.toy_adapter")
    expected = "write examples.toy_adapter:ClassName"
    assert "has no ':attr'" in message and expected in message, \
        f"message {message!r}, expected it to say {expected!r}"


def test_a_module_that_cannot_be_found_names_the_working_folder_searched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    message = usage_error("no_such_adapter_module:Backend")
    assert f"working folder {tmp_path}" in message, \
        f"message {message!r}, expected it to name the working folder {tmp_path}"
    assert "ModuleNotFoundError: No module named 'no_such_adapter_module'" in message, message


def test_a_module_that_raises_on_import_names_its_file_and_the_exception(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("1 / 0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    message = usage_error("explodes_on_import:Backend")
    assert "ZeroDivisionError: division by zero" in message, message
    assert str(tmp_path / "explodes_on_import.py") in message, \
        f"message {message!r}, expected the file that failed"


def test_a_misspelt_attribute_suggests_the_close_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    message = usage_error("examples.toy_adapter:ToyBackends")
    assert "did you mean 'ToyBackend'?" in message, message


@pytest.mark.parametrize(("backend", "says"), [
    ("nunpy", "did you mean 'numpy'?"),
    ("examples.toy_adapter", "write examples.toy_adapter:ClassName"),
    ("no_such_adapter_module:Backend", f"working folder {REPO}"),
])
def test_resverify_run_with_a_bad_backend_is_one_line_and_exit_2(backend: str, says: str) -> None:
    done = cli("run", REQUEST, "--backend", backend)
    assert done.returncode == 2, f"exit {done.returncode}, expected 2: {done.stderr}"
    assert done.stderr.startswith("resverify: error: ") and done.stderr.count("\n") == 1, \
        done.stderr
    assert says in done.stderr, f"stderr {done.stderr!r}, expected {says!r}"
    assert done.stdout == "", done.stdout
