"""Proof the block laws can fail: each planted bug is caught by its law and by no unrelated one.

Why few examples: a planted bug breaks its law on every example (its bug is structural, not
rare), so the first example catches it; the other laws get the same ten examples to fire
where they should not, which is what the second half of each test asserts. Shrinking is off:
the shrunk example would say nothing more about a bug that every example shows.
"""

from __future__ import annotations

import pytest

from resverify.blocks import check_block
from resverify.blocks.check import LawRecord
from resverify.blocks.laws import LAWS, applicable
from tests.blocks.broken_blocks import BUGS as PLANTED
from tests.blocks.broken_blocks import CORRECT as TEST_BLOCKS
from tests.blocks.forms import FORM_BUGS, FORMS

EXAMPLES = 10
BUGS = {**PLANTED, **FORM_BUGS}
CORRECT = {**TEST_BLOCKS, **FORMS}
SEEDS = {name: (0, 1) if name in FORMS else (0,) for name in CORRECT}
"""The residual forms (:mod:`tests.blocks.forms`) are judged under two seeds."""


def _records(name: str) -> list[LawRecord]:
    bug = BUGS[name]
    return check_block(bug.recipe, [bug.dtype], max_examples=EXAMPLES, shrink=False,
                       paths=bug.paths)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_planted_bug_fails_its_law(name: str) -> None:
    bug = BUGS[name]
    records = _records(name)
    caught = [r for r in records if r.law == bug.meant and r.verdict == "fail"]
    assert caught, (f"{name}: law {bug.meant} gave "
                    f"{[r.line() for r in records if r.law == bug.meant]}, expected a failure")
    print(f"{name} caught by {bug.meant}: {caught[0].message}")
    failure = caught[0].failure
    assert failure is not None and failure.kind == "law", caught[0].line()
    assert "residual_add" in failure.request.program.describe(), failure.request.program
    unrelated = [r.line() for r in records
                 if r.verdict == "fail" and r.law not in (bug.meant, *bug.also)]
    assert not unrelated, (f"{name} (meant for {bug.meant}, related {list(bug.also)}: "
                           f"{bug.why}) also fails unrelated laws: {unrelated}")


def test_every_law_has_a_planted_bug() -> None:
    meant = {bug.meant for bug in BUGS.values()}
    related = {law for bug in BUGS.values() for law in bug.also}
    assert meant == set(LAWS), f"laws without a planted bug: {sorted(set(LAWS) - meant)}"
    assert related <= set(LAWS), f"unknown related laws {sorted(related - set(LAWS))}"


@pytest.mark.parametrize(("name", "dtype", "seed"), [(n, d, s) for n in sorted(CORRECT)
                                                     for d in CORRECT[n].dtypes
                                                     for s in SEEDS[n]])
def test_correct_test_block_passes_every_law(name: str, dtype: str, seed: int) -> None:
    recipe = CORRECT[name]
    records = check_block(recipe, [dtype], applicable(recipe), max_examples=EXAMPLES,
                          seed=seed)
    bad = [r.line() for r in records if r.verdict != "pass"]
    assert not bad, (f"check_block({recipe.name}, [{dtype!r}], seed={seed}): {bad}, expected "
                     "every law to pass")


def test_gamma_along_the_wrong_dimension_fails_linearity_not_the_constructor() -> None:
    """γ scaling the width instead of the channels: held and zeroed right, and only the
    linearity of y(γ) - x in γ along dimension 1 (the recipe's ``scale_axis``) tells."""
    records = _records("gamma_along_width")
    (gamma,) = [r for r in records if r.law == "affine_in_gamma"]
    assert gamma.verdict == "fail", gamma.line()
    assert "linear in gamma along dim 1" in gamma.message, gamma.message


def test_affine_in_gamma_never_guesses_the_dimension_of_a_per_channel_gamma() -> None:
    """Without ``scale_axis`` a (C,) γ runs along the last dimension; on an (N, C, H, W) map
    whose width is not C the law refuses the recipe, naming ``scale_axis``, rather than
    guessing dimension 1 from the sizes."""
    from dataclasses import replace

    from resverify.blocks.check import run_law
    from resverify.spec.errors import UsageError

    recipe = CORRECT["channel_scaled"]
    site = replace(recipe.sites[0], scale_axis=None)
    wide = replace(recipe, name="ChannelScaledBlock(no scale_axis)", sites=(site,),
                   shape=("batch", recipe.shape[1], "seq", 5))
    with pytest.raises(UsageError, match=r"gamma has 4 entries.*scale_axis="):
        run_law(wide, "affine_in_gamma", "float64", "eval", max_examples=2, shrink=False)
