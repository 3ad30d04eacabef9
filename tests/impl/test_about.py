"""describe_backend says which library, version, device and numerics settings were checked."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shlex
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from resverify.impl import Capabilities, NumpyBackend, resolve_backend
from resverify.impl.about import describe_backend, distribution_version
from resverify.spec import Request, Result

COMMON = {"backend", "library", "version", "device"}


def needs(library: str) -> None:
    if importlib.util.find_spec(library) is None and os.environ.get("CI") != "true":
        pytest.skip(f"{library} is not installed")


def test_numpy_reference_names_numpy_and_its_version() -> None:
    about = describe_backend(NumpyBackend())
    assert about["backend"] == "numpy" and about["library"] == "numpy", about
    assert about["version"] == np.__version__, (about, np.__version__)
    assert about["device"] == "cpu", about
    assert all(isinstance(v, str) for v in about.values()), about


def test_torch_records_version_and_the_tf32_and_determinism_flags() -> None:
    needs("torch")
    import torch

    backend = resolve_backend("torch")
    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        about = describe_backend(backend)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision(precision)
    assert about["library"] == "torch" and about["version"] == torch.__version__, about
    assert about["float32_matmul_precision"] == "high", about
    assert about["cuda.matmul.allow_tf32"] == "True", about
    assert about["deterministic_algorithms"] == str(
        torch.are_deterministic_algorithms_enabled()), about
    assert about["device"] == "cpu", about


def test_jax_records_x64_matmul_precision_and_platform() -> None:
    needs("jax")
    import jax

    backend = resolve_backend("jax")
    about = describe_backend(backend)
    assert about["library"] == "jax" and about["version"] == jax.__version__, about
    assert about["jax_enable_x64"] == "True", about  # the adapter switches it on
    assert about["jax_default_matmul_precision"] == "default", about
    assert about["platform"] == jax.default_backend() == about["device"], about


def test_jax_matmul_precision_setting_is_reported_as_set() -> None:
    needs("jax")
    import jax

    backend = resolve_backend("jax")
    with jax.default_matmul_precision("bfloat16"):
        about = describe_backend(backend)
    assert about["jax_default_matmul_precision"] == "bfloat16", about


def test_autograd_records_its_version_and_numpys() -> None:
    needs("autograd")
    about = describe_backend(resolve_backend("autograd"))
    assert about["version"] == importlib.metadata.version("autograd"), about
    assert about["numpy"] == np.__version__, about


def test_served_engine_records_the_library_and_version_its_hello_gave() -> None:
    command = f"{sys.executable} -m resverify.impl.serve numpy"
    backend = resolve_backend(f"cmd:{command}")
    try:
        about = describe_backend(backend)
    finally:
        backend.close()  # type: ignore[attr-defined]
    assert about["library"] == "numpy" and about["version"] == np.__version__, about
    assert about["command"] == command and about["protocol"] == "1", about
    assert about["engine_name"] == "numpy" and about["device"] == "cpu", about
    assert about["implementation"] == describe_backend(NumpyBackend())["implementation"], about


def hello_engine(tmp_path: Path, **said: object) -> str:
    """A ``cmd:`` engine whose hello says ``said`` beside its dtypes and ops."""
    caps = {"resverify": 1, "kind": "capabilities", "dtypes": ["float64"], "ops": ["add"],
            **said}
    script = tmp_path / "hello.py"
    script.write_text(f"import json, sys\nsys.stdin.readline()\n"
                      f"print(json.dumps({caps!r}), flush=True)\nsys.stdin.read()\n")
    return f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def described_engine(command: str) -> dict[str, str]:
    backend = resolve_backend(command)
    try:
        return describe_backend(backend)
    finally:
        backend.close()  # type: ignore[attr-defined]


def test_cmd_engine_records_the_name_version_and_settings_of_its_hello(tmp_path: Path) -> None:
    command = hello_engine(tmp_path, name="rustgrad", version="0.4.1+g1a2b3c",
                           about={"library": "rustgrad", "fma": "contracted",
                                  "command": "lies", "engine_name": "lies"})
    about = described_engine(command)
    assert (about["backend"], about["library"], about["version"]) == (
        "rustgrad", "rustgrad", "0.4.1+g1a2b3c"), about
    assert about["fma"] == "contracted" and about["device"] == "external", about
    assert about["command"] == command.removeprefix("cmd:"), about  # the engine cannot hide it
    assert about["engine_name"] == "rustgrad", about


def test_cmd_engine_of_protocol_one_without_a_version_is_cmd_version_unknown(
        tmp_path: Path) -> None:
    command = hello_engine(tmp_path)
    about = described_engine(command)
    assert (about["library"], about["version"], about["protocol"]) == (
        "cmd", "unknown", "1"), about
    assert about["engine_name"] == command, about


class _Described:
    name = "described"
    capabilities = Capabilities(dtypes=("float64",))

    def __init__(self, about: Any) -> None:
        self._about = about

    def about(self) -> Any:
        if isinstance(self._about, Exception):
            raise self._about
        return self._about

    def run(self, request: Request) -> Result:
        raise NotImplementedError


def test_own_about_is_preferred_and_its_values_become_strings() -> None:
    about = describe_backend(_Described({"library": "numpy", "fma": True, "lanes": 8}))
    assert about == {"backend": "described", "library": "numpy", "version": np.__version__,
                     "device": "cpu", "fma": "True", "lanes": "8"}, about


def test_a_failing_about_is_recorded_not_raised() -> None:
    about = describe_backend(_Described(RuntimeError("no\ndriver")))
    assert about["about_error"] == "RuntimeError: no driver", about
    assert about["backend"] == "described", about


def test_about_that_is_not_a_mapping_is_recorded() -> None:
    about = describe_backend(_Described(["library", "x"]))
    assert about["about_error"].startswith("UsageError: about() must return a mapping"), about


def test_unknown_adapter_names_the_package_of_its_class() -> None:
    class Plain:
        name = "plain"
        capabilities = Capabilities()

    Plain.__module__ = "acme_engines.plain"
    about = describe_backend(Plain())
    assert about == {"backend": "plain", "library": "acme_engines", "version": "unknown",
                     "device": "cpu"}, about


def test_distribution_version_of_a_missing_distribution_is_unknown() -> None:
    assert distribution_version("no-such-distribution-resverify") == "unknown"
    assert distribution_version("numpy") == np.__version__


class _Wrapping:
    """An adapter that says what it wraps in a plain ``about`` attribute, as ``name`` is."""

    name = "wrapping"
    capabilities = Capabilities(dtypes=("float64",))
    about: ClassVar[dict[str, object]] = {"library": "minigrad", "version": "0.7.2",
                                          "fast_math": False}

    def run(self, request: Request) -> Result:
        raise NotImplementedError


def test_an_about_attribute_names_the_library_and_version_an_adapter_wraps() -> None:
    about = describe_backend(_Wrapping())
    expected = {"backend": "wrapping", "library": "minigrad", "version": "0.7.2",
                "device": "cpu", "fast_math": "False"}
    assert about == expected, f"about {about}, expected {expected}"


def test_an_about_attribute_that_is_not_a_mapping_is_recorded() -> None:
    class Odd(_Wrapping):
        about = "minigrad 0.7.2"  # type: ignore[assignment]

    about = describe_backend(Odd())
    assert about["about_error"].startswith("UsageError: about must be a mapping"), about
    assert about["library"] == _Wrapping.__module__.split(".")[0], about


def test_the_reports_about_shows_the_library_and_version_of_an_adapters_about() -> None:
    from resverify.reports.json_report import build_report, validate

    doc = build_report(run={"seed": 0, "profile": "ci", "backends": ["wrapping"],
                            "pytest_args": [], "pytest_exit_code": 0},
                       backends=[_Wrapping()], claims=[], properties=[], complete=True,
                       warnings=[], timings={})
    validate(doc)
    about = doc["backends"][0]["about"]
    assert (about["library"], about["version"]) == ("minigrad", "0.7.2"), \
        f"report.json about {about}, expected library minigrad, version 0.7.2"
