"""A block law runs through the suite's driver (:mod:`resverify.properties.driver`): its
examples counted and its shrinking capped as an IR law's are, its shrunk example kept."""

from __future__ import annotations

from typing import Any

import pytest

from resverify.blocks import check
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import run_law
from resverify.blocks.laws import LAWS, Law
from resverify.blocks.trace import Case
from resverify.properties import driver
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import shrink_limit

REPLAYS = 2  # Hypothesis runs the counterexample it reports again, to report it


def _failing_on_large_seeds(calls: list[int]) -> Law:
    """A zero-branch law that fails on every example seeded 1000 or more (so a shrink has
    somewhere to go: down to 1000), noting each example's seed."""

    def fails(case: Case) -> dict[str, float]:
        calls.append(case.inputs.seed)
        if case.inputs.seed >= 1000:
            case.fail("zero_branch", f"seed {case.inputs.seed} >= 1000")
        return {}

    return Law("zero_branch", fails)


def test_a_block_law_stops_shrinking_at_its_profiles_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A law's first counterexample is shrunk; under a capped profile the examples after it
    are at most the profile's cap (and the report of the shrunk one), where the uncapped
    ``thorough`` profile runs more: the cap is what stops it. The record counts every
    example run, as the IR suite's records do, and keeps the failing example's draw."""
    profile = "dev"  # the smallest cap, 10 (this law's shrinking needs about 40)
    calls: list[int] = []
    monkeypatch.setitem(LAWS, "zero_branch", _failing_on_large_seeds(calls))
    limit = shrink_limit(profile)
    assert limit is not None, profile
    call = f'run_law(encoder(True), "zero_branch", "float32", "eval", profile={profile!r})'
    capped = run_law(encoder(True), "zero_branch", "float32", "eval", max_examples=25,
                     profile=profile)
    calls_capped = list(calls)
    ran_capped = len(calls)
    calls.clear()
    uncapped = run_law(encoder(True), "zero_branch", "float32", "eval", max_examples=25,
                       profile="thorough")
    assert (capped.verdict, uncapped.verdict) == ("fail", "fail"), (capped.line(),
                                                                    uncapped.line())
    assert capped.examples == ran_capped, (
        f"{call}: the record says {capped.examples} examples, the law ran {ran_capped}")
    first = next(i for i, seed in enumerate(calls_capped) if seed >= 1000) + 1
    assert ran_capped - first <= limit + REPLAYS, (
        f"{call}: {ran_capped - first} examples after the first counterexample, cap {limit}")
    after = len(calls) - next(i for i, seed in enumerate(calls) if seed >= 1000) - 1
    assert after > limit + REPLAYS, (
        f"uncapped shrinking ran only {after} examples after the first: the cap {limit} "
        "changes nothing here")
    assert capped.draw is not None and capped.draw.seed >= 1000, capped.draw
    assert capped.message.startswith(f"zero_branch: seed {capped.draw.seed} >= 1000"), (
        capped.message, capped.draw)


def test_the_plugin_and_the_block_laws_count_examples_in_the_same_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example of a block law passes through the driver's one per-example function,
    :meth:`ExampleRun._example`, which the plugin's run inherits unchanged."""
    seen: list[Any] = []
    original = driver.ExampleRun._example

    def counted(self: driver.ExampleRun, inner: Any, args: Any, kwargs: Any) -> Any:
        seen.append(type(self))
        return original(self, inner, args, kwargs)

    monkeypatch.setattr(driver.ExampleRun, "_example", counted)
    record = run_law(encoder(True), "stream_dtype", "float32", "eval", max_examples=3)
    assert record.verdict == "pass" and record.examples == 3, record.line()
    assert seen == [driver.ExampleRun] * 3, seen
    assert check.ExampleRun is driver.ExampleRun and issubclass(PropertyRun, driver.ExampleRun)
    for name in ("_example", "counting", "shrink_examples"):
        assert name not in vars(PropertyRun), f"PropertyRun restates {name}"
