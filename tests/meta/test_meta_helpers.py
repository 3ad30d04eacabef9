"""The meta-test helpers of :mod:`tests.meta.runner` can fail: a catch that is not one and a
base that is broken are each reported, and the catch tables read from the catalog hold
exactly the kills declared for their laws.

The meta-tests are only as honest as these helpers; each check here is run on an input
that must break it, with the property and backends kept small so it stays quick.
"""

from __future__ import annotations

import pytest

from tests import mutants as catalog
from tests.meta import runner as meta
from tests.mutants.base import Kill, Mutant

LAW = "output_and_gradients_are_affine_in_alpha"


def test_assert_caught_fails_on_a_backend_without_the_bug() -> None:
    with pytest.raises(AssertionError, match=f"property {LAW} passed .* against Mutant"):
        meta.assert_caught(LAW, "float64", catalog.Mutant, meta.CONTROL)


def test_assert_caught_fails_on_a_catch_of_another_kind() -> None:
    meta.assert_caught(LAW, "float64", catalog.AlphaSquared, meta.CATCH, kind="law")
    with pytest.raises(AssertionError, match="caught as law, not as crash"):
        meta.assert_caught(LAW, "float64", catalog.AlphaSquared, meta.CATCH, kind="crash")


def test_assert_passes_on_the_bases_fails_where_a_base_is_broken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    meta.assert_passes_on_the_bases(LAW)
    monkeypatch.setattr(meta, "BASES", (catalog.Mutant, catalog.AlphaSquared))
    with pytest.raises(AssertionError, match="fails on the bug-free AlphaSquared"):
        meta.assert_passes_on_the_bases(LAW)


class _Pinned(Mutant):
    """A stand-in entry for the table tests (never run)."""

    kills = (Kill(LAW, "float32"), Kill("other_law", kind="raised"),
             Kill(LAW, kind="bad_result", pinned=False, generated=True))


def test_catches_reads_the_kills_of_the_laws_asked_for_and_by_their_settings() -> None:
    kills = [(kill, _Pinned) for kill in _Pinned.kills]
    assert meta.catches({LAW}, kills=kills) == [(LAW, "float32", _Pinned, "law")]
    assert meta.catches({LAW}, generated=True, kills=kills) == [
        (LAW, "float64", _Pinned, "bad_result")]
    assert meta.catches({"other_law", LAW}, kills=kills) == [
        (LAW, "float32", _Pinned, "law"), ("other_law", "float64", _Pinned, "raised")]
    assert meta.catches({"no_such_law"}, kills=kills) == []


def test_the_catalog_kills_are_each_entrys_own() -> None:
    """A subclass does not inherit its parent's kills: only what a class declares counts."""

    class Child(catalog.AlphaSquared):
        pass

    assert Child.kills, "the parent declares kills: the test needs some to inherit"
    got = catalog.kills_of((catalog.AlphaSquared, Child))
    assert got == tuple((kill, catalog.AlphaSquared) for kill in catalog.AlphaSquared.kills), got


def test_law_tables_split_the_suite_into_three_disjoint_parts() -> None:
    jvp, norm, general = meta.jvp_laws(), meta.norm_laws(), meta.general_laws()
    assert "tangent_matches_spec_within_budget" in jvp, sorted(jvp)
    assert "norm_stacks_match_spec_within_budget" in norm, sorted(norm)
    assert LAW in general, sorted(general)
    assert not (jvp & norm or jvp & general or norm & general), (jvp, norm, general)


def test_statistical_keeps_variance_laws_measured_on_samples() -> None:
    table: list[meta.Catch] = [
        ("independent_updates_add_their_variances", "float64", catalog.AlphaSquared, "law"),
        ("sample_variance_of_merge_is_sum_plus_twice_covariance", "float64",
         catalog.AlphaSquared, "law"),
        (LAW, "float64", catalog.AlphaSquared, "law")]
    assert meta.statistical(table) == table[:1], meta.statistical(table)


def test_catch_params_ids_name_law_backend_and_dtype() -> None:
    (param,) = meta.catch_params([(LAW, "float16", catalog.AlphaSquared, "law")])
    assert param.id == f"{LAW}-AlphaSquared-float16", param.id
    assert param.values == (LAW, "float16", catalog.AlphaSquared, "law"), param.values
