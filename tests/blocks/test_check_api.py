"""The public surface: check_block's records, pytest_check in a user's test, reproducibility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import resverify.blocks
from resverify.blocks import check_block, pytest_check
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import run_law
from resverify.blocks.laws import LAWS
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import UsageError
from tests.blocks.broken_blocks import BUGS

EXAMPLES = 3  # the records' shape is under test here, not the laws


def test_public_surface_is_small_and_sorted() -> None:
    names = resverify.blocks.__all__
    assert names == sorted(names), names
    assert set(names) == {"LawRecord", "Recipe", "Site", "check_block", "pytest_check",
                          "validate"}, names


def test_check_block_gives_one_record_per_law_and_mode() -> None:
    records = check_block(encoder(True), ["float32"], max_examples=EXAMPLES)
    expected = [(law, mode) for law, entry in LAWS.items() for mode in entry.modes
                if not entry.needs_paths]  # the paths law runs when paths= asks for it
    assert [(r.law, r.mode) for r in records] == expected
    verdicts = {r.law: r.verdict for r in records}
    assert verdicts["drop_path"] == verdicts["affine_in_gamma"] == "unjudged", verdicts
    assert all(v == "pass" for k, v in verdicts.items()
               if k not in ("drop_path", "affine_in_gamma")), verdicts
    stream = next(r for r in records if r.law == "stream_dtype")
    assert set(stream.figures) == {"headroom_log2", "swamped[self-attention]",
                                   "swamped[feed-forward]"}, stream.figures
    assert all(r.examples == EXAMPLES for r in records if r.verdict == "pass"), records


def test_check_block_is_reproducible_from_its_seed() -> None:
    def figures(seed: int) -> dict[str, float]:
        return dict(run_law(encoder(True), "stream_dtype", "bfloat16", "eval",
                            max_examples=EXAMPLES, seed=seed).figures)
    assert figures(1) == figures(1)


def test_pytest_check_passes_a_correct_block() -> None:
    records = pytest_check(encoder(False), ["float64"], ["decomposition", "zero_branch"],
                           max_examples=EXAMPLES)
    assert {r.verdict for r in records} == {"pass"}, [r.line() for r in records]


def test_pytest_check_fails_with_every_broken_law_each_with_its_saved_vector(
        tmp_path: Path) -> None:
    bug = BUGS["normalized_skip"]
    with pytest.raises(PropertyFailure, match=r"residual law\(s\) fail:\n") as caught:
        pytest_check(bug.recipe, [bug.dtype], ["decomposition", "zero_branch"],
                     max_examples=EXAMPLES, vectors=tmp_path)
    lines = str(caught.value).splitlines()[1:]
    laws, saved = lines[0::2], lines[1::2]
    assert {line.split()[1] for line in laws} == {"decomposition", "zero_branch"}, lines
    for law, where in zip(laws, saved, strict=True):
        path = Path(where.split()[1].rstrip(";"))
        assert path.parent == tmp_path and path.is_file(), where
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["vector"]["message"] in law, (doc["vector"], law)
        assert where.endswith(f"replay: resverify replay {path} --backend numpy"), where


def test_pytest_check_saves_vectors_where_the_suite_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESVERIFY_VECTOR_DIR", str(tmp_path / "env"))
    bug = BUGS["normalized_skip"]
    with pytest.raises(PropertyFailure):
        pytest_check(bug.recipe, [bug.dtype], ["decomposition"], max_examples=EXAMPLES)
    saved = sorted(p.name for p in (tmp_path / "env").iterdir())
    assert [name.split("-")[0] for name in saved] == \
        ["decomposition_float32_eval", "decomposition_float32_train"], saved


def test_run_law_refuses_what_the_recipe_does_not_claim() -> None:
    with pytest.raises(UsageError, match="claims dtypes"):
        run_law(BUGS["bf16_stream_downcast"].recipe, "decomposition", "float64", "eval")
    with pytest.raises(UsageError, match="unknown law 'identity'"):
        run_law(encoder(True), "identity", "float32", "eval")
