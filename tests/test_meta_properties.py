"""Meta-tests: every property of the suite fails on a backend with a planted bug.

Each property test in ``properties/`` is run as it is (same strategies, same pinned
examples) against a broken backend from :mod:`tests.broken_backends`, with a settings
object that skips shrinking so a catch is quick; it must raise a PropertyFailure. Each
property must also pass on the unbroken base, so a catch is due to the planted bug, and
every property must appear in :data:`CATCHES`.

Hypothesis binds a test's settings when ``@given`` runs, so :func:`run_property` swaps
the bound settings object for the duration of one call (``_hypothesis_internal_use_settings``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings

from resverify import properties
from resverify.impl.backend import Backend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import PROFILES
from resverify.properties.strategies import claiming, drawing
from tests import broken_backends as bb

ROOT = Path(__file__).resolve().parents[1]

CATCH = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 phases=(Phase.explicit, Phase.generate))
CONTROL = settings(CATCH, max_examples=6)
GENERATED_ONLY = settings(CATCH, phases=(Phase.generate,))

# (property, dtype, broken backend it must catch)
CATCHES: list[tuple[str, str, type[bb.Reference]]] = [
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.Float32InFloat64),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.WrongReluDerivative),
    ("forward_and_gradients_match_spec_within_budget", "float32", bb.MissingIdentityBackward),
    ("forward_and_gradients_match_spec_within_budget", "float16", bb.AlphaTwice),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.WidePrecisionSwitch),
    ("forward_and_gradients_match_spec_within_budget", "float64", bb.SharedWeightGrads),
    ("gradient_matches_central_differences", "float64", bb.UntransposedLinear),
    ("add_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
     bb.WrongAxisUnbroadcast),
    ("mul_broadcasts_and_sums_gradients_over_broadcast_axes", "float32",
     bb.WrongAxisUnbroadcast),
    ("residual_add_rejects_every_shape_mismatch", "float64", bb.BroadcastingMerge),
    ("residual_add_rejects_every_shape_mismatch", "float64", bb.StrictAdd),
    ("residual_add_rejects_every_shape_mismatch", "float32", bb.MutatingReject),
    ("shared_operand_receives_k_times_the_cotangent", "float64", bb.OverwrittenGrads),
    ("zero_branch_is_identity_and_still_learns", "float64", bb.SkipZeroBranch),
    ("zero_branch_is_identity_and_still_learns", "float32", bb.MissingIdentityBackward),
    ("branch_zero_at_one_input_still_passes_gradient", "float64", bb.SkipZeroBranch),
    ("alpha_zero_is_identity_and_branch_gets_no_gradient", "float64", bb.FalsyAlpha),
    ("output_and_gradients_are_affine_in_alpha", "float64", bb.AlphaTwice),
    ("residual_stack_gradient_is_one_plus_a_to_the_depth", "float64", bb.MissingIdentityBackward),
    ("plain_stack_gradient_is_a_to_the_depth", "float64", bb.AlphaTwice),
    ("stack_output_is_input_plus_sum_of_branches", "float64", bb.AlphaTwice),
    ("block_with_a_minus_one_cancels_gradient_exactly", "float64", bb.OverwrittenGrads),
    ("sample_variance_of_merge_is_sum_plus_twice_covariance", "float64", bb.Float32InFloat64),
    ("independent_updates_add_their_variances", "float64", bb.CorrelatedUpdates),
    ("inverse_sqrt_depth_scaling_keeps_unit_variance", "float64", bb.IgnoresScale),
    ("inverse_sqrt_depth_scaling_keeps_unit_variance", "float64", bb.CorrelatedUpdates),
    ("branch_depending_on_input_breaks_naive_variance_sum", "float64", bb.AlphaTwice),
    ("same_request_gives_bitwise_identical_results", "float64", bb.Nondeterministic),
    ("backend_never_mutates_inputs", "float64", bb.MutatingMerge),
    ("results_have_declared_shapes_and_dtype", "float32", bb.WrongDtype),
    ("residual_add_rejects_equal_size_shape_pairs", "float64", bb.BroadcastingMerge),
    ("relu_gradient_is_exact_near_zero", "float64", bb.WrongReluDerivative),
    ("stack_of_one_branch_family_matches_spec", "float64", bb.MissingIdentityBackward),
]


def property_tests() -> dict[str, Callable[..., None]]:
    """Every property test of the suite by law name (``test_`` dropped)."""
    found: dict[str, Callable[..., None]] = {}
    for info in pkgutil.iter_modules(properties.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"resverify.properties.{info.name}")
            for name, fn in inspect.getmembers(module, inspect.isfunction):
                if name.startswith("test_") and fn.__module__ == module.__name__:
                    found[name.removeprefix("test_")] = fn
    return found


def _failures(exc: BaseException) -> Iterator[PropertyFailure]:
    if isinstance(exc, PropertyFailure):
        yield exc
    for inner in getattr(exc, "exceptions", ()):
        yield from _failures(inner)


def run_property(name: str, backend: Backend, dtype: str, chosen: settings,
                 run: PropertyRun | None = None) -> PropertyFailure | None:
    """Run one property test against ``backend``, its examples counted in ``run`` as the
    plugin counts them; the PropertyFailure it raised, or None."""
    test: Any = property_tests()[name]
    run = PropertyRun(name, backend.name, backend) if run is None else run
    bound = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = chosen
    try:
        with (claiming(backend.capabilities.ops), drawing(dtype),
              run.counting(test)):
            test(backend=backend, dtype=dtype, prop=run)
    except BaseException as exc:
        failure = next(_failures(exc), None)
        if failure is None:
            raise
        return failure
    finally:
        test._hypothesis_internal_use_settings = bound
    return None


@pytest.mark.parametrize(("law", "dtype", "broken"), CATCHES,
                         ids=[f"{p}-{b.__name__}-{d}" for p, d, b in CATCHES])
def test_property_catches_its_broken_backend(law: str, dtype: str,
                                             broken: type[bb.Reference]) -> None:
    failure = run_property(law, broken(), dtype, CATCH)
    assert failure is not None, (
        f"property {law} passed {CATCH.max_examples} examples against {broken.__name__} "
        f"[{dtype}]: it no longer catches '{broken.__doc__}'")
    assert broken.name in str(failure), f"failure does not name the backend: {failure}"


# planted where coverage was thin: found by generated examples alone, under the ci profile
CI_GENERATED = settings(PROFILES["ci"], phases=(Phase.generate,))
THIN = [("forward_and_gradients_match_spec_within_budget", "float64", bb.WidePrecisionSwitch),
        ("forward_and_gradients_match_spec_within_budget", "float64", bb.SharedWeightGrads),
        ("add_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
         bb.WrongAxisUnbroadcast),
        ("mul_broadcasts_and_sums_gradients_over_broadcast_axes", "float64",
         bb.WrongAxisUnbroadcast)]


@pytest.mark.parametrize(("law", "dtype", "broken"), THIN,
                         ids=[f"{p}-{b.__name__}" for p, _, b in THIN])
def test_ci_profile_catches_size_and_layout_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[bb.Reference]) -> None:
    """Wide layers, same-shaped weight stacks and broadcasting with random cotangents."""
    failure = run_property(law, broken(), dtype, CI_GENERATED)
    assert failure is not None, (
        f"{law} passed {CI_GENERATED.max_examples} generated examples against "
        f"{broken.__name__} [{dtype}]: '{broken.__doc__}'")


STATISTICAL = [(law, dtype, broken) for law, dtype, broken in CATCHES
               if "variance" in law and "sample" not in law]


@pytest.mark.parametrize(("law", "dtype", "broken"), STATISTICAL,
                         ids=[f"{p}-{b.__name__}" for p, _, b in STATISTICAL])
def test_statistical_property_has_power_on_generated_streams(
        law: str, dtype: str, broken: type[bb.Reference]) -> None:
    """Not only the pinned seed example: freshly generated streams expose the bug too."""
    failure = run_property(law, broken(), dtype, GENERATED_ONLY)
    assert failure is not None, f"{law} missed {broken.__name__} on generated streams"


@pytest.mark.parametrize("law", sorted(property_tests()))
def test_property_passes_on_the_unbroken_base(law: str) -> None:
    failure = run_property(law, bb.Reference(), "float64", CONTROL)
    assert failure is None, f"property {law} fails on the unbroken base: {failure}"


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
    from tests.test_meta_jvp import JVP_CATCHES  # they import this module: import here
    from tests.test_meta_norm import NORM_CATCHES

    caught = {law for law, _, _ in CATCHES + NORM_CATCHES + JVP_CATCHES}
    missing = sorted(set(property_tests()) - caught)
    assert not missing, f"properties without a broken backend in CATCHES: {missing}"
    stale = sorted(caught - set(property_tests()))
    assert not stale, f"CATCHES names properties that do not exist: {stale}"


def test_every_broken_backend_is_used() -> None:
    used = {broken for _, _, broken in CATCHES}
    assert set(bb.BROKEN) == used, f"unused: {sorted(b.__name__ for b in set(bb.BROKEN) - used)}"


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


def needed_ops(test: Callable[..., None]) -> set[str]:
    """The ops a property's ``needs`` marker names (it is not run where one is unclaimed)."""
    marks = getattr(test, "pytestmark", [])
    return {op for mark in marks if mark.name == "needs" for op in mark.args}


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
