"""Meta-tests of the forward-mode properties: each fails on a backend with a planted bug.

Every property of ``properties/test_jvp.py`` is run as it is (same strategies, same
pinned examples) against a backend whose tangent is wrong and must raise a PropertyFailure
naming the backend, as a broken law. The bugs come from the catalog's forward-mode mutants
(``catalog.*``, :mod:`tests.mutants.forward`) where the catalog plants them, else
from :mod:`tests.broken_jvp_backends` (``bj.*``); for the duality, a reverse-mode bug of
the catalog (a tangent and gradients that disagree show whichever side is wrong).
``tests/meta/test_meta_properties.py`` checks that each passes on the bug-free bases and that
every property appears in some catch list; the running is :mod:`tests.meta.runner`'s.
"""

from __future__ import annotations

import pytest

from resverify.impl.backend import Backend
from tests import broken_jvp_backends as bj
from tests import mutants as catalog
from tests.meta.runner import (
    CATCH,
    CI_GENERATED,
    Catch,
    assert_caught,
    catch_params,
    strays,
    unplanted,
)

# (property, dtype, broken backend it must catch)
JVP_CATCHES: list[Catch] = [
    ("tangent_matches_spec_within_budget", "float64", catalog.TangentDropsIdentity),
    ("tangent_matches_spec_within_budget", "float32", catalog.TangentForgetsAlpha),
    ("tangent_matches_spec_within_budget", "float64", catalog.TangentThroughTransposedWeight),
    ("tangent_matches_spec_within_budget", "float64", bj.TangentPooledByShape),
    ("tangent_matches_spec_within_budget", "float16", bj.ReluOfTangent),
    ("norm_stack_tangent_matches_spec_within_budget", "float64",
     catalog.NormTangentStatisticsDetached),
    ("norm_stack_tangent_matches_spec_within_budget", "float32", catalog.TangentDropsIdentity),
    ("tangent_and_gradients_satisfy_duality", "float64", catalog.TangentThroughTransposedWeight),
    ("tangent_and_gradients_satisfy_duality", "float32", catalog.TangentForgetsAlpha),
    ("tangent_and_gradients_satisfy_duality", "float64", catalog.DroppedIdentityGrad),
    ("tangent_is_linear_in_the_input_tangents", "float64", bj.ReluOfTangent),
    ("tangent_is_linear_in_the_input_tangents", "float16", bj.ReluOfTangent),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float64", catalog.TangentDropsIdentity),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float32", catalog.TangentForgetsAlpha),
    ("shared_operand_tangent_is_k_times_the_input_tangent", "float64",
     bj.DedupedOperandTangent),
    ("forward_mode_leaves_inputs_and_tangents_unchanged", "float64",
     catalog.TangentMergedInPlace),
]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(JVP_CATCHES))
def test_forward_mode_property_catches_its_broken_backend(
        law: str, dtype: str, broken: type[Backend]) -> None:
    assert_caught(law, dtype, broken, CATCH, kind="law")


def test_every_broken_forward_mode_backend_is_used() -> None:
    unused = unplanted(bj.BROKEN_JVP, JVP_CATCHES)
    assert not unused, f"broken forward-mode backends no property catches: {unused}"
    unknown = strays(JVP_CATCHES, bj.BROKEN_JVP, catalog.CATALOG)
    assert not unknown, f"in neither bj.BROKEN_JVP nor the catalog: {unknown}"


# the bugs that need a drawn program to show (two same-shaped weights, a non-symmetric
# square weight, a norm, an in-place merge), found by generated examples alone under ci
GENERATED: list[Catch] = [
    ("tangent_matches_spec_within_budget", "float64", bj.TangentPooledByShape),
    ("tangent_matches_spec_within_budget", "float64", catalog.TangentThroughTransposedWeight),
    ("tangent_and_gradients_satisfy_duality", "float64", catalog.TangentThroughTransposedWeight),
    ("tangent_and_gradients_satisfy_duality", "float32", catalog.TangentForgetsAlpha),
    ("norm_stack_tangent_matches_spec_within_budget", "float32",
     catalog.NormTangentStatisticsDetached),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float64", catalog.TangentDropsIdentity),
    ("forward_mode_leaves_inputs_and_tangents_unchanged", "float64",
     catalog.TangentMergedInPlace),
]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(GENERATED))
def test_ci_profile_catches_forward_mode_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[Backend]) -> None:
    assert_caught(law, dtype, broken, CI_GENERATED)
