"""Meta-tests: every property of the suite fails on a backend with a planted bug.

Each property test in ``properties/`` is run as it is (same strategies, same pinned
examples) against a broken backend, with a settings object that skips shrinking so a
catch is quick; it must raise a PropertyFailure naming the backend. The bug comes from
the mutant catalog (``catalog.*``) where the catalog plants it, else from
:mod:`tests.broken_backends` (``bb.*``). Each property must also pass on the bug-free
bases, so a catch is due to the planted bug, and every property must appear in some catch
list (:data:`CATCHES`, ``NORM_CATCHES``, ``JVP_CATCHES``). The running is
:mod:`tests.meta.runner`'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from resverify.impl.backend import Backend
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import PROFILES
from tests import broken_backends as bb
from tests import mutants as catalog
from tests.meta.runner import (
    CATCH,
    CI_GENERATED,
    CONTROL,
    GENERATED_ONLY,
    Catch,
    assert_caught,
    assert_passes_on_the_bases,
    catch_params,
    needed_ops,
    property_tests,
    run_property,
    strays,
    unplanted,
)

ROOT = Path(__file__).resolve().parents[2]

# (property, dtype, broken backend it must catch)
CATCHES: list[Catch] = [
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.Float32InFloat64),
    ("forward_and_gradients_match_spec_within_budget", "float64", catalog.ReluGradOneAtZero),
    ("forward_and_gradients_match_spec_within_budget", "float32", catalog.DroppedIdentityGrad),
    ("forward_and_gradients_match_spec_within_budget", "float16", catalog.AlphaSquared),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.WidePrecisionSwitch),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.SharedWeightGrads),
    ("gradient_matches_central_differences", "float64", bb.UntransposedLinear),
    ("add_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
     bb.WrongAxisUnbroadcast),
    ("mul_broadcasts_and_sums_gradients_over_broadcast_axes", "float32",
     bb.WrongAxisUnbroadcast),
    ("residual_add_rejects_every_shape_mismatch", "float64", catalog.BroadcastingMerge),
    ("residual_add_rejects_every_shape_mismatch", "float64", bb.StrictAdd),
    ("residual_add_rejects_every_shape_mismatch", "float32", bb.MutatingReject),
    ("shared_operand_receives_k_times_the_cotangent", "float64", bb.OverwrittenGrads),
    ("zero_branch_is_identity_and_still_learns", "float64", bb.SkipZeroBranch),
    ("zero_branch_is_identity_and_still_learns", "float32", catalog.DroppedIdentityGrad),
    ("branch_zero_at_one_input_still_passes_gradient", "float64", bb.SkipZeroBranch),
    ("alpha_zero_is_identity_and_branch_gets_no_gradient", "float64", catalog.FalsyAlpha),
    ("output_and_gradients_are_affine_in_alpha", "float64", catalog.AlphaSquared),
    ("residual_stack_gradient_is_one_plus_a_to_the_depth", "float64", catalog.DroppedIdentityGrad),
    ("plain_stack_gradient_is_a_to_the_depth", "float64", catalog.AlphaSquared),
    ("stack_output_is_input_plus_sum_of_branches", "float64", catalog.AlphaSquared),
    ("block_with_a_minus_one_cancels_gradient_exactly", "float64", bb.OverwrittenGrads),
    ("sample_variance_of_merge_is_sum_plus_twice_covariance", "float64", bb.Float32InFloat64),
    ("independent_updates_add_their_variances", "float64", bb.CorrelatedUpdates),
    ("inverse_sqrt_depth_scaling_keeps_unit_variance", "float64", bb.IgnoresScale),
    ("inverse_sqrt_depth_scaling_keeps_unit_variance", "float64", bb.CorrelatedUpdates),
    ("branch_depending_on_input_breaks_naive_variance_sum", "float64", catalog.AlphaSquared),
    ("same_request_gives_bitwise_identical_results", "float64", bb.Nondeterministic),
    ("backend_never_mutates_inputs", "float64", bb.MutatingMerge),
    ("results_have_declared_shapes_and_dtype", "float32", bb.WrongDtype),
    ("residual_add_rejects_equal_size_shape_pairs", "float64", catalog.BroadcastingMerge),
    ("relu_gradient_is_exact_near_zero", "float64", catalog.ReluGradOneAtZero),
    ("stack_of_one_branch_family_matches_spec", "float64", catalog.DroppedIdentityGrad),
]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(CATCHES))
def test_property_catches_its_broken_backend(law: str, dtype: str, broken: type[Backend]) -> None:
    assert_caught(law, dtype, broken, CATCH)


# planted where coverage was thin: found by generated examples alone, under the ci profile
THIN: list[Catch] = [
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.WidePrecisionSwitch),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.SharedWeightGrads),
    ("add_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
     bb.WrongAxisUnbroadcast),
    ("mul_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
     bb.WrongAxisUnbroadcast)]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(THIN))
def test_ci_profile_catches_size_and_layout_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[Backend]) -> None:
    """Wide layers, same-shaped weight stacks and broadcasting with random cotangents."""
    assert_caught(law, dtype, broken, CI_GENERATED)


STATISTICAL = [(law, dtype, broken) for law, dtype, broken in CATCHES
               if "variance" in law and "sample" not in law]


@pytest.mark.parametrize(("law", "dtype", "broken"), catch_params(STATISTICAL))
def test_statistical_property_has_power_on_generated_streams(
        law: str, dtype: str, broken: type[Backend]) -> None:
    """Not only the pinned seed example: freshly generated streams expose the bug too."""
    assert_caught(law, dtype, broken, GENERATED_ONLY)


@pytest.mark.parametrize("law", sorted(property_tests()))
def test_property_passes_on_the_unbroken_base(law: str) -> None:
    assert_passes_on_the_bases(law)


@pytest.mark.parametrize("law", sorted(property_tests()))
def test_every_example_of_a_property_is_counted(law: str) -> None:
    """The count comes from the run, not from the test body: each explicit example and
    each generated one Hypothesis ran is counted once."""
    test = property_tests()[law]
    explicit = len(getattr(test, "hypothesis_explicit_examples", []))
    seen: list[int] = []
    run = PropertyRun(law, "numpy", bb.Reference())
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]

    def observed(*args: Any, **kwargs: Any) -> None:
        seen.append(run.examples)  # the count while the example runs
        inner(*args, **kwargs)

    test.hypothesis.inner_test = observed  # type: ignore[attr-defined]
    try:
        assert run_property(law, bb.Reference(), "float64", CONTROL, run) is None
    finally:
        test.hypothesis.inner_test = inner  # type: ignore[attr-defined]
    assert seen == list(range(1, len(seen) + 1)), seen  # counted once, before it ran
    assert run.examples == len(seen) >= explicit + 1, (run.examples, explicit)


def test_every_property_has_a_broken_backend_it_catches() -> None:
    from tests.meta.test_meta_jvp import JVP_CATCHES  # they import this module: import here
    from tests.meta.test_meta_norm import NORM_CATCHES

    caught = {law for law, _, _ in CATCHES + NORM_CATCHES + JVP_CATCHES}
    missing = sorted(set(property_tests()) - caught)
    assert not missing, f"properties without a broken backend in CATCHES: {missing}"
    stale = sorted(caught - set(property_tests()))
    assert not stale, f"CATCHES names properties that do not exist: {stale}"


def test_every_broken_backend_is_used() -> None:
    unused = unplanted(bb.BROKEN, CATCHES)
    assert not unused, f"broken backends no property of CATCHES catches: {unused}"
    unknown = strays(CATCHES, bb.BROKEN, catalog.CATALOG)
    assert not unknown, f"CATCHES uses backends neither in bb.BROKEN nor the catalog: {unknown}"


def examples_per_property(backend: str, tmp_path: Path) -> tuple[dict[str, int | None], str]:
    """Run the whole property suite (ci profile) on ``backend`` in a child pytest.

    Returns the examples each test ran, by test id (None for a skipped test), and the
    output, which holds Hypothesis' statistics: its events count rejected examples.
    """
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "RESVERIFY_PROFILE": "ci", "RESVERIFY_VECTOR_DIR": str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "properties", "--backend", backend, f"--junitxml={junit}",
         "--hypothesis-show-statistics"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    counts: dict[str, int | None] = {}
    for case in ET.parse(junit).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        skipped = case.find("skipped") is not None
        counts[case.get("name", "")] = None if skipped else int(props.get("examples") or 0)
    return counts, done.stdout


@pytest.mark.slow  # a child pytest of the whole suite: about 40 s
def test_backend_claiming_a_subset_of_ops_gets_every_example(tmp_path: Path) -> None:
    """No thinning: every property whose needed ops the float64 subset backend claims runs
    its full ci example count there."""
    counts, out = examples_per_property("tests.broken_backends:Float64Subset", tmp_path)
    rejected = [line.strip() for line in out.splitlines() if "rejected, unclaimed" in line]
    assert not rejected, f"examples generated, then thrown away: {rejected}"
    ran = {name: n for name, n in counts.items() if n is not None}
    laws = {law for law, test in property_tests().items() if needed_ops(test) <= set(bb.SUBSET_OPS)}
    assert len(laws) < len(property_tests()), "the subset claims every op: nothing is unclaimed"
    assert {name.split("[")[0].removeprefix("test_") for name in ran} == laws, counts
    want = PROFILES["ci"].max_examples
    thin = {name: n for name, n in ran.items() if n < want}
    assert not thin, f"properties that ran fewer than {want} examples on {bb.SUBSET_OPS}: {thin}"
