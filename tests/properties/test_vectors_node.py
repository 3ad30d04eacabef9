"""docs/vectors.md's consumer in another language: engines/node/run_corpus.mjs, a float64
engine in JavaScript with reverse and forward mode, runs an exported corpus in its own test
run (TAP output) without Python -- entries, forward-mode entries and the groups of laws that
relate several answers -- passes it, and fails it when one of its deliberate bugs is
planted (--bug, --bug=alpha-twice, --bug=swapped-shapes, --bug=sticky-refusal), with the
verdicts the suite gives the same bug: each refusal law's entry checks only what its law
states (the error, the shapes it names, the engine's state)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from resverify.properties import corpus

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "engines" / "node" / "run_corpus.mjs"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    corpus.export(out, ["op_", "seed_fixture", "shared_operand", "rejects_every_shape",
                        "forward_and_gradients", "_stack_gradient", "affine_in_alpha",
                        "stack_output_is_input", "tangent", "names_both_shapes",
                        "backend_state_unchanged"])
    return out


def _consume(folder: Path, *flags: str) -> tuple[int, list[str]]:
    assert NODE is not None
    done = subprocess.run([NODE, str(CONSUMER), str(folder), *flags], capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, done.stdout.splitlines()


def test_node_engine_passes_every_entry_it_claims(folder: Path) -> None:
    code, lines = _consume(folder)
    failed = [line for line in lines if line.startswith("not ok")]
    assert code == 0 and not failed, (code, failed[:5])
    ran = [line for line in lines if line.startswith("ok") and "# SKIP" not in line]
    assert len(ran) >= 40, len(ran)
    assert any("op_tanh" in line for line in ran) and any("error" in line or "mismatch" in line
                                                          for line in ran), ran
    groups = _group_ids(folder)
    for prop in ("affine_in_alpha", "stack_output_is_input", "duality", "linear_in_the_input"):
        assert any(prop in line and line.split()[2] in groups for line in ran), (prop, ran)
    assert any("jvp_op_tanh" in line for line in ran), ran


def _group_ids(folder: Path) -> set[str]:
    listed = json.loads((folder / corpus.MANIFEST).read_text())["entries"]
    return {e["id"] for e in listed if e["expect"] == "group"}


def test_node_engine_with_its_planted_bug_fails_the_merges_gradient(folder: Path) -> None:
    code, lines = _consume(folder, "--bug")
    failed = [line for line in lines if line.startswith("not ok")]
    assert code == 1, code
    assert any("op_residual_add" in line and "grads[a]" in line for line in failed), failed
    assert any("seed_fixture_S06" in line for line in failed), failed
    assert not any("op_mul" in line or "op_linear" in line for line in failed), failed
    # forward mode: the tangent of the merge loses its identity path
    assert any("jvp_op_residual_add" in line for line in failed), failed
    assert any("norm" not in line and "tangent_matches_spec" in line and "tangent[" in line
               for line in failed), failed
    # a law relating answers holds for a consistently wrong engine: the groups of affinity
    # in α and of the unrolled sum still pass (as the suite's laws do on such a backend)
    groups = _group_ids(folder)
    assert not any(line.split()[3] in groups for line in failed), failed


def test_node_engine_scaling_by_alpha_squared_fails_the_groups_of_laws_in_alpha(
        folder: Path) -> None:
    code, lines = _consume(folder, "--bug=alpha-twice")
    failed = [line for line in lines if line.startswith("not ok")]
    groups = _group_ids(folder)
    assert code == 1, code
    for prop in ("affine_in_alpha", "stack_output_is_input"):
        assert any(prop in line and line.split()[3] in groups for line in failed), (prop, failed)
    # their single requests ask only for a value of the declared form, as the laws do
    assert not any("affine_in_alpha" in line and line.split()[3] not in groups
                   for line in failed), failed


def _entries(folder: Path, prop: str) -> set[str]:
    listed = json.loads((folder / corpus.MANIFEST).read_text())["entries"]
    return {e["id"] for e in listed if e["property"] == prop and e["dtype"] == "float64"}


def test_node_engine_naming_the_shapes_swapped_fails_only_the_shapes_law(folder: Path) -> None:
    code, lines = _consume(folder, "--bug=swapped-shapes")
    failed = {line.split()[3] for line in lines if line.startswith("not ok")}
    shapes = _entries(folder, "shape_mismatch_names_both_shapes_in_order")
    assert code == 1 and shapes and failed == shapes, (code, sorted(failed), sorted(shapes))


def test_node_engine_whose_refusal_changes_its_state_fails_the_state_law(folder: Path) -> None:
    code, lines = _consume(folder, "--bug=sticky-refusal")
    failed = {line.split()[3]: line for line in lines if line.startswith("not ok")}
    state = {i for i in _entries(folder, "refusal_leaves_the_backend_state_unchanged")
             if 0 not in _probe_output_shape(folder, i)}  # an empty answer shows no offset
    assert code == 1 and state and state <= set(failed), (code, sorted(failed), state)
    said = [failed[i] for i in state]
    assert all("changed the engine's state" in line for line in said), said


def _probe_output_shape(folder: Path, ident: str) -> list[int]:
    """The shape of the first input of the entry's probe (its merge's output shape)."""
    doc = json.loads((folder / "entries" / f"{ident}.json").read_text())
    return list(doc["probe"]["program"]["inputs"][0]["shape"])
