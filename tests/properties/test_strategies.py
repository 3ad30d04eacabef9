"""Tests of the property suite's helpers: strategies, cases, rounding, statistics, vectors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from resverify.properties.cases import Case, numpy_dtype, round_to_dtype
from resverify.properties.pinned import S06
from resverify.properties.stats import acceptance, miss_probability
from resverify.properties.strategies import (
    DRAWN_ELEMENTS,
    EXTREMES,
    FAMILIES,
    FAMILY_OPS,
    NORMS,
    SIZES,
    broadcast_cases,
    claiming,
    cotangents,
    drawing,
    linear_bound,
    mismatched_shape_pairs,
    null_space_cases,
    residual_cases,
    sample_block_cases,
    shared_cases,
    values,
    with_tangents,
)
from resverify.properties.vectors import replay_command, save_vector
from resverify.spec.codec import loads_request
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import DTYPES, broadcast_shapes, infer_shapes
from resverify.spec.ops import OP_TABLE
from tests.mutants import foils as bb

FEW = settings(max_examples=30, deadline=None, derandomize=True, database=None)
SEARCH = settings(FEW, max_examples=400, phases=[Phase.generate])


class _Found(Exception):
    pass


def reaches(strategy: st.SearchStrategy[Any], condition: Callable[[Any], bool],
            draws: int = 400) -> bool:
    """Whether ``strategy`` draws a value meeting ``condition`` within ``draws`` examples."""

    @settings(SEARCH, max_examples=draws)
    @given(strategy)
    def search(value: Any) -> None:
        if condition(value):
            raise _Found

    try:
        search()
    except _Found:
        return True
    return False


def share(strategy: st.SearchStrategy[Any], condition: Callable[[Any], bool],
          draws: int = 200) -> float:
    """The fraction of ``draws`` generated values meeting ``condition``."""
    seen: list[bool] = []

    @settings(SEARCH, max_examples=draws)
    @given(strategy)
    def count(value: Any) -> None:
        seen.append(bool(condition(value)))

    count()
    return sum(seen) / len(seen)


def ops_of(case: Case) -> set[str]:
    return {n.op for n in case.program.nodes}


def weights_by_shape(case: Case) -> dict[tuple[int, ...], int]:
    """How many distinct 2-D inputs (weights) a case has of each shape."""
    found: dict[tuple[int, ...], int] = {}
    for name, value in case.values.items():
        if value.ndim == 2 and name != "x" and value.size:
            found[value.shape] = found.get(value.shape, 0) + 1
    return found


def widest_linear(case: Case) -> int:
    """The largest d_in or d_out of the case's linear layers (0 without one)."""
    shapes = [case.values[n.args[1]].shape for n in case.program.nodes if n.op == "linear"]
    return max((max(s) for s in shapes), default=0)


def broadcasting(case: Case) -> bool:
    """Whether an add or mul node has operands of two different shapes."""
    known = infer_shapes(case.program)
    return any(n.op in ("add", "mul") and known[n.args[0]] != known[n.args[1]]
               for n in case.program.nodes)


SUBSET = frozenset(bb.SUBSET_OPS)
OP_SETS = [SUBSET, frozenset({"residual_add", "scale"}),
           frozenset({"residual_add", "scale", "tanh", "mul"})]


def test_the_families_and_norms_are_read_from_the_op_entries() -> None:
    """Each op declares the branch families it serves; every family is built from at least
    one op, and an op names no family the strategies cannot build."""
    for name, op in OP_TABLE.items():
        unknown = sorted(set(op.families) - set(FAMILIES))
        assert not unknown, f"{name} serves families {unknown} that no strategy builds"
    for family in FAMILIES:
        served = {name for name, op in OP_TABLE.items() if family in op.families}
        assert served and FAMILY_OPS[family] == served, (
            f"FAMILY_OPS[{family!r}] = {sorted(FAMILY_OPS[family])}, but the entries say "
            f"{sorted(served)}")
    assert FAMILY_OPS["relu"] == {"relu", "scale"}, FAMILY_OPS["relu"]
    assert NORMS == tuple(n for n, op in OP_TABLE.items() if op.norm) == ("layer_norm",
                                                                           "rms_norm")


@pytest.mark.parametrize("ops", OP_SETS, ids=lambda o: "-".join(sorted(o)))
def test_programs_use_only_the_ops_given(ops: frozenset[str]) -> None:
    for strategy in (residual_cases(ops=ops), sample_block_cases(ops=ops)):
        assert not reaches(strategy, lambda c: not ops_of(c) <= ops, draws=100), sorted(ops)


def test_programs_use_only_the_ops_claimed_by_the_backend_under_test() -> None:
    with claiming(SUBSET):
        assert not reaches(residual_cases(), lambda c: not ops_of(c) <= SUBSET, draws=100)
    assert reaches(residual_cases(), lambda c: "tanh" in ops_of(c))


@pytest.mark.parametrize(("what", "condition"), [
    ("mul", lambda c: "mul" in ops_of(c)),
    ("add", lambda c: "add" in ops_of(c)),
    ("a broadcasting add or mul", broadcasting),
    ("a linear layer 16 wide", lambda c: widest_linear(c) > 16),
    ("two same-shaped weights", lambda c: max(weights_by_shape(c).values(), default=0) >= 2),
])
def test_programs_on_a_subset_of_ops_reach(what: str, condition: Callable[[Case], bool]) -> None:
    assert reaches(residual_cases(ops=SUBSET), condition), f"never drew {what} on {SUBSET}"


def test_some_linear_layers_are_a_few_hundred_wide() -> None:
    assert reaches(residual_cases(), lambda c: widest_linear(c) >= 256)
    assert reaches(residual_cases(), lambda c: c.values["x"].shape[-1:] >= (256,))


@pytest.mark.parametrize(("what", "condition"), [
    ("a linear layer wider than 16", lambda c: widest_linear(c) > 16),
    ("two distinct same-shaped weights",
     lambda c: max(weights_by_shape(c).values(), default=0) >= 2),
])
def test_residual_cases_often_draw(what: str, condition: Callable[[Case], bool]) -> None:
    """In 15% of cases or more (21% and 33% the least over ten seeds of 200 draws), so
    that the 25 examples of the ci profile meet each of them."""
    found = share(residual_cases(), condition)
    assert found >= 0.15, f"{what} in {found:.0%} of 200 cases, want at least 15%"


def test_wide_cases_stay_cheap_to_check() -> None:
    """Every weight within MAX_WEIGHT elements, every array within 4 times MAX_WIDTH."""
    assert not reaches(residual_cases(), lambda c: any(
        v.size > (SIZES.max_weight if k != "x" and v.ndim == 2 else 4 * SIZES.max_width)
        for k, v in c.values.items()), draws=100)


@pytest.mark.parametrize("strategy", [residual_cases(), broadcast_cases("add")],
                         ids=["residual_cases", "broadcast_cases"])
def test_cotangents_are_random_not_constant(strategy: st.SearchStrategy[Case]) -> None:
    def constant(case: Case) -> bool:
        flat = case.cotangent.reshape(-1).tolist()  # type: ignore[union-attr]
        return len(flat) > 1 and len(set(flat)) < len(flat) // 2 + 1

    assert not reaches(strategy, constant, draws=100)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_broadcast_cases_stretch_both_operands(op: str) -> None:
    def stretched(case: Case, name: str) -> bool:
        return case.values[name].size < case.cotangent.size  # type: ignore[union-attr]

    assert reaches(broadcast_cases(op), lambda c: stretched(c, "a"))
    assert reaches(broadcast_cases(op), lambda c: stretched(c, "b"))
    assert reaches(broadcast_cases(op), lambda c: c.values["a"].ndim != c.values["b"].ndim)
    assert not reaches(broadcast_cases(op), lambda c: ops_of(c) != {op})


def test_wide_values_are_dense_and_in_range() -> None:
    def bad(a: np.ndarray) -> bool:
        small = (a != 0) & (np.abs(a) < 2**-10)
        return bool(np.any(np.abs(a) > 8) or np.any(small) or len(set(a.tolist())) < 100)

    assert not reaches(values((300,)), bad)


@FEW
@given(case=residual_cases())
def test_residual_cases_are_shape_valid_in_every_dtype(case: Case) -> None:
    shape = infer_shapes(case.program)[case.program.output]
    assert case.cotangent is not None and case.cotangent.shape == shape, case
    for dtype in DTYPES:
        request = case.request(dtype)  # refuses values the dtype cannot hold
        assert request.dtype == dtype


@pytest.mark.parametrize(("what", "condition"), [
    ("rank 0", lambda c: c.values["x"].ndim == 0),
    ("an empty axis", lambda c: 0 in c.values["x"].shape),
    ("a projection shortcut", lambda c: any(n.startswith("q") for n in
                                            (m.name for m in c.program.nodes))),
    ("g·relu", lambda c: any(n.op == "relu" for n in c.program.nodes)),
    ("tanh", lambda c: any(n.op == "tanh" for n in c.program.nodes)),
    ("depth 3", lambda c: sum(n.op == "residual_add" for n in c.program.nodes) == 3),
])
def test_residual_cases_reach(what: str, condition: Callable[[Case], bool]) -> None:
    assert reaches(residual_cases(), condition), f"residual_cases never drew {what}"


@FEW
@given(pair=mismatched_shape_pairs())
def test_mismatched_pairs_are_unequal(pair: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    assert pair[0] != pair[1]


def _broadcasts(pair: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    try:
        broadcast_shapes("add", *pair)
    except ShapeMismatch:
        return False
    return True


def test_mismatched_pairs_include_broadcastable_and_incompatible_ones() -> None:
    assert reaches(mismatched_shape_pairs(), _broadcasts)
    assert reaches(mismatched_shape_pairs(), lambda p: not _broadcasts(p))


@FEW
@given(case=null_space_cases())
def test_null_space_cases_zero_the_branch_but_not_its_jacobian(case: Case) -> None:
    x, w, cot = case.values["x"], case.values["w"], case.cotangent
    assert cot is not None
    assert np.all(x @ w == 0) and np.any(w != 0) and np.any(w @ cot != 0), case


@FEW
@given(shared=shared_cases())
def test_shared_cases_use_x_k_times(shared: tuple[Case, int]) -> None:
    case, uses = shared
    merges = [n for n in case.program.nodes if n.op == "residual_add"]
    assert sum(a == "x" for n in merges for a in n.args) == uses


@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_to_a_dtype_is_nearest_and_clamped(dtype: str) -> None:
    raw = np.array([1 / 3, -2.0e300, 2.0e300, 5e-324, -0.0, 1.0 + 2.0**-60])
    rounded = round_to_dtype(raw, dtype)
    assert np.all(np.isfinite(rounded))
    assert rounded[3] >= 0 and np.signbit(rounded[4])
    assert abs(float(rounded[0]) - 1 / 3) <= {"float64": 2.0**-54, "float32": 2.0**-25,
                                              "float16": 2.0**-12, "bfloat16": 2.0**-9}[dtype]
    assert float(rounded[5]) == 1.0


def test_case_round_trips_through_a_request() -> None:
    again = Case.from_request(S06.request("float64"))
    assert again.program == S06.program
    assert all(np.array_equal(again.values[k], S06.values[k]) for k in S06.values)


def test_forward_case_round_trips_through_a_request_with_its_tangents() -> None:
    case = S06.with_tangents(x=np.array([1.0, -2.0]), w=np.eye(2) / 4)
    request = case.request("float32")
    assert request.forward_mode and request.tangents is not None
    assert request.tangents["w"].dtype == np.float32, request.tangents["w"].dtype
    again = Case.from_request(request)
    assert again.tangents is not None and case.tangents is not None
    assert set(again.tangents) == {"x", "w"}, sorted(again.tangents)
    assert all(np.array_equal(again.tangents[k], case.tangents[k]) for k in ("x", "w"))
    assert "tangents x=[1.0, -2.0]" in repr(case), repr(case)
    assert S06.request("float64").tangents is None


@settings(SEARCH, max_examples=60)
@given(with_tangents(residual_cases()))
def test_with_tangents_gives_every_input_a_tangent_of_its_shape_and_dtype(case: Case) -> None:
    assert case.tangents is not None
    assert set(case.tangents) == set(case.values), (sorted(case.tangents), sorted(case.values))
    for name, tangent in case.tangents.items():
        assert tangent.shape == case.values[name].shape, (name, tangent.shape)
        assert _exactly_in(tangent, "float64"), name


def test_tangents_are_dense_not_constant_or_copies_of_the_values() -> None:
    def poor(case: Case) -> bool:
        assert case.tangents is not None
        flat = case.tangents["x"].reshape(-1).tolist()
        same = np.array_equal(case.tangents["x"], case.values["x"])
        return len(flat) > 1 and (len(set(flat)) < len(flat) // 2 + 1 or same)

    assert not reaches(with_tangents(residual_cases()), poor, draws=100)


def _exactly_in(a: np.ndarray, dtype: str) -> bool:
    return bool(np.array_equal(round_to_dtype(a, dtype).astype(np.float64), a))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("what", "condition"), [
    ("huge", lambda v, info: abs(v) >= 2.0 ** (info.maxexp // 2)),
    ("subnormal", lambda v, info: 0 < abs(v) < float(info.smallest_normal)),
    ("negative zero", lambda v, info: v == 0 and np.signbit(v)),
])
def test_extreme_range_draws_extreme_values_of_the_dtype(
        what: str, condition: Callable[[float, Any], bool], dtype: str) -> None:
    info = ml_dtypes.finfo(numpy_dtype(dtype))
    for shape in [(4,), (DRAWN_ELEMENTS + 1,)]:  # drawn element by element; seeded
        strategy = values(shape, dtype=dtype, value_range=EXTREMES)
        assert reaches(strategy, lambda a: any(condition(float(v), info) for v in a)), what
        assert not reaches(strategy, lambda a: not _exactly_in(a, dtype), 100), dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bound", [8.0, linear_bound(384)])
def test_values_are_values_of_the_dtype_within_the_bound(dtype: str, bound: float) -> None:
    for shape in [(8,), (DRAWN_ELEMENTS + 1,)]:
        strategy = st.one_of(values(shape, bound, dtype), cotangents(shape, bound, dtype))
        assert not reaches(strategy, lambda a: not _exactly_in(a, dtype), 100), dtype
        assert not reaches(strategy, lambda a: bool(np.any(np.abs(a) > bound)), 100), bound


def test_strategies_draw_in_the_dtype_and_range_the_plugin_sets() -> None:
    with drawing("bfloat16", EXTREMES):
        assert reaches(values((4,)), lambda a: bool(np.any(np.abs(a) > 1e30)))
        assert not reaches(values((4,)), lambda a: not _exactly_in(a, "bfloat16"), 100)
    assert not reaches(values((4,)), lambda a: bool(np.any(np.abs(a) > 8)), 100)


def test_default_values_stay_in_range() -> None:
    assert not reaches(values((8,)), lambda a: bool(np.any(np.abs(a) > 8)))
    assert not reaches(values((8,)), lambda a: bool(np.any((a != 0) & (np.abs(a) < 2**-10))))
    assert reaches(values((8,)), lambda a: bool(np.any((a == 0) & np.signbit(a))))


@pytest.mark.parametrize("n", [768, 4096])
def test_chi_square_region_has_stated_false_alarm(n: int) -> None:
    lo, hi = acceptance(n)
    with mpmath.workdps(40):
        below = mpmath.gammainc(mpmath.mpf(n) / 2, 0, mpmath.mpf(lo) / 2, regularized=True)
        above = mpmath.gammainc(mpmath.mpf(n) / 2, mpmath.mpf(hi) / 2, mpmath.inf,
                                regularized=True)
    assert below + above <= 1e-9
    assert below + above >= 0.9e-9  # not wider than needed


def test_miss_probability_separates_wrong_variances() -> None:
    assert miss_probability(768, Fraction(4)) < 1e-60
    assert miss_probability(768, Fraction(1)) >= 1 - 1.001e-9


def test_saved_vector_replays_the_same_request(tmp_path: object) -> None:
    from pathlib import Path

    request = S06.request("float32")
    path = save_vector(request, Path(str(tmp_path)), "law", "mod:Attr")
    again = loads_request(path.read_text())
    assert again.program == request.program and again.dtype == "float32"
    assert replay_command(path, "mod:Attr") == f"resverify replay {path} --backend mod:Attr"


ROOT = Path(__file__).resolve().parents[2]


def drawn_examples(profile: str, *args: str) -> tuple[list[str], str]:
    """The examples one property draws in a child pytest under ``profile``, and its header.

    Hypothesis' verbose output prints every example tried; lines naming Python objects
    (``<... object at 0x...>``) differ from process to process and are left out.
    """
    env = {**os.environ, "RESVERIFY_PROFILE": profile}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-s",
         "--hypothesis-verbosity=verbose", "properties/test_depth.py", "-k",
         "plain_stack and float64", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    lines = [line for line in out.splitlines()
             if line.startswith("    ") and " object at 0x" not in line]
    header = next((line for line in out.splitlines() if line.startswith("resverify:")), "")
    assert len(lines) >= 4, out  # at least one example drawn (4 lines each); dev draws 5
    return lines, header


def test_ci_profile_without_a_seed_is_the_run_with_seed_0() -> None:
    default, header = drawn_examples("ci")
    again, _ = drawn_examples("ci", "--hypothesis-seed", "0")
    assert "Hypothesis profile ci; seed 0;" in header, header
    assert default == again, "ci without a seed is not the run with seed 0"


@pytest.mark.parametrize("profile", ["ci", pytest.param("dev", marks=pytest.mark.slow)])
def test_seed_changes_the_examples_and_the_same_seed_repeats_them(profile: str) -> None:
    one, header = drawn_examples(profile, "--hypothesis-seed", "1")
    one_again, _ = drawn_examples(profile, "--hypothesis-seed", "1")
    two, _ = drawn_examples(profile, "--hypothesis-seed", "2")
    assert f"Hypothesis profile {profile}; seed 1;" in header, header
    assert one == one_again, f"seed 1 drew different examples in two {profile} runs"
    assert one != two, f"seeds 1 and 2 drew the same examples under the {profile} profile"


def test_extremes_profile_has_the_plugin_pass_extreme_values() -> None:
    _, header = drawn_examples("extremes", "--hypothesis-seed", "1")
    assert "Hypothesis profile extremes; seed 1; extreme values;" in header, header
    _, header = drawn_examples("dev", "--hypothesis-seed", "1")
    assert "; sensible values;" in header, header


def test_profiles_are_the_same_on_a_ci_machine() -> None:
    """Hypothesis makes its own ``ci`` profile (derandomized) the parent of new settings when
    ``CI`` is set; the suite's profiles must not inherit it, or ``--seed`` stops working."""
    code = ("import resverify.properties.profiles as p; "
            "print(sorted((k, v.derandomize, v.max_examples, repr(v.database)) "
            "for k, v in p.PROFILES.items()))")
    seen = {}
    for ci in ("", "true"):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")}
        if ci:
            env["CI"] = ci
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=True)
        seen[ci] = done.stdout
    assert seen[""] == seen["true"], f"without CI: {seen['']}\nwith CI=true: {seen['true']}"
    assert "True" not in seen["true"], f"a profile is derandomized under CI=true: {seen['true']}"
