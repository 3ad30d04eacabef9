"""The meta-test helpers of :mod:`tests.meta.runner` can fail: a catch that is not one, a base
that is broken, and a catch list that leaves a broken backend out are each reported.

The meta-tests are only as honest as these helpers; each check here is run on an input
that must break it, with the property and backends kept small so it stays quick.
"""

from __future__ import annotations

import pytest

from tests import broken_backends as bb
from tests import mutants as catalog
from tests.meta import runner as meta

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
    monkeypatch.setattr(meta, "BASES", (bb.Reference, catalog.AlphaSquared))
    with pytest.raises(AssertionError, match="fails on the bug-free AlphaSquared"):
        meta.assert_passes_on_the_bases(LAW)


def test_unplanted_and_strays_name_the_backends_a_catch_list_misses() -> None:
    catches: list[meta.Catch] = [(LAW, "float64", bb.IgnoresScale),
                                 (LAW, "float64", catalog.AlphaSquared)]
    assert meta.unplanted((bb.IgnoresScale, bb.StrictAdd), catches) == ["StrictAdd"]
    assert meta.strays(catches, (bb.IgnoresScale,)) == ["AlphaSquared"]
    assert meta.strays(catches, (bb.IgnoresScale,), catalog.CATALOG) == []


def test_catch_params_ids_name_law_backend_and_dtype() -> None:
    (param,) = meta.catch_params([(LAW, "float16", catalog.AlphaSquared)])
    assert param.id == f"{LAW}-AlphaSquared-float16", param.id
    assert param.values == (LAW, "float16", catalog.AlphaSquared), param.values
