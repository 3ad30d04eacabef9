"""Meta-tests of the normalization properties: each one catches a planted wiring or
numerical bug (tests/broken_norm_backends.py), and each broken backend is caught.

The properties run exactly as the suite runs them (same strategies, same pinned
examples), through :mod:`tests.meta.runner`; ``tests/meta/test_meta_properties.py`` also checks that
every property passes on the bug-free bases and counts its examples.
:data:`NORM_CATCHES` is the normalization part of the suite's catch list: every property
of test_norm.py, and the variance and depth laws that run through a norm.
"""

from __future__ import annotations

import pytest

from resverify.impl.backend import Backend
from tests import broken_backends as bb
from tests import broken_norm_backends as bn
from tests import mutants as catalog
from tests.meta.runner import (
    CATCH,
    GENERATED_ONLY,
    Catch,
    assert_caught,
    catch_params,
    needed_ops,
    property_tests,
    unplanted,
)

# (property, dtype, broken backend it must catch)
NORM_CATCHES: list[Catch] = [
    ("norm_stacks_match_spec_within_budget", "float64", bn.NormTwice),
    ("norm_stacks_match_spec_within_budget", "float32", bn.IdentityCarriesNorm),
    ("norm_stacks_match_spec_within_budget", "float64", bn.PostAsPre),
    ("pre_norm_zero_branch_stack_is_exact_identity", "float64", bn.IdentityCarriesNorm),
    ("pre_norm_zero_branch_stack_is_exact_identity", "float16", bn.IdentityCarriesNorm),
    ("post_norm_zero_branch_stack_is_the_normalization", "float64", bn.PostAsPre),
    ("post_norm_zero_branch_stack_is_the_normalization", "float32", bn.NormTwice),
    ("norm_output_has_mean_zero_and_mean_square_one_up_to_eps", "float64",
     bn.UncentredLayerNorm),
    ("layer_norm_is_invariant_to_shifting_its_input", "float32", bn.OnePassVariance),
    ("layer_norm_is_invariant_to_shifting_its_input", "float64", bn.UncentredLayerNorm),
    ("scaling_the_input_moves_into_eps", "float64", bn.EpsOutsideSqrt),
    ("layer_norm_gradient_is_orthogonal_to_constants", "float64", bn.NoMeanInBackward),
    ("residual_add_refuses_a_width_change_even_where_add_broadcasts", "float64",
     catalog.BroadcastingMerge),
    ("projection_shortcut_gradient_is_both_paths", "float64", bn.DetachedProjection),
    ("post_norm_stream_stays_normalized_at_every_depth", "float64", bn.PostAsPre),
    ("post_norm_stream_stays_normalized_at_every_depth", "float32", bn.NormTwice),
    ("pre_norm_gradient_keeps_the_identity_highway_at_every_depth", "float64",
     bn.IdentityCarriesNorm),
    ("pre_norm_gradient_keeps_the_identity_highway_at_every_depth", "float32",
     bn.DetachedNormStatistics),
    ("post_norm_gradient_passes_through_every_norm_at_every_depth", "float64",
     bn.DetachedNormStatistics),
    ("post_norm_gradient_passes_through_every_norm_at_every_depth", "float64",
     bn.NoMeanInBackward),
    ("pre_norm_stream_variance_grows_linearly_with_depth", "float64", bn.SkippedNorm),
    ("pre_norm_stream_variance_grows_linearly_with_depth", "float32", bb.CorrelatedUpdates),
    ("post_norm_block_keeps_stream_variance_constant_with_depth", "float64", bn.SkippedNorm),
    ("post_norm_block_keeps_stream_variance_constant_with_depth", "float32", bn.PostAsPre),
]

NORM_LAWS = {law for law, fn in property_tests().items()
             if fn.__module__.endswith("test_norm")
             or (fn.__module__.endswith(("test_variance", "test_depth"))
                 and needed_ops(fn) & {"layer_norm", "rms_norm"})}
STATISTICAL = [(law, dtype, broken) for law, dtype, broken in NORM_CATCHES if "variance" in law]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(NORM_CATCHES))
def test_norm_property_catches_its_broken_backend(law: str, dtype: str,
                                                  broken: type[Backend]) -> None:
    assert_caught(law, dtype, broken, CATCH)


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(STATISTICAL))
def test_statistical_norm_property_has_power_on_generated_streams(
        law: str, dtype: str, broken: type[Backend]) -> None:
    """Not only the pinned seed example: freshly generated streams expose the bug too."""
    assert_caught(law, dtype, broken, GENERATED_ONLY)


def test_every_norm_property_has_a_broken_backend_it_catches() -> None:
    caught = {law for law, _, _ in NORM_CATCHES}
    assert NORM_LAWS, "no property found in properties/test_norm.py"
    assert caught == NORM_LAWS, (f"without a catch: {sorted(NORM_LAWS - caught)}; "
                                 f"not a norm property: {sorted(caught - NORM_LAWS)}")


def test_every_broken_norm_backend_is_used() -> None:
    unused = unplanted(bn.BROKEN_NORM, NORM_CATCHES)
    assert not unused, f"broken norm backends no property of NORM_CATCHES catches: {unused}"
