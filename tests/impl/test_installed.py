"""The skip rule of :mod:`tests.installed`: a missing library skips an adapter test on a
developer's machine and fails it under CI=true, where every library is installed."""

from __future__ import annotations

import dataclasses

import pytest

from resverify.impl.registry import BUILTINS
from tests import installed

ABSENT = dataclasses.replace(BUILTINS["autograd"], name="absent",
                             module="resverify_test_no_such_library")


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch) -> str:
    """A built-in whose library is not installed anywhere."""
    monkeypatch.setitem(installed.BUILTINS, "absent", ABSENT)
    return "absent"


def test_missing_library_skips_outside_ci(absent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="resverify_test_no_such_library is not"):
        installed.installed_backend(absent)


def test_missing_library_is_no_skip_under_ci(absent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    installed.require_installed(absent)  # returns: the test goes on, and fails on its own


def test_installed_library_gives_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert installed.installed_backend("numpy").name == "numpy"


def test_backend_params_mark_only_the_slow_ones_slow() -> None:
    params = installed.backend_params(["torch", "tensorflow"], {"tensorflow"})
    marks = {p.values[0]: [m.name for m in p.marks] for p in params}
    assert marks == {"torch": [], "tensorflow": ["slow"]}, marks
