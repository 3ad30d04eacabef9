"""Meta-tests: every property of the suite fails on a backend with a planted bug.

Each property test in ``properties/`` is run as it is (same strategies, same pinned
examples) against a broken backend, with a settings object that skips shrinking so a
catch is quick; it must raise a PropertyFailure naming the backend. Which backend each
property must catch is not written here: every entry of the catalog (:mod:`tests.mutants`)
declares its killers, and :data:`CATCHES` is read from there (the laws that are neither
forward-mode nor normalization laws; ``test_meta_norm`` and ``test_meta_jvp`` run the
rest). Each property must also pass on the bug-free base, so a catch is due to the planted
bug, and every property must be the declared killer of some entry. The running is
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
from resverify.spec.ir import DTYPES
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
    catches,
    general_laws,
    jvp_laws,
    needed_ops,
    norm_laws,
    property_tests,
    representatives,
    run_property,
    split_families,
    statistical,
)

ROOT = Path(__file__).resolve().parents[2]

CATCHES: list[Catch] = catches(general_laws())
"""(property, dtype, broken backend it must catch, kind): the catalog's kills of these laws."""


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(CATCHES))
def test_property_catches_its_broken_backend(law: str, dtype: str, broken: type[Backend],
                                             kind: str) -> None:
    assert_caught(law, dtype, broken, CATCH, kind)


THIN: list[Catch] = catches(general_laws() | norm_laws(), generated=True)
"""Kills planted where coverage was thin: found by generated examples alone, under ci."""


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(THIN))
def test_ci_profile_catches_size_and_layout_bugs_on_generated_examples(
        law: str, dtype: str, broken: type[Backend], kind: str) -> None:
    """Wide layers, same-shaped weight stacks and broadcasting with random cotangents."""
    assert_caught(law, dtype, broken, CI_GENERATED, kind)


STATISTICAL = statistical(CATCHES)


@pytest.mark.parametrize(("law", "dtype", "broken", "kind"), catch_params(STATISTICAL))
def test_statistical_property_has_power_on_generated_streams(
        law: str, dtype: str, broken: type[Backend], kind: str) -> None:
    """Not only the pinned seed example: freshly generated streams expose the bug too."""
    assert_caught(law, dtype, broken, GENERATED_ONLY, kind)


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
    run = PropertyRun(law, "numpy", catalog.Mutant())
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]

    def observed(*args: Any, **kwargs: Any) -> None:
        seen.append(run.examples)  # the count while the example runs
        inner(*args, **kwargs)

    test.hypothesis.inner_test = observed  # type: ignore[attr-defined]
    try:
        assert run_property(law, catalog.Mutant(), "float64", CONTROL, run) is None
    finally:
        test.hypothesis.inner_test = inner  # type: ignore[attr-defined]
    assert seen == list(range(1, len(seen) + 1)), seen  # counted once, before it ran
    assert run.examples == len(seen) >= explicit + 1, (run.examples, explicit)


def test_every_property_has_a_broken_backend_it_catches() -> None:
    """Every law has a foil: each property of the suite is the declared killer of some
    entry of the catalog, and every declared killer is a property of the suite."""
    killers = {kill.law for kill, _ in catalog.KILLS}
    missing = sorted(set(property_tests()) - killers)
    assert not missing, f"properties no entry of tests.mutants declares as its killer: {missing}"
    stale = sorted(killers - set(property_tests()))
    assert not stale, f"entries of tests.mutants declare killers that are no property: {stale}"



@pytest.mark.parametrize("table", ["CATCHES", "THIN", "STATISTICAL"])
def test_the_default_run_keeps_a_catch_of_every_law_and_every_foil(table: str) -> None:
    """The rest of the kill matrix is marked slow; each law and each foil of the table
    keeps one catch outside it (``tests.meta.runner.representatives``)."""
    rows = globals()[table]
    kept = representatives(rows)
    laws, foils = {c[0] for c in kept}, {c[2] for c in kept} & set(catalog.FOILS)
    assert laws == {c[0] for c in rows}, (table, sorted(laws), sorted({c[0] for c in rows}))
    want = {c[2] for c in rows} & set(catalog.FOILS)
    assert foils == want, (table, sorted(f.__name__ for f in want - foils))


KILLED_IN_A_CHILD_ONLY = {
    "CrashOnWideLinear": "it ends the process it runs in (os._exit), so only the child "
                         "pytest of make mutants can see it killed, as a crash",
    "StickyFallbackAfterRefusal": "its bug shows only after a refusal, and a law that "
                                  "refuses first compares bits, not values, with the spec: "
                                  "in make mutants the suite's earlier refusals set it off",
}
"""The entries that declare no kill, and why no property run in-process can kill them."""


def test_every_entry_declares_a_law_that_kills_it() -> None:
    """Each scored mutant and each foil names its killers, but the few only a whole suite
    in a child process kills (:data:`KILLED_IN_A_CHILD_ONLY`)."""
    silent = {e.__name__ for e in catalog.ENTRIES if not vars(e).get("kills")}
    assert silent == set(KILLED_IN_A_CHILD_ONLY), (
        f"entries of tests.mutants that declare no law to kill them: "
        f"{sorted(silent - set(KILLED_IN_A_CHILD_ONLY))}; declare kills now: "
        f"{sorted(set(KILLED_IN_A_CHILD_ONLY) - silent)}")


def test_every_declared_kill_is_run_by_a_meta_test() -> None:
    """Each kill names a dtype of the suite, is checked by at least one settings object,
    and its law belongs to exactly one meta-test module's table."""
    bad = [(kill, entry.__name__) for kill, entry in catalog.KILLS
           if kill.dtype not in DTYPES or not (kill.pinned or kill.generated)]
    assert not bad, f"kills that are never checked: {bad}"
    groups = [general_laws(), norm_laws(), jvp_laws()]
    assert set().union(*groups) == set(property_tests()), groups
    assert sum(len(g) for g in groups) == len(property_tests()), "a law in two tables"


REFUSAL_LAWS = (
    "refusal_leaves_the_backend_state_unchanged",
    "residual_add_rejects_every_shape_mismatch",
    "shape_mismatch_names_both_shapes_in_order",
    "refused_merge_leaves_its_inputs_untouched",
    "add_accepts_every_broadcastable_pair_residual_add_refuses",
)
"""The five laws of a refused merge (``properties/test_structure.py``)."""
RIVALS = [(law, tuple(o for o in REFUSAL_LAWS if o != law)) for law in REFUSAL_LAWS] + [
    ("backend_never_mutates_inputs", ("refused_merge_leaves_its_inputs_untouched",)),
    ("refused_merge_leaves_its_inputs_untouched", ("backend_never_mutates_inputs",)),
]
"""Each law with the laws that look at the same requests: its foil must pass those."""


@pytest.mark.parametrize(("law", "rivals"), RIVALS, ids=[f"{law}-vs-{len(r)}" for law, r in RIVALS])
def test_law_has_a_foil_that_no_neighbouring_law_catches(law: str, rivals: tuple[str, ...]) -> None:
    """A law split out of another is its own only if some entry declaring it as its killer
    passes every neighbouring law (in the dtype of the kill): the split is then real."""
    foils = [(kill.dtype, entry) for kill, entry in catalog.KILLS if kill.law == law]
    assert foils, f"no entry of tests.mutants declares {law} as its killer"
    caught: dict[str, list[str]] = {}
    for dtype, entry in foils:
        caught[entry.__name__] = [other for other in rivals
                                  if run_property(other, entry(), dtype, CATCH) is not None]
        if not caught[entry.__name__]:
            return
    pytest.fail(f"every foil of {law} is caught by a neighbouring law too: {caught}")


def examples_per_property(backend: str, tmp_path: Path
                          ) -> tuple[dict[str, tuple[int, int] | None], str]:
    """Run the whole property suite (ci profile) on ``backend`` in a child pytest.

    Returns the examples each test ran and the examples it asked for (its own
    ``max_examples``), by test id (None for a skipped test), and the
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
    counts: dict[str, tuple[int, int] | None] = {}
    for case in ET.parse(junit).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        skipped = case.find("skipped") is not None
        counts[case.get("name", "")] = None if skipped else (
            int(props.get("examples") or 0), int(props.get("max_examples") or 0))
    return counts, done.stdout


@pytest.mark.slow  # a child pytest of the whole suite: about 40 s
def test_backend_claiming_a_subset_of_ops_gets_every_example(tmp_path: Path) -> None:
    """No thinning: every property whose needed ops the float64 subset backend claims runs
    its full ci example count there."""
    counts, out = examples_per_property("tests.mutants:Float64Subset", tmp_path)
    rejected = [line.strip() for line in out.splitlines() if "rejected, unclaimed" in line]
    assert not rejected, f"examples generated, then thrown away: {rejected}"
    ran = {name: n for name, n in counts.items() if n is not None}
    subset = set(catalog.SUBSET_OPS)
    laws = {law for law, test in property_tests().items() if needed_ops(test) <= subset}
    assert len(laws) < len(property_tests()), "the subset claims every op: nothing is unclaimed"
    assert {name.split("[")[0].removeprefix("test_") for name in ran} == laws, counts
    want = PROFILES["ci"].max_examples
    thin = {name: n for name, (n, own) in ran.items() if n < own}
    assert not thin, f"properties that ran fewer examples than they ask on {subset}: {thin}"
    unsplit = {name: own for name, (_, own) in ran.items()
               if not split_families(property_tests()[name.split("[")[0].removeprefix("test_")])}
    short = {name: own for name, own in unsplit.items() if own < want}
    assert not short, f"unsplit properties asking fewer than ci's {want} examples: {short}"
