"""Each backend's report entry says what exactly ran: library, version, device and the
settings that change numerics (resverify.impl.about), in report.json and report.md."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from resverify.impl import resolve_backend
from resverify.impl.backend import Capabilities
from resverify.impl.numpy_backend import NumpyBackend
from resverify.reports.json_report import build_report, validate
from resverify.reports.markdown import render_markdown


class Described(NumpyBackend):
    """The reference, describing itself as a library with one numerics setting."""

    name = "described"
    capabilities = Capabilities(("float64",), ("add",), "cpu")

    def about(self) -> dict[str, str]:
        return {"library": "fastlib", "version": "9.1", "device": "cpu",
                "flush_denormals": "True | on"}


def _doc() -> dict[str, Any]:
    backends = [NumpyBackend(), Described()]
    doc = build_report(run={"seed": 0, "profile": "ci", "backends": [b.name for b in backends],
                            "pytest_args": [], "pytest_exit_code": 0},
                       backends=backends, claims=[], properties=[], complete=True,
                       warnings=[], timings={})
    validate(doc)
    return doc


def test_report_json_records_library_version_device_and_settings() -> None:
    import numpy as np

    numpy_about, own = (b["about"] for b in _doc()["backends"])
    assert (numpy_about["backend"], numpy_about["library"], numpy_about["version"]) == (
        "numpy", "numpy", np.__version__), numpy_about
    assert own["library"] == "fastlib" and own["flush_denormals"] == "True | on", own


def test_report_md_shows_each_backend_with_its_settings() -> None:
    text = render_markdown(_doc())
    row = next(line for line in text.splitlines() if line.startswith("| `described` | fastlib"))
    assert row == "| `described` | fastlib | 9.1 | cpu | flush_denormals=True \\| on |", row


def test_report_records_a_cmd_engines_version_and_settings_from_its_hello(
        tmp_path: Path) -> None:
    caps = {"resverify": 1, "kind": "capabilities", "name": "rustgrad", "dtypes": ["float64"],
            "ops": ["add"], "version": "0.4.1", "about": {"library": "rustgrad", "fma": "off"}}
    script = tmp_path / "engine.py"
    script.write_text(f"import json, sys\nsys.stdin.readline()\n"
                      f"print(json.dumps({caps!r}), flush=True)\nsys.stdin.read()\n")
    engine = resolve_backend(f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(script))}")
    try:
        doc = build_report(run={"seed": 0, "profile": "ci", "backends": [engine.name],
                                "pytest_args": [], "pytest_exit_code": 0},
                           backends=[engine], claims=[], properties=[], complete=True,
                           warnings=[], timings={})
    finally:
        engine.close()  # type: ignore[attr-defined]
    validate(doc)
    (about,) = (b["about"] for b in doc["backends"])
    assert (about["library"], about["version"], about["fma"]) == ("rustgrad", "0.4.1", "off"), about
    rows = [line for line in render_markdown(doc).splitlines()
            if line.startswith("| `rustgrad` | rustgrad |")]
    assert rows and rows[0].startswith("| `rustgrad` | rustgrad | 0.4.1 | external |"), rows
