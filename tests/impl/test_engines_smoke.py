"""Smoke run of the real property suite on every adapter, for CI: two laws, one dtype.

``make matrix`` runs the whole suite on every installed backend (tens of minutes: the
compiled variants compile each program the suite draws); this runs two properties, the
forward and gradients of random programs against the exact spec within budget, and (in
forward mode) their output tangent against the exact ``J·t`` within budget, in float64
and seeded, through ``resverify check`` itself, so that CI sees every adapter answer real
requests in the modes it claims, and that the report says which library, version and
numerics settings were checked. A backend with a pinned finding (PyTensor's relu) must
fail exactly as pinned; one that does not claim forward mode has its tangent law skipped
in Capabilities' words. Missing libraries skip, except under CI=true.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from resverify.cli.main import main
from resverify.impl.registry import BUILTINS
from tests.installed import require_installed

PINNED = Path(__file__).resolve().parents[2] / "docs" / "findings" / "known-failures.toml"
"""The findings that stay (docs/findings.md): pytensor's relu fails the oracle law at 0."""
ENGINES = ("torch", "torch-compile", "jax", "jax-jit", "autograd", "tensorflow", "tinygrad",
           "pytensor")
SETTINGS = {
    "torch-compile": ("compiler", "compiler_backend", "float32_matmul_precision"),
    "torch": ("float32_matmul_precision", "cuda.matmul.allow_tf32", "deterministic_algorithms"),
    "jax": ("jax_enable_x64", "jax_default_matmul_precision", "platform"),
    "jax-jit": ("compiler", "jax_enable_x64", "jax_default_matmul_precision"),
    "tensorflow": ("tensor_float_32_execution", "TF_ENABLE_ONEDNN_OPTS"),
    "tinygrad": ("tinygrad_device",),
    "pytensor": ("mode", "linker"),
    "autograd": ("numpy",),
}
"""The numerics settings each backend's report entry must carry."""


@pytest.mark.slow
@pytest.mark.parametrize("name", ENGINES)
def test_engine_passes_the_spec_law_in_float64_and_the_report_says_what_ran(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_installed(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["check", "--backend", name, "--no-claims", "--known-failures", str(PINNED),
                 "--", "-k", "(forward_and_gradients_match_spec_within_budget or "
                 "test_tangent_matches_spec_within_budget) and float64"])
    doc = json.loads((tmp_path / "resverify-report" / "report.json").read_text())
    statuses = {(p["backend"], p["mode"], p["dtype"], p["status"]) for p in doc["properties"]}
    pinned = {entry["backend"] for entry in tomllib.loads(PINNED.read_text())["failure"]
              if entry["property"] == "forward_and_gradients_match_spec_within_budget"
              and entry["vector"].endswith("float64.json")}
    jvp = "pass" if "jvp" in BUILTINS[name].capabilities.modes else "skipped"
    # the oracle law is split by branch family: a pinned failure is expected in the tests
    # of the families that meet it, and the others pass
    vjp = {"expected", "pass"} if name in pinned else {"pass"}
    want = {(name, "vjp", "float64", status) for status in vjp} | {(name, "jvp", "float64", jvp)}
    assert code == 0 and statuses == want, (code, statuses, want)
    reasons = {p["skip_reason"] for p in doc["properties"] if p["status"] == "skipped"}
    assert all("mode jvp not claimed" in str(r) for r in reasons), reasons
    (entry,) = [b for b in doc["backends"] if b["name"] == name]
    about = entry["about"]
    assert about["library"] == BUILTINS[name].module and about["version"] != "unknown", about
    missing_settings = [k for k in SETTINGS[name] if k not in about]
    assert not missing_settings, f"{name}: report lacks {missing_settings}: {about}"
