"""Meta-tests of the normalization properties: each one catches a planted wiring or
numerical bug (the norm foils, :mod:`tests.mutants.foils_norm`, and any other entry of the
catalog that declares a norm law as its killer).

The properties run exactly as the suite runs them (same strategies, same pinned
examples), through :mod:`tests.meta.runner`; ``tests/meta/test_meta_properties.py`` also
checks that every property passes on the bug-free base and counts its examples.
:data:`NORM_CATCHES` is read from the catalog: the kills of every property of test_norm.py,
and of the variance and depth laws that run through a norm.
"""

from __future__ import annotations

import pytest

from resverify.impl.backend import Backend
from tests.meta.runner import (
    CATCH,
    GENERATED_ONLY,
    Catch,
    assert_caught,
    catch_params,
    catches,
    norm_laws,
    statistical,
)

NORM_LAWS = norm_laws()
NORM_CATCHES: list[Catch] = catches(NORM_LAWS)
"""(property, dtype, broken backend it must catch, kind): the catalog's kills of norm laws."""
STATISTICAL = statistical(NORM_CATCHES)


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(NORM_CATCHES))
def test_norm_property_catches_its_broken_backend(law: str, dtype: str, broken: type[Backend],
                                                  kind: str) -> None:
    assert_caught(law, dtype, broken, CATCH, kind)


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(STATISTICAL))
def test_statistical_norm_property_has_power_on_generated_streams(
        law: str, dtype: str, broken: type[Backend], kind: str) -> None:
    """Not only the pinned seed example: freshly generated streams expose the bug too."""
    assert_caught(law, dtype, broken, GENERATED_ONLY, kind)


def test_every_norm_property_has_a_broken_backend_it_catches() -> None:
    caught = {law for law, *_ in NORM_CATCHES}
    assert NORM_LAWS, "no property found in properties/test_norm.py"
    assert caught == NORM_LAWS, f"norm laws no entry declares as its killer: {NORM_LAWS - caught}"
