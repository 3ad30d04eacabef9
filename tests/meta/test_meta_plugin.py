"""The pytest plugin end to end, in a child pytest: backend choice, vectors, replay, records."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from resverify.impl.backend import Capabilities
from resverify.properties import pinned
from resverify.properties.cases import Case
from resverify.properties.plugin import PropertyRun, capability_reason
from resverify.properties.profiles import default_profile
from resverify.spec.codec import loads_request
from resverify.spec.errors import UsageError
from resverify.spec.ir import OPS, Input, Node, Program
from tests import mutants as catalog

ROOT = Path(__file__).resolve().parents[2]


def child_pytest(*args: str, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """Run pytest from the repository root with the ci profile and no cache."""
    full_env = {**os.environ, "RESVERIFY_PROFILE": "ci", **(env or {})}
    full_env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
               "-q", *args]
    return subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_failing_property_saves_vector_and_prints_replay_command(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    done = child_pytest("--pyargs", "resverify.properties.test_structure", "-k",
                        "shared_operand and float64",
                        "--backend", "tests.mutants:OverwrittenGrads",
                        f"--junitxml={junit}", env={"RESVERIFY_VECTOR_DIR": str(tmp_path / "v")})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    replay = [line for line in out.splitlines() if line.startswith("resverify replay ")]
    assert replay, out
    assert replay[0].endswith("--backend tests.mutants:OverwrittenGrads"), replay
    vectors = list((tmp_path / "v").glob("*.json"))
    assert len(vectors) == 1, vectors
    request = loads_request(vectors[0].read_text())
    assert "residual_add(x, x)" in request.program.describe(), request
    assert f"test vector: {vectors[0]}" in out, out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert props["property"] == "shared_operand_receives_k_times_the_cotangent", props
    assert props["backend"] == "tests.mutants:OverwrittenGrads", props
    assert props["dtype"] == "float64", props
    assert int(props["examples"] or 0) >= 1, props
    assert props["vector"] == str(vectors[0]), props
    assert props["replay"] == replay[0], props


def test_unknown_backend_is_a_one_line_usage_error() -> None:
    done = child_pytest("properties/test_structure.py", "--backend", "no-such-backend")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "ERROR: unknown backend 'no-such-backend'" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_backends_come_from_option_then_environment() -> None:
    listed = child_pytest("--collect-only", "properties/test_hygiene.py",
                          env={"RESVERIFY_BACKEND": "numpy,tests.mutants:WrongDtype"})
    assert "[tests.mutants:WrongDtype-float32]" in listed.stdout, listed.stdout
    assert "[numpy-float32]" in listed.stdout, listed.stdout
    chosen = child_pytest("--collect-only", "properties/test_hygiene.py",
                          "--backend", "tests.mutants:Mutant",
                          env={"RESVERIFY_BACKEND": "tests.mutants:WrongDtype"})
    assert "[tests.mutants:Mutant-float32]" in chosen.stdout, chosen.stdout
    assert "WrongDtype" not in chosen.stdout, chosen.stdout


def test_unclaimed_dtype_is_skipped_with_the_backends_reason() -> None:
    done = child_pytest("properties/test_hygiene.py", "-k", "bfloat16", "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dtype bfloat16 not claimed" in done.stdout, done.stdout


@pytest.mark.parametrize(("args", "env", "profile"), [
    ((), {}, "ci"),
    ((), {"RESVERIFY_PROFILE": "dev"}, "dev"),
    (("--hypothesis-profile", "thorough"), {"RESVERIFY_PROFILE": "dev"}, "thorough"),
])
def test_profile_is_chosen_by_option_then_environment(args: tuple[str, ...],
                                                      env: dict[str, str], profile: str) -> None:
    done = child_pytest("-v", "--collect-only", "properties/test_hygiene.py", *args,
                        env={"RESVERIFY_PROFILE": "", **env})
    assert f"Hypothesis profile {profile};" in done.stdout, done.stdout


def test_default_profile_follows_environment() -> None:
    assert default_profile({}) == "ci"
    assert default_profile({"RESVERIFY_PROFILE": "dev"}) == "dev"
    assert default_profile({"CI": "true", "RESVERIFY_PROFILE": "thorough"}) == "thorough"
    with pytest.raises(UsageError, match="unknown Hypothesis profile 'fast'"):
        default_profile({"RESVERIFY_PROFILE": "fast"})


class _NoTanh(catalog.Mutant):
    name = "no-tanh"
    capabilities = Capabilities(dtypes=("float64",), ops=tuple(sorted(set(OPS) - {"tanh"})))


def test_examples_using_unclaimed_ops_are_rejected_and_not_counted() -> None:
    backend = _NoTanh()
    run = PropertyRun("law", "no-tanh", backend)
    tanh_case = Case(Program((Input("x", (2,)),), (Node("y", "tanh", ("x",)),), "y"),
                     {"x": np.ones(2)}, np.ones(2))

    @settings(max_examples=5, database=None)
    @given(case=st.just(tanh_case))
    def only_tanh(case: Case) -> None:
        run.request(case, "float64")

    @settings(max_examples=5, database=None)
    @given(case=st.just(pinned.S06))
    def claimed(case: Case) -> None:
        assert run.request(case, "float64").dtype == "float64"

    with run.counting(only_tanh), pytest.raises(Unsatisfiable):
        only_tanh()
    assert run.examples == 0
    with run.counting(claimed):
        claimed()
    assert run.examples == 1, run.examples  # st.just: Hypothesis runs its one example once
    assert capability_reason(backend, "float16", ()) == (
        "dtype float16 not claimed (claims ['float64'])")
    assert capability_reason(backend, "float64", ("tanh", "linear")) == (
        "op(s) ['tanh'] not claimed")
