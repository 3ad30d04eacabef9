"""Meta-tests of the forward-mode properties: each fails on a backend with a planted bug.

Every property of ``properties/test_jvp.py`` is run as it is (same strategies, same
pinned examples) against a backend whose tangent is wrong and must raise a PropertyFailure
naming the backend, as the kind its kill declares (a broken law). The kills are read from
the catalog (:mod:`tests.mutants`): the scored forward-mode mutants, the forward-mode foils
(:mod:`tests.mutants.foils_forward`), and for the duality a reverse-mode bug (a tangent
and gradients that disagree show whichever side is wrong).
``tests/meta/test_meta_properties.py`` checks that each passes on the bug-free base and
that every property is some entry's declared killer; the running is
:mod:`tests.meta.runner`'s.
"""

from __future__ import annotations

import pytest

from resverify.impl.backend import Backend
from tests.meta.runner import (
    CATCH,
    CI_GENERATED,
    Catch,
    assert_caught,
    catch_params,
    catches,
    jvp_laws,
)

JVP_CATCHES: list[Catch] = catches(jvp_laws())
"""(property, dtype, broken backend it must catch, kind): the catalog's forward-mode kills."""


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(JVP_CATCHES))
def test_forward_mode_property_catches_its_broken_backend(
        law: str, dtype: str, broken: type[Backend], kind: str) -> None:
    assert_caught(law, dtype, broken, CATCH, kind)


def test_every_forward_mode_kill_is_caught_as_a_broken_law() -> None:
    """A forward-mode bug shows in ``J·t`` alone, so each kill declares the kind ``law``."""
    other = [(law, broken.__name__, kind) for law, _, broken, kind in JVP_CATCHES
             if kind != "law"]
    assert not other, f"forward-mode kills that do not demand a broken law: {other}"


GENERATED: list[Catch] = catches(jvp_laws(), generated=True)
"""The bugs that need a drawn program to show (two same-shaped weights, a non-symmetric
square weight, a norm, an in-place merge), found by generated examples alone under ci."""


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(GENERATED))
def test_ci_profile_catches_forward_mode_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[Backend], kind: str) -> None:
    assert_caught(law, dtype, broken, CI_GENERATED, kind)
