"""The custom-block walkthrough (docs/blocks.md) acts as written: examples/custom_block.py's
block passes ``pytest_check``, a one-line bug in it fails with the law named, and a recipe
naming what the block lacks is refused in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from examples import custom_block
from examples.custom_block import RECIPE, PreNormMLPBlock
from resverify.blocks import Recipe, pytest_check
from resverify.properties.assertions import PropertyFailure
from resverify.spec.errors import UsageError

EXAMPLES = 1  # the fewest Hypothesis allows: the example's wiring is under test, not the laws


class NormalizedSkipBlock(PreNormMLPBlock):
    """The example's block with one bug: the skip carries ``LN(x)``, not ``x``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return h + self.ls(self.mlp(h))


def broken() -> Recipe:
    return dataclasses.replace(RECIPE, name="example.NormalizedSkipBlock",
                               factory=lambda dtype: NormalizedSkipBlock(dtype=dtype))


def test_the_example_block_passes_every_law_in_every_claimed_dtype() -> None:
    records = pytest_check(RECIPE, max_examples=EXAMPLES)
    assert {r.dtype for r in records} == set(RECIPE.dtypes)
    verdicts = {(r.law, r.verdict) for r in records}
    assert "drop_path" not in {law for law, _ in verdicts}  # the block has no drop path
    assert {v for _, v in verdicts} == {"pass"}, [r.line() for r in records]


def test_main_prints_one_line_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert custom_block.main([str(EXAMPLES)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 * len(RECIPE.dtypes), lines  # 6 laws, 10 (law, mode) pairs
    assert lines[0].startswith("example.PreNormMLPBlock stream_dtype [float64, eval] pass")


def test_a_normalized_skip_fails_the_decomposition_law(tmp_path: Path) -> None:
    with pytest.raises(PropertyFailure, match=r"residual law\(s\) fail:\n") as caught:
        pytest_check(broken(), ["float64"], ["decomposition"], max_examples=EXAMPLES,
                     vectors=tmp_path)
    said = str(caught.value).splitlines()[1:]
    lines = said[0::3]  # each law's line, the replay of its example, its merge's vector
    heads = [(r.split(":", 1)[0], v.split()[0]) for r, v in zip(said[1::3], said[2::3],
                                                                 strict=True)]
    assert heads == [("  replay", "vector")] * len(lines), said
    assert lines and all(line.startswith("example.NormalizedSkipBlock decomposition [float64, ")
                         and " fail " in line and "z = shortcut(s) + alpha*F(s)" in line
                         for line in lines), lines


def test_a_recipe_naming_a_parameter_the_block_lacks_is_one_line() -> None:
    site = dataclasses.replace(RECIPE.sites[0], zero=("ls.beta",))
    wrong = dataclasses.replace(RECIPE, sites=(site,))
    with pytest.raises(UsageError) as caught:
        pytest_check(wrong, ["float64"], ["decomposition"], max_examples=EXAMPLES)
    assert str(caught.value) == ("recipe 'example.PreNormMLPBlock': site 0 names parameter "
                                 "'ls.beta', which the module lacks")
