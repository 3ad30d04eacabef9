"""``resverify blocks replay``: a block failure's printed replay judges its law again.

Issue 35 found three replays that replayed nothing: a bfloat16 block's vector printed with
``--backend numpy`` (which claims no bfloat16: skipped, nothing checked); a γ as constructed
saved as ``residual_add(x, 0)``, whose replay printed every element ``ok``; and a projecting
block's zero-branch and stream-dtype vectors holding its input and zeros, not the merge
that happened. Each case here runs the very command the report printed, in this process,
and shows that it fails again with the failure's own message; a failure at a merge also
keeps its vector, on a backend that claims its dtype.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

import torch

from resverify.blocks.catalog.torch_nn import encoder
from resverify.cli.main import main
from resverify.spec.codec import parse_json, request_from_dict
from tests.blocks.broken_blocks import BUGS, ProjectedReluBlock, projected_recipe
from tests.cli.test_blocks_command import check, one_line_error, use_catalog

PRE = "torch.TransformerEncoderLayer(pre)"
DEV = ["--profile", "dev", "--no-plots"]


class UpcastProjected(ProjectedReluBlock):
    """A projecting block (16 channels in, 8 out) whose output leaves in float64: it fails
    stream_dtype and zero_branch (neither at a merge) and decomposition (at the merge)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).to(torch.float64)


UPCAST = projected_recipe("UpcastProjected", UpcastProjected)


def run_printed(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and output of a command the report printed, run in this process."""
    argv = shlex.split(command)
    assert argv[0] == "resverify", command
    capsys.readouterr()
    code = main(argv[1:])
    return code, capsys.readouterr().out


def failures(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(law, mode) -> the failure object of each failing law record."""
    return {(r["law"], r["mode"]): r["failure"] for b in doc["blocks"] for r in b["laws"]
            if r["verdict"] == "fail"}


def test_a_bfloat16_merge_failure_replays_its_block_and_its_vector_on_torch(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS["normalized_skip"].recipe
    use_catalog(monkeypatch, [bug])
    code, doc = check(tmp_path, bug.name, *DEV, "--dtype", "bfloat16", "--law", "decomposition")
    failure = failures(doc)[("decomposition", "eval")]
    assert code == 1 and failure["replay"].startswith(
        "resverify blocks replay NormalizedSkip --law decomposition --dtype bfloat16 --mode "
        "eval --example batch="), (code, failure)
    again, out = run_printed(failure["replay"], capsys)
    assert (again, failure["message"] in out) == (1, True), (again, out, failure["message"])
    vector = Path(failure["vector"])
    request = request_from_dict(parse_json(vector.read_text(encoding="utf-8")))
    assert request.dtype == "bfloat16", request.dtype
    assert failure["vector_replay"] == f"resverify replay {vector} --backend torch", failure
    again, out = run_printed(failure["vector_replay"], capsys)
    # the merge itself is right (the block feeds it the wrong skip): judged ok, not skipped
    assert (again, "skipped" in out, out.splitlines()[-1]) == (0, False, "48 ok, 0 FAIL"), out


def test_a_constructor_value_failure_saves_no_merge_and_its_replay_fails_again(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    bug = BUGS["gamma_ignores_init"].recipe
    use_catalog(monkeypatch, [bug])
    code, doc = check(tmp_path, bug.name, *DEV, "--dtype", "float32", "--law",
                      "affine_in_gamma")
    failure = failures(doc)[("affine_in_gamma", "eval")]
    assert (code, failure["vector"], failure["vector_replay"]) == (1, None, None), failure
    assert not (tmp_path / "vectors").exists(), list((tmp_path / "vectors").iterdir())
    again, out = run_printed(failure["replay"], capsys)
    assert again == 1 and "ls1.gamma as constructed" in out and failure["message"] in out, out


def test_a_projecting_blocks_failures_off_the_merge_replay_the_block(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    use_catalog(monkeypatch, [UPCAST])
    code, doc = check(tmp_path, UPCAST.name, *DEV, "--dtype", "float32")
    found = failures(doc)
    assert code == 1 and sorted({law for law, _ in found}) == [
        "decomposition", "stream_dtype", "zero_branch"], sorted(found)
    for (law, mode), failure in found.items():
        again, out = run_printed(failure["replay"], capsys)
        assert (again, failure["message"] in out) == (1, True), (law, mode, out)
        if law != "decomposition":  # neither is a merge: no stand-in vector of x and zeros
            assert failure["vector"] is None, (law, mode, failure)
            continue
        saved = json.loads(Path(failure["vector"]).read_text(encoding="utf-8"))
        request = request_from_dict({k: v for k, v in saved.items() if k != "vector"})
        shapes = {name: value.shape for name, value in request.inputs.items()}
        assert shapes == {"x": (1, 1, 8), "f": (1, 1, 8)}, (mode, shapes)  # the merge's width


def test_a_replay_passes_where_the_law_holds_and_never_passes_on_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    use_catalog(monkeypatch, [encoder(True)])
    example = "batch=2,seq=3,seed=5,weight_exp=0,input_exp=0"
    code, out = run_printed(f"resverify blocks replay '{PRE}' --law decomposition --dtype "
                            f"float32 --example {example}", capsys)
    assert (code, f"{PRE} decomposition [float32, eval] pass (1 examples)" in out) == \
        (0, True), out
    code, out = run_printed(f"resverify blocks replay '{PRE}' --law affine_in_gamma --dtype "
                            f"float32 --example {example}", capsys)
    assert (code, "unjudged (0 examples): no site declares a LayerScale γ" in out) == \
        (1, True), out


@pytest.mark.parametrize(("argv", "said"), [
    (["--law", "decomposition", "--dtype", "float32", "--example", "batch=1,seq=1"],
     "--example 'batch=1,seq=1' lacks seed, weight_exp, input_exp"),
    (["--law", "decomposition", "--dtype", "float32", "--example",
      "batch=1,seq=1,seed=x,weight_exp=0,input_exp=0"], "seed is 'x', not an integer"),
    (["--law", "identity", "--dtype", "float32", "--example",
      "batch=1,seq=1,seed=0,weight_exp=0,input_exp=0"], "unknown law 'identity'"),
    (["--law", "decomposition", "--dtype", "float8", "--example",
      "batch=1,seq=1,seed=0,weight_exp=0,input_exp=0"], "claims dtypes"),
])
def test_a_bad_replay_request_is_one_line_and_exit_2(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["blocks", "replay", PRE, *argv]) == 2
    assert said in one_line_error(capsys)


def test_a_reference_holding_several_recipes_needs_block(
        capsys: pytest.CaptureFixture[str]) -> None:
    example = ["--law", "decomposition", "--dtype", "float32", "--example",
               "batch=1,seq=1,seed=0,weight_exp=0,input_exp=0"]
    assert main(["blocks", "replay", "tests.blocks.broken_blocks:BUG_RECIPES", *example]) == 2
    assert "pick one with --block NAME" in one_line_error(capsys)
    assert main(["blocks", "replay", "tests.blocks.broken_blocks:BUG_RECIPES", "--block",
                 "Nope", *example]) == 2
    assert "holds no recipe named 'Nope'" in one_line_error(capsys)
