"""Meta-tests of the forward-mode properties: each fails on a backend with a planted bug.

Every property of ``properties/test_jvp.py`` is run as it is (same strategies, same
pinned examples) against the broken backends of :mod:`tests.broken_jvp_backends` (and,
for the duality, a reverse-mode bug of :mod:`tests.broken_backends`: a tangent and
gradients that disagree show whichever side is wrong), and must raise a PropertyFailure
naming the backend; :mod:`tests.test_meta_properties` checks that each passes on the
unbroken base and that every property appears in some CATCHES list.
"""

from __future__ import annotations

import pytest

from tests import broken_backends as bb
from tests import broken_jvp_backends as bj
from tests.test_meta_properties import CATCH, CI_GENERATED, run_property

# (property, dtype, broken backend it must catch)
JVP_CATCHES: list[tuple[str, str, type[bb.Reference]]] = [
    ("tangent_matches_spec_within_budget", "float64", bj.DroppedIdentityTangent),
    ("tangent_matches_spec_within_budget", "float32", bj.NoAlphaTangent),
    ("tangent_matches_spec_within_budget", "float64", bj.TransposedLinearTangent),
    ("tangent_matches_spec_within_budget", "float64", bj.TangentPooledByShape),
    ("tangent_matches_spec_within_budget", "float16", bj.ReluOfTangent),
    ("norm_stack_tangent_matches_spec_within_budget", "float64", bj.NormStatisticsDetached),
    ("norm_stack_tangent_matches_spec_within_budget", "float32", bj.DroppedIdentityTangent),
    ("tangent_and_gradients_satisfy_duality", "float64", bj.TransposedLinearTangent),
    ("tangent_and_gradients_satisfy_duality", "float32", bj.NoAlphaTangent),
    ("tangent_and_gradients_satisfy_duality", "float64", bb.MissingIdentityBackward),
    ("tangent_is_linear_in_the_input_tangents", "float64", bj.ReluOfTangent),
    ("tangent_is_linear_in_the_input_tangents", "float16", bj.ReluOfTangent),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float64", bj.DroppedIdentityTangent),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float32", bj.NoAlphaTangent),
    ("shared_operand_tangent_is_k_times_the_input_tangent", "float64",
     bj.DedupedOperandTangent),
    ("forward_mode_leaves_inputs_and_tangents_unchanged", "float64", bj.TangentMergedInPlace),
]


@pytest.mark.parametrize(("law", "dtype", "broken"), JVP_CATCHES,
                         ids=[f"{p}-{b.__name__}-{d}" for p, d, b in JVP_CATCHES])
def test_forward_mode_property_catches_its_broken_backend(
        law: str, dtype: str, broken: type[bb.Reference]) -> None:
    failure = run_property(law, broken(), dtype, CATCH)
    assert failure is not None, (
        f"property {law} passed {CATCH.max_examples} examples against {broken.__name__} "
        f"[{dtype}]: it no longer catches '{broken.__doc__}'")
    assert broken.name in str(failure), f"failure does not name the backend: {failure}"
    assert failure.kind == "law", f"caught as {failure.kind}, not as a broken law: {failure}"


def test_every_broken_forward_mode_backend_is_used() -> None:
    used = {broken for _, _, broken in JVP_CATCHES}
    unused = sorted(b.__name__ for b in set(bj.BROKEN_JVP) - used)
    assert not unused, f"broken forward-mode backends no property catches: {unused}"


# the bugs that need a drawn program to show (two same-shaped weights, a non-symmetric
# square weight, a norm, an in-place merge), found by generated examples alone under ci
GENERATED = [
    ("tangent_matches_spec_within_budget", "float64", bj.TangentPooledByShape),
    ("tangent_matches_spec_within_budget", "float64", bj.TransposedLinearTangent),
    ("tangent_and_gradients_satisfy_duality", "float64", bj.TransposedLinearTangent),
    ("tangent_and_gradients_satisfy_duality", "float32", bj.NoAlphaTangent),
    ("norm_stack_tangent_matches_spec_within_budget", "float32", bj.NormStatisticsDetached),
    ("alpha_zero_passes_the_input_tangent_unchanged", "float64", bj.DroppedIdentityTangent),
    ("forward_mode_leaves_inputs_and_tangents_unchanged", "float64", bj.TangentMergedInPlace),
]


@pytest.mark.parametrize(("law", "dtype", "broken"), GENERATED,
                         ids=[f"{p}-{b.__name__}-{d}" for p, d, b in GENERATED])
def test_ci_profile_catches_forward_mode_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[bb.Reference]) -> None:
    failure = run_property(law, broken(), dtype, CI_GENERATED)
    assert failure is not None, (
        f"{law} passed {CI_GENERATED.max_examples} generated examples against "
        f"{broken.__name__} [{dtype}]: '{broken.__doc__}'")
