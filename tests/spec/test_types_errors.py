"""One exception root: every exception class resverify defines derives from ResverifyError,
and resverify's own code raises no bare ValueError, TypeError, ArithmeticError or
RuntimeError (each error it raises says what it means: :mod:`resverify.spec.errors`).

The package is read as source (:mod:`ast`), not imported, so the check covers modules whose
optional libraries (torch, jax, tensorflow, ...) are absent and costs no import time. Each
checker is also run on a small made-up module, to show it finds what it looks for.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest

import resverify
from resverify.properties import plugin
from resverify.spec import errors

PACKAGE = Path(resverify.__file__).parent
ROOT = "ResverifyError"
OUTSIDE_THE_ROOT = {
    "ExampleTimeout": "a BaseException, so Hypothesis does not catch a test out of time",
    "Interrupted": "a KeyboardInterrupt: SIGTERM ends a run the way Ctrl-C does",
}
"""Exception classes that must not derive from the root, each with its reason (documented
in :mod:`resverify.spec.errors`)."""
BARE = ("ValueError", "TypeError", "ArithmeticError", "RuntimeError")


def package_sources() -> Iterator[tuple[str, str]]:
    """``(path relative to the package, source)`` of every module of resverify except tests
    (``test_*.py``, the property test modules included)."""
    for sub in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for path in sorted(sub.resolve().rglob("*.py")):
            if not path.name.startswith("test_"):
                yield f"{sub.name}/{path.relative_to(sub.resolve())}", path.read_text("utf-8")
    yield "__init__.py", (PACKAGE / "__init__.py").read_text("utf-8")


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    return base.attr if isinstance(base, ast.Attribute) else None


def class_bases(sources: dict[str, str]) -> dict[str, tuple[str, list[str]]]:
    """Every class defined in ``sources``: name -> (where, the names of its bases)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for where, text in sources.items():
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.ClassDef):
                names = [n for n in map(_base_name, node.bases) if n is not None]
                found[node.name] = (f"{where}:{node.lineno}", names)
    return found


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _ancestors(name: str, classes: dict[str, tuple[str, list[str]]]) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        current = todo.pop()
        for base in classes.get(current, ("", []))[1]:
            if base not in seen:
                seen.add(base)
                todo.append(base)
    return seen


def exceptions_outside_the_root(sources: dict[str, str]) -> dict[str, str]:
    """Exception classes (those with a builtin exception, or a name ending in ``Error`` or
    ``Exception``, among their ancestors) that do not derive from :data:`ROOT`."""
    classes = class_bases(sources)
    outside = {}
    for name, (where, _) in classes.items():
        ancestors = _ancestors(name, classes)
        is_exception = any(_is_builtin_exception(a) or a.endswith(("Error", "Exception"))
                           for a in ancestors)
        if is_exception and name != ROOT and ROOT not in ancestors:
            outside[name] = where
    return outside


def bare_raises(sources: dict[str, str]) -> list[str]:
    """``where: raise Name(`` for every raise of one of :data:`BARE`."""
    found = []
    for where, text in sources.items():
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if _base_name(raised) in BARE:
                    found.append(f"{where}:{node.lineno}: raise {_base_name(raised)}")
    return found


SOURCES = dict(package_sources())


def test_the_package_is_read_whole() -> None:
    """The reader sees the four packages and the classes the tree names."""
    assert {where.split("/")[0] for where in SOURCES} >= {"spec", "impl", "properties",
                                                          "reports", "__init__.py"}
    classes = class_bases(SOURCES)
    for name in ("ResverifyError", "InvalidRequest", "BadResult", "PropertyFailure",
                 "NotClaimed", *OUTSIDE_THE_ROOT):
        assert name in classes, f"{name} not found in {PACKAGE}"


def test_every_exception_class_derives_from_resverify_error() -> None:
    outside = exceptions_outside_the_root(SOURCES)
    unexplained = {k: v for k, v in outside.items() if k not in OUTSIDE_THE_ROOT}
    assert not unexplained, (
        f"exception classes outside {ROOT}: {unexplained}; derive them from "
        "resverify.spec.errors.ResverifyError (and the builtin they resemble)")
    assert set(outside) == set(OUTSIDE_THE_ROOT), f"no longer outside: {OUTSIDE_THE_ROOT}"


def test_no_bare_builtin_error_is_raised() -> None:
    found = bare_raises(SOURCES)
    assert not found, f"raise a typed resverify error instead (spec/errors.py): {found}"


def test_the_checkers_find_what_they_look_for() -> None:
    made_up = {"m.py": "class ResverifyError(Exception): ...\n"
                       "class Fine(ResverifyError, ValueError): ...\n"
                       "class Oops(ValueError): ...\n"
                       "class Signal(Exception): ...\n"
                       "class Derived(Oops): ...\n"
                       "class Plain: ...\n"
                       "def f():\n    raise ValueError('x')\n"
                       "def g():\n    raise Fine('y')\n"
                       "def h():\n    raise RuntimeError\n"}
    assert exceptions_outside_the_root(made_up) == {"Oops": "m.py:3", "Signal": "m.py:4",
                                                    "Derived": "m.py:5"}
    assert bare_raises(made_up) == ["m.py:8: raise ValueError", "m.py:12: raise RuntimeError"]


@pytest.mark.parametrize(("name", "builtin"), [
    ("UsageError", ValueError), ("InvalidInput", ValueError), ("InvalidProgram", ValueError),
    ("InvalidRequest", ValueError), ("InvalidDocument", ValueError),
    ("ShapeMismatch", ValueError), ("BackendFault", RuntimeError), ("BadResult", RuntimeError),
])
def test_each_error_has_the_root_and_its_builtin(name: str, builtin: type) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.ResverifyError) and issubclass(cls, builtin), cls.__mro__


def test_the_timeout_stays_a_base_exception_outside_the_root() -> None:
    assert issubclass(plugin.ExampleTimeout, BaseException)
    assert not issubclass(plugin.ExampleTimeout, Exception), "Hypothesis would catch it"
