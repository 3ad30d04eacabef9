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

from resverify.blocks.check import Draw, make_case
from resverify.blocks.laws_drop import (
    CALLS,
    FALSE_ALARM,
    ROWS,
    binomial_pmf,
    binomial_tail,
    drop_path,
)
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
    case = make_case(scaled_recipe("IgnoresProbability", IgnoresProbability), "float32",
                     "train", DRAW)
    with pytest.raises(PropertyFailure, match=r"kept rows = 512 of 512, expected about 384"):
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
