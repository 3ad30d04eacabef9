"""Plug-in backends (an installed distribution names a backend in ``resverify.backends``),
and ``resverify backends``, which lists every backend without importing its library.

Each test installs a real (tiny) distribution the way pip leaves one on ``sys.path``: a
module and a ``*.dist-info`` folder with ``METADATA`` and ``entry_points.txt``, which
``importlib.metadata`` reads like any other.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from resverify.cli.main import main
from resverify.impl import Capabilities, NumpyBackend, resolve_backend
from resverify.impl.registry import BUILTINS, CORE_OPS, ENTRY_POINT_GROUP, WITH_NORMS, plugins
from resverify.spec import UsageError
from tests.installed import require_installed

ENGINE = '''
from resverify.impl import Capabilities, NumpyBackend

class PluggedBackend(NumpyBackend):
    name = "plugged"
    capabilities = Capabilities(dtypes=("float64",), ops=("add", "linear"))

def broken():
    raise RuntimeError("plug-in factory\\nfailed")
'''


def install_distribution(root: Path, entries: dict[str, str], module: str = ENGINE,
                         dist: str = "resverify_plugged_engine") -> None:
    """A distribution ``dist`` 1.2.3 on ``root`` with a module and these backend names."""
    (root / f"{dist}.py").write_text(module)
    info = root / f"{dist}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh folder on ``sys.path``; the plug-in module is forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("resverify_plugged_engine", None)


def test_the_built_in_claims_are_read_from_the_op_table() -> None:
    """A backend without norms claims every op that is not a norm; one with them, every op."""
    from resverify.spec.ops import OP_TABLE

    assert tuple(OP_TABLE) == WITH_NORMS, WITH_NORMS
    assert set(CORE_OPS) == {n for n, op in OP_TABLE.items() if not op.norm}, CORE_OPS
    assert set(WITH_NORMS) - set(CORE_OPS) == {"layer_norm", "rms_norm"}, CORE_OPS


def test_an_installed_distribution_registers_a_backend_name(site: Path) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:PluggedBackend"})
    assert "plugged" in plugins(), sorted(plugins())
    backend = resolve_backend("plugged")
    assert backend.name == "plugged" and isinstance(backend, NumpyBackend), backend
    assert backend.capabilities == Capabilities(dtypes=("float64",), ops=("add", "linear"))


def test_without_the_distribution_the_name_is_unknown() -> None:
    assert "plugged" not in plugins()
    with pytest.raises(UsageError, match="unknown backend 'plugged'"):
        resolve_backend("plugged")


def test_a_plugin_that_fails_to_import_is_a_one_line_usage_error(site: Path) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:PluggedBackend"},
                         module="raise ImportError('needs\\nlibfoo.so')\n")
    with pytest.raises(UsageError, match="cannot load plug-in backend 'plugged'") as info:
        resolve_backend("plugged")
    message = str(info.value)
    assert "resverify_plugged_engine" in message and "needs libfoo.so" in message, message
    assert "\n" not in message, message


def test_a_plugin_factory_that_raises_is_a_one_line_usage_error(site: Path) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:broken"})
    with pytest.raises(UsageError, match="plug-in factory failed") as info:
        resolve_backend("plugged")
    assert "\n" not in str(info.value)


def test_a_plugin_naming_something_that_is_not_a_backend_is_refused(site: Path) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:ENGINE_NAME"},
                         module="ENGINE_NAME = 'not a backend'\n")
    with pytest.raises(UsageError, match="'plugged' is not a backend"):
        resolve_backend("plugged")


def test_a_plugin_cannot_take_a_builtin_name(site: Path) -> None:
    install_distribution(site, {"numpy": "resverify_plugged_engine:PluggedBackend"})
    assert "numpy" in plugins()
    assert resolve_backend("numpy").name == "numpy"


SLOW_IMPORTS = {"tensorflow"}  # about ten seconds to import


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_IMPORTS else [])
    for n in sorted(BUILTINS)])
def test_builtin_listing_declares_the_adapters_own_capabilities(name: str) -> None:
    """The capabilities ``resverify backends`` lists without importing a library are the
    ones the adapter declares once made."""
    builtin = BUILTINS[name]
    require_installed(name)
    if name == "torch-cuda" and not _cuda():
        pytest.skip("needs a CUDA device")
    backend = resolve_backend(name)
    assert backend.capabilities == builtin.capabilities, (
        f"{name}: adapter declares {backend.capabilities}, listing says {builtin.capabilities}")


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def listing(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert main(["backends", "--json"]) == 0
    return {row["name"]: row for row in json.loads(capsys.readouterr().out)}


def test_every_builtin_is_listed_with_its_claims_and_install_state(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = listing(capsys)
    assert set(BUILTINS) <= set(rows), sorted(rows)
    numpy = rows["numpy"]
    assert numpy["installed"] is True and numpy["version"] == np.__version__, numpy
    assert numpy["dtypes"] == ["float64", "float32", "float16"], numpy
    for name, row in rows.items():
        if row["kind"] != "built-in":
            continue
        found = importlib.util.find_spec(BUILTINS[name].module) is not None
        assert row["installed"] is (found and BUILTINS[name].missing() is None), row
        assert row["dtypes"] == list(BUILTINS[name].capabilities.dtypes), row
        assert row["modes"] == list(BUILTINS[name].capabilities.modes), row


def test_an_installed_plugin_is_listed_with_its_distribution_and_claims(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:PluggedBackend"})
    row = listing(capsys)["plugged"]
    assert row["kind"] == "plug-in" and row["library"] == "resverify_plugged_engine", row
    assert row["version"] == "1.2.3" and row["installed"] is True, row
    assert row["dtypes"] == ["float64"] and row["ops"] == ["add", "linear"], row
    assert row["modes"] == ["vjp"], row  # claims no forward mode, so none is listed


def test_a_broken_plugin_is_listed_as_not_installed_with_the_reason(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:PluggedBackend"},
                         module="raise ImportError('needs libfoo.so')\n")
    row = listing(capsys)["plugged"]
    assert row["installed"] is False and "needs libfoo.so" in str(row["note"]), row


def test_a_plugin_with_a_builtin_name_is_listed_as_shadowed(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_distribution(site, {"numpy": "resverify_plugged_engine:PluggedBackend"})
    assert main(["backends"]) == 0
    text = capsys.readouterr().out
    assert "numpy: shadowed by the built-in 'numpy'" in text, text
    assert text.splitlines()[0].split() == ["name", "kind", "library", "version", "installed",
                                            "device", "dtypes", "ops", "modes"], text


def test_listing_imports_no_array_library() -> None:
    code = ("import sys; from resverify.cli.main import main; main(['backends']); "
            "heavy = {'torch', 'jax', 'tensorflow', 'tinygrad', 'pytensor', 'autograd'}; "
            "print(sorted(heavy & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def test_names_lists_only_installed_backends_on_the_device(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_distribution(site, {"plugged": "resverify_plugged_engine:PluggedBackend",
                                "numpy": "resverify_plugged_engine:PluggedBackend"})
    assert main(["backends", "--names", "--device", "cpu"]) == 0
    names = capsys.readouterr().out.split()
    expected = [n for n, b in BUILTINS.items()
                if b.missing() is None and b.capabilities.device == "cpu"] + ["plugged"]
    assert names == expected, f"--names printed {names}, but should print {expected}"
    assert main(["backends", "--names", "--device", "cuda"]) == 0
    assert "numpy" not in capsys.readouterr().out.split()
