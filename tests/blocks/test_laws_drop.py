"""The drop-path law's parts: the exact binomial tail, the keep-rate test, the row law.

Why these beside the planted bugs: the statistical test is the one place a correct block
could fail by chance, so its tail is checked against brute-force enumeration, its false
alarm is shown to sit where it is said to, and a drop path that ignores its probability is
shown to fail it.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.blocks.check import Draw
from resverify.blocks.laws_drop import (
    CALLS,
    FALSE_ALARM,
    ROWS,
    binomial_pmf,
    binomial_tail,
    drop_path,
)
from resverify.blocks.torch_adapter import make_case
from resverify.blocks.trace import Unjudged
from resverify.properties.assertions import PropertyFailure
from tests.blocks.broken_blocks import CORRECT, DROP, DropPath, ScaledEncoderLayer, scaled_recipe

DRAW = Draw(batch=2, seq=3, seed=7, weight_exp=0, input_exp=0)


@settings(max_examples=25)
@given(st.integers(0, 8), st.fractions(0, 1, max_denominator=16), st.data())
def test_binomial_tail_is_the_enumerated_probability(n: int, p: Fraction,
                                                      data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    outcomes = list(itertools.product((0, 1), repeat=n))
    weight = {o: p ** sum(o) * (1 - p) ** (n - sum(o)) for o in outcomes}
    upper = sum((w for o, w in weight.items() if sum(o) >= k), Fraction(0))
    lower = sum((w for o, w in weight.items() if sum(o) <= k), Fraction(0))
    assert binomial_tail(n, p, k, True) == upper, f"P(K >= {k}) for Binomial({n}, {p})"
    assert binomial_tail(n, p, k, False) == lower, f"P(K <= {k}) for Binomial({n}, {p})"


def test_keep_rate_acceptance_region_holds_all_but_the_false_alarm() -> None:
    n, keep = ROWS * CALLS, Fraction(3, 4)
    pmf = binomial_pmf(n, keep)
    assert sum(pmf) == 1, "the probabilities must sum to 1 exactly"
    lower = list(itertools.accumulate(pmf))
    upper = list(itertools.accumulate(pmf[::-1]))[::-1]
    accepted = [k for k in range(n + 1) if min(lower[k], upper[k]) > FALSE_ALARM / 2]
    rejected_mass = 1 - sum((pmf[k] for k in accepted), Fraction(0))
    assert rejected_mass <= FALSE_ALARM, f"false alarm {float(rejected_mass)}, expected <= 1e-9"
    assert min(accepted) < n * keep < max(accepted), (min(accepted), max(accepted))
    assert max(accepted) < n, "all rows kept must be refused at keep 3/4"


class IgnoresProbability(ScaledEncoderLayer):
    """Drop path that keeps every row but still rescales: the keep rate is wrong."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        self.drop_path1 = _KeepAll(DROP)
        self.drop_path2 = _KeepAll(DROP)


class _KeepAll(DropPath):
    def mask(self, x: torch.Tensor) -> torch.Tensor:
        keep = 1.0 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.dim() - 1)
        return x.new_ones(shape).div_(keep)


class DropsInEval(ScaledEncoderLayer):
    """Drop path whose training flag is ignored."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(dtype)
        self.drop_path1 = _Always(DROP)
        self.drop_path2 = _Always(DROP)


class _Always(DropPath):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mask(x) if self.drop_prob > 0.0 else x


def test_drop_path_keep_rate_test_refuses_a_drop_path_that_keeps_every_row() -> None:
    """The statistics alone (the law runs the extremes first, where this block's rescaling
    by 1/0 already fails at probability 1)."""
    from resverify.blocks.laws_drop import _statistics

    case = make_case(scaled_recipe("IgnoresProbability", IgnoresProbability), "float32",
                     "train", DRAW)
    with pytest.raises(PropertyFailure, match=r"kept rows = 512 of 512, expected about 384"):
        _statistics(case, [0, 1])
    with pytest.raises(PropertyFailure, match=r"at probability 1.0: row 0"):
        drop_path(case)


def test_drop_path_refuses_dropping_in_eval() -> None:
    case = make_case(scaled_recipe("DropsInEval", DropsInEval), "float32", "eval", DRAW)
    with pytest.raises(PropertyFailure, match=r"eval, where drop path is the identity: row"):
        drop_path(case)


def test_drop_path_eval_verdict_is_the_same_whatever_the_global_generator_holds() -> None:
    """A drop path that draws in eval is judged on the case's own seed, not on whatever
    earlier code left in torch's global generator: with two rows and ``p = 1/4``, a run
    from the global state dropped both rows now and then, and failed with another message
    (seen under ``make test``, where the tests before it in its worker vary)."""
    case = make_case(scaled_recipe("DropsInEval", DropsInEval), "float32", "eval", DRAW)
    said = set()
    for seed in range(8):
        torch.manual_seed(seed)
        with pytest.raises(PropertyFailure) as failure:
            drop_path(case)
        said.add(str(failure.value).splitlines()[0])
    assert len(said) == 1, f"drop_path(DropsInEval, eval) said {sorted(said)} over 8 global seeds"


def test_drop_path_eval_leaves_the_global_generator_as_it_was() -> None:
    case = make_case(scaled_recipe("DropsInEval", DropsInEval), "float32", "eval", DRAW)
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    with pytest.raises(PropertyFailure):
        drop_path(case)
    got = torch.rand(4)
    assert torch.equal(got, expected), (
        f"torch.rand(4) after drop_path(DropsInEval, eval) = {got.tolist()}, but should be "
        f"{expected.tolist()} (the draw seed 3 gives when nothing else draws)")


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_drop_path_holds_on_the_correct_block(mode: str) -> None:
    assert drop_path(make_case(CORRECT["scaled"], "bfloat16", mode, DRAW)) == {}


def test_drop_path_is_unjudged_without_a_drop_path() -> None:
    scaled = CORRECT["scaled"]
    plain = replace(scaled, sites=tuple(replace(s, drop_path=()) for s in scaled.sites))
    with pytest.raises(Unjudged, match="no site declares a drop path"):
        drop_path(make_case(plain, "float32", "train", DRAW))


def test_a_drop_path_module_that_governs_nothing_is_named_at_equal_rates() -> None:
    """``drop_path1`` applied to both branches, ``drop_path2`` never called, both at the
    same rate as timm builds them: moved alone to probability 1, ``drop_path2`` drops
    nothing, and the failure names it, at the default profile."""
    from resverify.blocks.check import run_law
    from tests.blocks.broken_blocks import BUGS

    recipe = BUGS["second_drop_path_dead"].recipe
    module = make_case(recipe, "float32", "train", DRAW).module
    rates = [module.get_submodule(f"drop_path{k}").drop_prob for k in (1, 2)]
    assert rates == [DROP, DROP], f"the two rates {rates}, expected equal as timm builds them"
    record = run_law(recipe, "drop_path", "float32", "train", shrink=False)
    call = "run_law(SecondDropPathDead, 'drop_path', 'float32', 'train')"
    assert record.verdict == "fail", f"{call}: {record.line()}, expected a failure"
    assert "alone at probability" in record.message and \
        "'drop_path2' does not govern site 1's rows" in record.message, \
        f"{call}: {record.message}"


def test_each_site_is_moved_alone_and_a_swapped_module_is_named() -> None:
    """Each site's module governing the other site's rows (swapped) fails when one is
    moved alone, naming the module of the site whose rows disobey it."""
    case = make_case(scaled_recipe("SwappedDropPaths", SwappedDropPaths), "float32", "train",
                     DRAW)
    with pytest.raises(PropertyFailure, match=r"'drop_path1' does not govern site 0's rows"):
        drop_path(case)


class SwappedDropPaths(ScaledEncoderLayer):
    """``drop_path2`` on the attention branch and ``drop_path1`` on the feed-forward one."""

    def forward(self, src: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        x = src + self.drop_path2(self.attend(src))
        return x + self.drop_path1(self.feed(x))


def test_the_statistics_set_equal_rates_apart() -> None:
    from resverify.blocks.laws_drop import APART, _apart

    case = make_case(CORRECT["scaled"], "float32", "train", DRAW)
    assert _apart(case, [0, 1]) == {0: DROP, 1: next(p for p in APART if p != DROP)}, \
        "equal rates of two sites, expected the second set apart"
