"""The portable corpus round-trips: export, every entry passes on numpy, and a deliberately
broken backend fails it with the verdicts the suite's own laws give it on the same pinned
examples. Entries follow the shipped schema; a malformed corpus is a one-line usage error.

The fast tests export every family but the variance laws (whose pinned examples are 100
layers of 768 samples) and compare three broken backends; the slow tests compare the rest
and export and run the whole corpus.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from resverify.cli.main import main
from resverify.cli.vectors import groups
from resverify.impl.backend import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties import corpus, plugin
from resverify.properties.assertions import PropertyFailure
from resverify.properties.pinned import pinned_examples
from resverify.properties.strategies import SENSIBLE, claiming, drawing
from resverify.reports.verdicts import vector_status, vector_verdict
from resverify.spec.errors import UsageError
from resverify.spec.ir import DTYPES
from resverify.spec.request import Request, Result
from tests import mutants as catalog

FAST = [prop for family, prop, _ in corpus._property_tests() if family != "variance"]
# forward-mode properties (marked jvp) send nothing the oracle answers until the spec
# computes tangents (corpus.modes())
FORWARD = {prop for _, prop, test in corpus._property_tests()
           if corpus.property_mode(test) == "jvp"}
Verdicts = dict[tuple[str, str], tuple[str, str | None]]
GROUPED = ("output_and_gradients_are_affine_in_alpha", "stack_output_is_input_plus_sum_of_branches",
           "tangent_and_gradients_satisfy_duality", "tangent_is_linear_in_the_input_tangents")
"""The pinned laws that relate several answers: each writes a group in every dtype."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus of every property but the variance laws, and every seed fixture."""
    out = tmp_path_factory.mktemp("corpus")
    corpus.export(out, [*FAST, "seed_fixture", "op_"])
    return out


def _corpus_verdicts(folder: Path, backend: Backend) -> Verdicts:
    rows = [{**{k: e.listing[k] for k in ("id", "property", "dtype")}, **vector_verdict(v)}
            for e, v in corpus.run(folder, backend)]
    return {key: (v["status"], v["kind"]) for key, v in groups(rows).items()}


def _suite_verdicts(backend: Backend) -> Verdicts:
    """Each property test of the suite on its pinned examples, on ``backend``: ``fail``
    with the first failure's kind, ``pass`` when an example reached the backend and none
    failed, else ``skipped``."""
    found: Verdicts = {}
    for _, prop, test in corpus._property_tests():
        if prop not in FAST or (prop in FORWARD and "jvp" not in corpus.modes()):
            continue
        needs = next((m.args for m in test.pytestmark if m.name == "needs"), ())
        for dtype in DTYPES:
            if plugin.capability_reason(backend, dtype, tuple(needs), corpus.property_mode(test)):
                found[(prop, dtype)] = ("skipped", None)
                continue
            found[(prop, dtype)] = _run_examples(Counted(backend), prop, test, dtype)
    return found


class Counted:
    """``backend``, counting the requests it is sent."""

    def __init__(self, backend: Backend) -> None:
        self.backend, self.sent = backend, 0
        self.name, self.capabilities = backend.name, backend.capabilities

    def run(self, request: Request) -> Result:
        self.sent += 1
        return self.backend.run(request)


def _run_examples(backend: Counted, prop: str, test: Any, dtype: str) -> tuple[str, str | None]:
    held = pinned_examples(test)
    for values in [] if held is None else held.examples:
        assert held is not None
        run = plugin.PropertyRun(prop, backend.name, backend)
        try:
            with claiming(backend.capabilities.ops), drawing(dtype, SENSIBLE):
                corpus.explicit_example(held.body, values, backend=backend, dtype=dtype,
                                        prop=run)
        except PropertyFailure as failure:
            return ("fail", failure.kind)
    return ("pass", None) if backend.sent else ("skipped", None)


def test_entries_and_manifest_follow_the_shipped_schema(folder: Path) -> None:
    """Every entry and the manifest; the schema is checked once (``jsonschema.validate``
    checks it again for each document: 80 ms an entry, which kept this to every 7th)."""
    schema = json.loads((folder / corpus.SCHEMA).read_text())
    assert schema == corpus.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    manifest = json.loads((folder / corpus.MANIFEST).read_text())
    validator.validate(manifest)
    for listing in manifest["entries"]:
        entry = json.loads((folder / listing["file"]).read_text())
        validator.validate(entry)
        assert entry["property"] == listing["property"] and entry["dtype"] == listing["dtype"]


def test_element_patterns_of_the_loader_are_the_schemas() -> None:
    defs = corpus.schema()["$defs"]
    assert defs["rational"]["pattern"] == f"^{corpus._RATIONAL.pattern}$"
    assert defs["bound"]["pattern"] == f"^({corpus._BOUND.pattern})$"


def test_corpus_covers_every_pinned_property_and_seed_fixture_in_every_dtype(
        folder: Path) -> None:
    from resverify.spec.fixtures import seed_cases

    listed = json.loads((folder / corpus.MANIFEST).read_text())["entries"]
    pairs = {(e["property"], e["dtype"]) for e in listed}
    pinned = [p for _, p, t in corpus._property_tests()
              if p in FAST and pinned_examples(t) is not None
              and (p not in FORWARD or "jvp" in corpus.modes())]
    fixtures = {"seed_fixture_" + name.split(".")[0] for name in seed_cases()}
    for name in [*pinned, *fixtures]:
        missing = [d for d in DTYPES if (name, d) not in pairs]
        assert not missing, f"{name}: no entry in {missing}"
    sources = {e["source"] for e in listed}
    assert set(seed_cases()) <= sources, set(seed_cases()) - sources
    assert {e["expect"] for e in listed} == {"value", "error", "group"}
    grouped = {(e["property"], e["dtype"]) for e in listed if e["expect"] == "group"}
    for name in set(GROUPED) & set(pinned):
        missing = [d for d in DTYPES if (name, d) not in grouped]
        assert not missing, f"{name}: no group in {missing}"
    ops = {e["property"].removeprefix("op_") for e in listed if e["family"] == "ops"}
    assert ops == set(corpus.OP_TABLE), set(corpus.OP_TABLE) - ops


def test_exact_values_are_rationals_and_tanh_entries_carry_their_enclosure(
        folder: Path) -> None:
    listed = json.loads((folder / corpus.MANIFEST).read_text())["entries"]
    s06 = next(e for e in listed if e["source"] == "S06.linear_block" and
               e["dtype"] == "float64")
    doc = json.loads((folder / s06["file"]).read_text())
    assert doc["expect"]["output"]["exact"] == ["1", "-13/4"], doc["expect"]["output"]
    assert doc["expect"]["enclosure"] == "0"
    tanh = [e for e in listed if "tanh" in e["ops"]]
    assert tanh, "no pinned example uses tanh"
    enclosures = [json.loads((folder / e["file"]).read_text())["expect"]["enclosure"]
                  for e in tanh]
    assert all(text != "0" for text in enclosures), enclosures


def test_numpy_passes_every_entry_it_claims(folder: Path) -> None:
    verdicts = list(corpus.run(folder, NumpyBackend()))
    failed = [(e.listing["id"], v.message) for e, v in verdicts if vector_status(v) == "fail"]
    assert not failed, failed[:3]
    skipped = {e.listing["dtype"] for e, v in verdicts if vector_status(v) == "skipped"}
    assert skipped == {"bfloat16"}, skipped
    assert sum(vector_status(v) == "pass" for _, v in verdicts) > 100


class ReverseModeOnly(NumpyBackend):
    """numpy claiming reverse mode only, as an adapter without forward mode does."""

    name = "numpy-vjp-only"
    capabilities = dataclasses.replace(NumpyBackend.capabilities, modes=("vjp",))


def test_forward_mode_entries_are_not_claimed_by_a_reverse_mode_backend(folder: Path) -> None:
    verdicts = list(corpus.run(folder, ReverseModeOnly()))
    forward = [(e.listing["id"], v) for e, v in verdicts
               if e.listing["mode"] == "jvp" and e.listing["dtype"] != "bfloat16"]
    assert len(forward) > 20 and any(e.listing["family"] == "ops_jvp" for e, _ in verdicts)
    wrong = [(i, v) for i, v in forward if vector_status(v) != "skipped" or
             "mode jvp not claimed" not in (v.unclaimed or "")]
    assert not wrong, wrong[:3]
    assert all(vector_status(v) != "fail" for _, v in verdicts)


def test_forward_mode_entries_hold_the_exact_tangent_and_its_budget(folder: Path) -> None:
    listed = json.loads((folder / corpus.MANIFEST).read_text())["entries"]
    entry = next(e for e in listed if e["property"] == "jvp_op_residual_add"
                 and e["dtype"] == "float64")
    doc = json.loads((folder / entry["file"]).read_text())
    request = doc["request"]
    tangents = [[float.fromhex(v) for v in request["tangents"][k]["data"]] for k in "ab"]
    want = [str(Fraction(a) + Fraction(b)) for a, b in zip(*tangents, strict=True)]
    assert doc["expect"]["tangent"]["exact"] == want, (doc["expect"]["tangent"], want)
    assert "inf" not in doc["expect"]["tangent"]["budget"]
    assert doc["checks"] == ["form", "output", "grads", "tangent"]


FAST_BROKEN = [catalog.DroppedIdentityGrad, catalog.WrongDtype, catalog.Float64Subset,
               catalog.TangentDropsIdentity]
SLOW_BROKEN = [catalog.MutatingReject, catalog.FalsyAlpha, catalog.BroadcastingMerge,
               catalog.StrictAdd, catalog.OverwrittenGrads, catalog.AlphaSquared,
               catalog.IgnoresScale, catalog.ReluGradOneAtZero, catalog.SkipZeroBranch,
               catalog.SharedWeightGrads, catalog.WrongAxisUnbroadcast,
               catalog.UntransposedLinear, catalog.MutatingMerge, catalog.Float32InFloat64,
               catalog.ReluOfTangent, catalog.TangentForgetsAlpha,
               catalog.TangentThroughTransposedWeight, catalog.TangentPooledByShape,
               catalog.DedupedOperandTangent, catalog.NormTangentStatisticsDetached,
               catalog.StaleBufferAfterRefusal, catalog.SwappedMismatchShapes]
BROKEN = [*FAST_BROKEN, *(pytest.param(b, marks=pytest.mark.slow) for b in SLOW_BROKEN)]


@pytest.mark.parametrize("broken", BROKEN, ids=lambda cls: cls.name)
def test_broken_backend_fails_the_corpus_as_the_suite_fails_it(
        folder: Path, broken: type[Backend]) -> None:
    backend = broken()
    ours, suite = _corpus_verdicts(folder, backend), _suite_verdicts(backend)
    unlisted = ("skipped", None)  # a property without pinned examples has no entries
    differ = {key: (ours.get(key, unlisted), suite[key]) for key in suite
              if ours.get(key, unlisted) != suite[key]}
    assert not differ, f"(corpus, suite) verdicts differ on {backend.name}: {differ}"
    assert any(status == "fail" for status, _ in ours.values()) or broken is catalog.Float64Subset


REFUSAL_LAWS = ("refusal_leaves_the_backend_state_unchanged",
                "residual_add_rejects_every_shape_mismatch",
                "shape_mismatch_names_both_shapes_in_order",
                "refused_merge_leaves_its_inputs_untouched",
                "add_accepts_every_broadcastable_pair_residual_add_refuses")
"""The five laws of a refused merge, each with its own entries in the corpus."""
REFUSAL_KILLS: dict[type[Backend], set[str]] = {
    catalog.StaleBufferAfterRefusal: {"refusal_leaves_the_backend_state_unchanged"},
    catalog.BroadcastingMerge: {"residual_add_rejects_every_shape_mismatch"},
    catalog.SwappedMismatchShapes: {"shape_mismatch_names_both_shapes_in_order"},
    catalog.MutatingReject: {"refused_merge_leaves_its_inputs_untouched"},
    catalog.StrictAdd: {"add_accepts_every_broadcastable_pair_residual_add_refuses"},
}
"""The one refusal law whose entries each foil fails (its declared kill among them); every
other refusal law's entries it passes, as it passes that law in the suite."""


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("refusals")
    corpus.export(out, REFUSAL_LAWS)
    return out


@pytest.mark.parametrize("broken", list(REFUSAL_KILLS), ids=lambda cls: cls.name)
def test_each_refusal_law_of_the_corpus_fails_exactly_its_own_foil(
        refusals: Path, broken: type[Backend]) -> None:
    """The state law's entries (a refusal between runs of its probe, check ``state``) fail
    a refusal that leaves a buffer busy and pass a merge that broadcasts; the shapes law's
    (check ``shapes``) fail swapped shapes and pass a value; so each foil fails exactly the
    law it was written for."""
    verdicts = list(corpus.run(refusals, broken()))
    failed = {e.listing["property"] for e, v in verdicts if vector_status(v) == "fail"}
    assert failed == REFUSAL_KILLS[broken], \
        f"corpus run of {broken.name} fails {sorted(failed)}, expected {REFUSAL_KILLS[broken]}"
    assert {e.listing["property"] for e, _ in verdicts} == set(REFUSAL_LAWS)
    clean = [(e.listing["id"], v.message) for e, v in corpus.run(refusals, NumpyBackend())
             if vector_status(v) == "fail"]
    assert not clean, clean[:3]


def test_a_state_entry_alone_fails_a_backend_whose_refusal_changes_its_next_answer(
        refusals: Path) -> None:
    """Each entry of the state law, judged on a fresh backend (no earlier refusal in the
    run), fails when the refusal leaves a buffer busy: the probe's answer after it differs
    (an empty probe doubles to the same empty answer, and passes)."""
    from resverify.properties.judge import judge

    state = [e for e in corpus.load(refusals) if isinstance(e, corpus.Entry) and
             e.listing["property"] == "refusal_leaves_the_backend_state_unchanged"]
    judged = 0
    for entry in state:
        backend = catalog.StaleBufferAfterRefusal()
        if backend.capabilities.covers(entry.request) is not None:
            continue
        verdict = judge(backend, entry.request, entry.expected, entry.checks)
        empty = entry.request.inputs["a"].size == 0
        assert (vector_status(verdict), "changed its state" in verdict.message) == (
            ("pass", False) if empty else ("fail", True)), \
            f"{entry.listing['id']}: {verdict} on {backend.name}, expected a state failure"
        judged += not empty
    assert judged >= 3, judged


def test_the_state_entry_carries_its_probe_and_one_without_is_a_usage_error(
        refusals: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = json.loads((refusals / corpus.MANIFEST).read_text())
    listing = next(e for e in manifest["entries"]
                   if e["property"] == "refusal_leaves_the_backend_state_unchanged")
    entry = json.loads((refusals / listing["file"]).read_text())
    a = entry["request"]["inputs"]["a"]
    assert entry["checks"] == ["state"], entry["checks"]
    assert entry["probe"]["inputs"] == {"a": a, "b": a}, (entry["probe"]["inputs"], a)
    copy = tmp_path / "copy"
    (copy / "entries").mkdir(parents=True)
    (copy / corpus.MANIFEST).write_text(json.dumps({**manifest, "entries": [listing]}))
    path = copy / listing["file"]
    path.write_text(json.dumps({k: v for k, v in entry.items() if k != "probe"}))
    assert _cli("run", str(copy)) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "probe" in err and err.count("\n") == 1, err


def _cli(*args: str) -> int:
    return main(["vectors", *args])


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_cli_round_trip_and_usage_errors(folder: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("run", str(folder)) == 0
    assert "0 failed" in capsys.readouterr().out
    assert _cli("run", str(folder), "--backend", "tests.mutants:AlphaSquared",
                "--json", str(tmp_path / "v.json")) == 1
    said = capsys.readouterr().out
    assert "fail (law)" in said and "mutant-alpha-squared" in said, said
    rows = json.loads((tmp_path / "v.json").read_text())
    assert {r["status"] for r in rows} == {"pass", "fail", "skipped"}
    (tmp_path / "other.txt").write_text("not a corpus")
    assert _cli("export", str(tmp_path)) == 2
    assert _cli("run", str(tmp_path / "missing")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "not empty" in err and "cannot read" in err, err


def _broken_copy(folder: Path, tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "copy"
    (copy / "entries").mkdir(parents=True)
    manifest = json.loads((folder / corpus.MANIFEST).read_text())
    manifest["entries"] = manifest["entries"][:1]
    (copy / corpus.MANIFEST).write_text(json.dumps(manifest))
    entry = json.loads((folder / manifest["entries"][0]["file"]).read_text())
    path = copy / manifest["entries"][0]["file"]
    for bad in ({**entry, "checks": ["sideways"]},
                {**entry, "expect": {**entry["expect"], "output": {
                    **entry["expect"]["output"], "exact": ["one"] * len(
                        entry["expect"]["output"]["exact"])}}}):
        path.write_text(json.dumps(bad))
        yield path


def test_malformed_entries_are_one_line_usage_errors_naming_the_file(
        folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path in _broken_copy(folder, tmp_path):
        assert _cli("run", str(path.parent.parent)) == 2
        err = capsys.readouterr().err
        assert str(path) in err and err.count("\n") == 1, err


@pytest.mark.slow
@pytest.mark.campaign
def test_whole_corpus_exports_and_numpy_passes_all_of_it(tmp_path: Path) -> None:
    manifest = corpus.export(tmp_path)
    assert {e["family"] for e in manifest["entries"]} == {*corpus.families(), "ops", "ops_jvp",
                                                          "fixtures"}
    verdicts = list(corpus.run(tmp_path, NumpyBackend()))
    failed = [(e.listing["id"], v.message) for e, v in verdicts if vector_status(v) == "fail"]
    assert not failed, failed[:3]
    variance = [v for e, v in verdicts if e.listing["family"] == "variance"]
    assert variance and all(vector_status(v) in ("pass", "skipped") for v in variance)


@pytest.mark.parametrize("limit", [2.0**-40, 3.0 * 2**-60, 5e-324, 2.0**-1022 * 0.75])
def test_a_shortened_midpoint_still_admits_every_value_its_budget_admitted(limit: float) -> None:
    from resverify.spec.compare import within

    third = Fraction(1, 3) + Fraction(1, 7**80)  # more than LONG_BITS bits
    for value in (third, -third * Fraction(2) ** -1000):
        short, bound, moved = corpus._shortened(value, limit)
        ulp = Fraction(float(np.nextafter(limit, np.inf))) - Fraction(limit)
        assert short != value and moved < ulp and bound == limit + float(ulp), (short, moved)
        bits = short.numerator.bit_length() + short.denominator.bit_length()
        assert bits < (2300 if limit < 2.0**-1022 else 1200), bits
        for edge in (value + Fraction(limit), value - Fraction(limit)):
            for actual in (np.nextafter(float(edge), 0.0), float(edge)):
                if within(actual, value, limit):
                    assert within(actual, short, bound), (actual, value, limit, short, bound)
    assert corpus._shortened(Fraction(1, 3), limit) == (Fraction(1, 3), limit, 0)
    assert corpus._shortened(third, 0.0) == (third, 0.0, 0)
    assert corpus._shortened(third, float("inf")) == (Fraction(1 / 3), float("inf"), 0)


def test_each_failing_entry_prints_a_replay_command_that_shows_the_failing_elements(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``vectors run`` names a replay command for each failure; replaying that corpus entry
    on the same backend judges its request against the spec and fails too (the tangent of a
    forward-mode entry included), while the reference passes it."""
    mutant = "tests.mutants:TangentDropsIdentity"
    assert _cli("run", str(folder), "--backend", mutant) == 1
    out = capsys.readouterr().out
    commands = [line.split("replay: ", 1)[1].split() for line in out.splitlines()
                if line.startswith("  replay: resverify replay ")]
    tangent = next((c for c in commands if "-tangent_matches_spec_within_budget-" in c[2]), None)
    assert tangent is not None, out
    assert tangent[3:] == ["--backend", mutant], tangent
    assert main(tangent[1:]) == 1, tangent
    shown = capsys.readouterr().out
    assert "corpus entry " in shown and "tangent[0]" in shown and " FAIL" in shown, shown
    assert main([tangent[1], tangent[2]]) == 0, capsys.readouterr().out


# ----------------------------------------------------------------------------------------
# the declared list of pinned examples


NOT_YET_PINNED: tuple[str, ...] = ()
"""Families whose module still pins with ``hypothesis.example``: their examples reach the
corpus once the module imports ``example`` from :mod:`resverify.properties.pinned`."""


def _hypothesis_examples(test: Any) -> list[dict[str, Any]]:
    """The explicit examples Hypothesis holds for ``test``, top first (its own attribute,
    read here only to check the declared list against it)."""
    return [dict(e.kwargs) for e in reversed(getattr(test, "hypothesis_explicit_examples", []))]


def _undeclared(test: Any) -> list[dict[str, Any]]:
    held = pinned_examples(test)
    declared = [] if held is None else list(held.examples)
    return [] if declared == _hypothesis_examples(test) else _hypothesis_examples(test)


def test_every_pinned_example_hypothesis_runs_is_in_the_declared_list() -> None:
    for family, prop, test in corpus._property_tests():
        missing = _undeclared(test)
        if family in NOT_YET_PINNED:
            continue
        assert not missing, f"test_{prop} ({family}) pins {len(missing)} example(s) outside " \
                            "resverify.properties.pinned.example: the corpus would miss them"
    switched = [f for f in NOT_YET_PINNED
                if all(not _undeclared(t) for fam, _, t in corpus._property_tests() if fam == f)
                and any(_hypothesis_examples(t) for fam, _, t in corpus._property_tests()
                        if fam == f)]
    assert not switched, f"{switched} pin with resverify.properties.pinned now: drop them " \
                         "from NOT_YET_PINNED"


def test_a_test_pinned_with_hypothesis_example_alone_is_found_undeclared() -> None:
    from hypothesis import example as hypothesis_example
    from hypothesis import given
    from hypothesis import strategies as st

    from resverify.properties import pinned

    @given(x=st.integers())
    @pinned.example(x=1)
    @pinned.example(x=2)
    def test_declared(x: int) -> None:
        pass

    @given(x=st.integers())
    @hypothesis_example(x=3)
    def test_hidden(x: int) -> None:
        pass

    held = pinned_examples(test_declared)
    assert held is not None and held.examples == [{"x": 1}, {"x": 2}], held
    assert _undeclared(test_declared) == [], _undeclared(test_declared)
    assert _undeclared(test_hidden) == [{"x": 3}], _undeclared(test_hidden)


def test_pinned_example_above_given_is_refused_and_a_new_body_starts_afresh() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from resverify.properties import pinned

    def law(x: int) -> None:
        pass

    with pytest.raises(UsageError, match="below @given"):
        pinned.example(x=1)(given(x=st.integers())(law))
    first = pinned.example(x=1)(law)
    held = pinned_examples(first)
    assert held is not None and held.examples == [{"x": 1}], held

    def law(x: int) -> None:  # type: ignore[no-redef]  # the module imported again
        pass

    again = pinned_examples(pinned.example(x=2)(law))
    assert again is not None and again.examples == [{"x": 2}], again
