"""The public surface: check_block's records, pytest_check in a user's test, reproducibility."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import torch

import resverify.blocks
from resverify.blocks import Recipe, Site, check_block, pytest_check
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import run_law
from resverify.blocks.laws import LAWS, applicable
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import NotJudged, UsageError
from tests.blocks.broken_blocks import BUGS, SOMETIMES_WRONG

EXAMPLES = 3  # the records' shape is under test here, not the laws


def test_public_surface_is_small_and_sorted() -> None:
    names = resverify.blocks.__all__
    assert names == sorted(names), names
    assert set(names) == {"Draw", "LawRecord", "NotInIR", "Recipe", "Site", "check_block",
                          "check_model_layers", "judge_module", "layers_of", "pytest_check",
                          "pytest_exact", "replay_example", "validate"}, names


def test_check_block_gives_one_record_per_applicable_law_and_mode() -> None:
    """By default the laws the command judges (:func:`applicable`): no drop path or γ law
    on a block with neither, in table order, root causes first."""
    records = check_block(encoder(True), ["float32"], max_examples=EXAMPLES)
    expected = [(law, mode) for law, entry in LAWS.items() for mode in entry.modes
                if law in applicable(encoder(True))]
    assert [(r.law, r.mode) for r in records] == expected, [r.line() for r in records]
    assert records[0].law == "stream_dtype", [r.line() for r in records]
    verdicts = {r.law: r.verdict for r in records}
    assert set(verdicts.values()) == {"pass"}, verdicts
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


def test_pytest_check_fails_with_every_broken_law_each_with_its_replay_and_merge_vector(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each failing law's line is followed by the command that replays its example (which
    fails again), and a failure at a merge (decomposition) by its saved vector; the zero
    branch of the whole block is no merge, so it saves none (its ``x + 0`` would replay
    ``ok``)."""
    from resverify.cli.main import main

    bug = BUGS["normalized_skip"]
    with pytest.raises(PropertyFailure, match=r"residual law\(s\) fail:\n") as caught:
        pytest_check(bug.recipe, [bug.dtype], ["decomposition", "zero_branch"],
                     max_examples=EXAMPLES, vectors=tmp_path)
    said: dict[str, list[str]] = {}
    for line in str(caught.value).splitlines()[1:]:
        if not line.startswith(" "):
            law = f"{line.split()[1]} {line.split()[3].rstrip(']')}"
            said[law] = [line]
        else:
            said[law].append(line.strip())
    assert sorted(said) == ["decomposition eval", "decomposition train", "zero_branch eval",
                            "zero_branch train"], said
    for law, (line, replay, *vector) in said.items():
        assert replay.startswith("replay: resverify blocks replay tests.blocks.broken_blocks:"
                                 "BUG_RECIPES --block NormalizedSkip "), (law, replay)
        argv = shlex.split(replay.removeprefix("replay: "))[1:]
        assert main(argv) == 1, (law, argv)
        assert line.split(": ", 1)[1] in capsys.readouterr().out, (law, line)
        if law.startswith("zero_branch"):
            assert vector == [], (law, vector)
            continue
        path = Path(vector[0].split()[1])
        assert path.parent == tmp_path and path.is_file(), vector
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["vector"]["message"] in line, (doc["vector"], line)
        assert vector[0].endswith(f"replay it: resverify replay {path} --backend numpy"), vector


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


def test_pytest_check_fails_where_no_law_judged_anything() -> None:
    """No green without judgement: laws asked for that have nothing to judge on the block
    fail the test, as ``resverify blocks check`` exits 1 there, unless allowed."""
    call = 'pytest_check(encoder(True), ["float32"], ["drop_path", "affine_in_gamma"])'
    with pytest.raises(NotJudged) as caught:
        pytest_check(encoder(True), ["float32"], ["drop_path", "affine_in_gamma"],
                     max_examples=EXAMPLES)
    text = str(caught.value)
    assert text.startswith("3 of 3 law record(s) judged nothing"), f"{call}: {text}"
    assert "no site declares a drop path" in text and "no site declares a LayerScale" in \
        text and "allow_unjudged=True" in text, f"{call}: {text}"
    records = pytest_check(encoder(True), ["float32"], ["drop_path", "affine_in_gamma"],
                           max_examples=EXAMPLES, allow_unjudged=True)
    assert {r.verdict for r in records} == {"unjudged"}, [r.line() for r in records]


def test_a_pass_on_part_of_the_examples_says_how_many_and_why() -> None:
    """A block wrong on a batch of three: ``gradient_skip`` alone judges the other examples
    and says how many of those asked, and why not the rest."""
    record = run_law(SOMETIMES_WRONG, "gradient_skip", "float32", "eval", max_examples=12,
                     shrink=False)
    call = "run_law(SOMETIMES_WRONG, 'gradient_skip', 'float32', 'eval', max_examples=12)"
    assert (record.verdict, record.asked) == ("pass", 12), f"{call}: {record.line()}"
    assert 0 < record.examples < 12, f"{call}: {record.line()}, expected part of 12"
    assert f"pass ({record.examples} of 12 examples)" in record.line(), record.line()
    assert record.message.startswith(f"judged {record.examples} of 12 examples; "
                                     f"{12 - record.examples} unjudged, the first: the "
                                     "forward decomposition fails"), f"{call}: {record.message}"


def test_no_pass_while_the_law_it_presumes_fails_alike(tmp_path: Path) -> None:
    """Checked together, ``gradient_skip`` is not ``pass`` where ``decomposition`` fails in
    the same dtype and mode: it is ``unjudged`` and names that failure."""
    records = check_block(SOMETIMES_WRONG, ["float32"], ["gradient_skip", "decomposition"],
                          max_examples=12, shrink=False)
    lines = [r.line() for r in records]
    assert [(r.law, r.verdict) for r in records] == [
        ("decomposition", "fail"), ("decomposition", "fail"), ("gradient_skip", "unjudged"),
        ("gradient_skip", "unjudged")], lines
    for record in records[2:]:
        assert record.message.startswith(f"decomposition fails in float32 {record.mode}, "
                                         "which this law presumes"), record.line()
    with pytest.raises(PropertyFailure, match=r"^2 residual law\(s\) fail:\n"
                       r"OffWhenBatchIsThree decomposition"):
        pytest_check(SOMETIMES_WRONG, ["float32"], ["gradient_skip", "decomposition"],
                     max_examples=12, vectors=tmp_path)


def test_failures_are_listed_root_cause_first(tmp_path: Path) -> None:
    """A stream downcast to bfloat16 breaks its sums and its zero branch too; the law that
    names the cause (``stream_dtype``) is the first failure listed, before those symptoms."""
    bug = BUGS["bf16_stream_downcast"]
    with pytest.raises(PropertyFailure) as caught:
        pytest_check(bug.recipe, [bug.dtype], max_examples=EXAMPLES, vectors=tmp_path)
    laws = [line.split()[1] for line in str(caught.value).splitlines()[1::2]]
    call = f"pytest_check({bug.recipe.name}, [{bug.dtype!r}])"
    assert laws[0] == "stream_dtype" and {"decomposition", "zero_branch"} <= set(laws), \
        f"{call}: failures listed {laws}, expected stream_dtype first, then its symptoms"


class _ConvBatchNorm(torch.nn.Module):
    """``x + bn(conv(x))`` on ``(N, 4, H, W)``: BatchNorm in train mode needs more than one
    value per channel, which a 1 × 1 map of one sample does not give."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1, dtype=dtype)
        self.bn = torch.nn.BatchNorm2d(4, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bn(self.conv(x))


def test_a_block_that_raises_on_drawn_sizes_is_a_failed_record_not_a_traceback() -> None:
    """BatchNorm given drawn spatial sizes: the train-mode ``ValueError`` of a one-value
    channel is the law's failure, naming the input's shape and what to fix."""
    recipe = Recipe("ConvBatchNorm(drawn sizes)", _ConvBatchNorm,
                    (Site("conv", ("conv", "bn"), ("bn.weight", "bn.bias"), norm="none"),),
                    shape=("batch", 4, "seq", "seq"), dtypes=("float32",))
    records = check_block(recipe, ["float32"], ["decomposition"], max_examples=EXAMPLES)
    call = "check_block(ConvBatchNorm(drawn sizes), ['float32'], ['decomposition'])"
    train = next(r for r in records if r.mode == "train")
    assert train.verdict == "fail", f"{call}: {train.line()}, expected a failure"
    assert "the block raised ValueError: Expected more than 1 value per channel when " \
        "training" in train.message and "fix them in the recipe's shape" in train.message, \
        f"{call}: {train.message}"
    fixed = dataclasses.replace(recipe, name="ConvBatchNorm(4 x 4)", shape=("batch", 4, 4, 4))
    assert {r.verdict for r in check_block(fixed, ["float32"], ["decomposition"],
                                           max_examples=EXAMPLES)} == {"pass"}
