"""The symbolic model of y = x + αF(x): each law, and a case that would break it.

The derivations are made once: a repeated one is answered from the cache. The caches are
checked through ``cache_info`` and object identity, not timings; the answers are immutable,
so a caller cannot change what the next caller gets.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from resverify.spec import symbolic as sym


def _is_zero(matrix: sp.Matrix) -> bool:
    return all(sp.simplify(entry) == 0 for entry in matrix)


@pytest.mark.parametrize("family", sorted(sym.FAMILIES))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_block_jacobian_is_identity_plus_alpha_branch_jacobian(family: str, n: int) -> None:
    branch = sym.FAMILIES[family](n)
    gap = sym.jacobian_law_difference(branch)
    assert _is_zero(gap), f"J_y - (I + αJ_F) = {gap}, but should be 0 [{family}, n={n}]"


@pytest.mark.parametrize("family", sorted(sym.FAMILIES))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_input_cotangent_is_identity_plus_branch_vjp(family: str, n: int) -> None:
    gap = sym.vjp_law_difference(sym.FAMILIES[family](n))
    assert _is_zero(gap), f"x̄ - (ȳ + αJ_Fᵀȳ) = {gap}, but should be 0 [{family}, n={n}]"


def test_jacobian_law_fails_without_the_identity_term() -> None:
    branch = sym.linear_branch(2)
    wrong = sym.block_jacobian(branch) - sym.ALPHA * branch.jacobian
    assert wrong == sp.eye(2), f"J_y - αJ_F = {wrong}, expected the identity left over"


@pytest.mark.parametrize("n", [1, 2, 4])
def test_linear_branch_vjp_is_weight_times_cotangent(n: int) -> None:
    gap = sym.linear_vjp_difference(n)
    assert _is_zero(gap), f"J_Fᵀȳ - Wȳ = {gap}, but should be 0 [row-vector F = xW, n={n}]"


def test_linear_branch_jacobian_is_transposed_weight_not_weight() -> None:
    branch = sym.linear_branch(2)
    assert branch.jacobian == sym.linear_weights(2).T
    assert branch.jacobian != sym.linear_weights(2)


def test_relu_derivative_at_zero_is_the_declared_zero() -> None:
    v = sp.Symbol("v", real=True)
    derived = sp.diff(sym.relu(v), v)
    for point, expected in ((-1, 0), (0, sym.RELU_DERIVATIVE_AT_ZERO), (2, 1)):
        got = derived.subs(v, point)
        assert got == expected, f"relu'({point}) = {got}, but should be {expected}"
        assert sym.relu_derivative(v).subs(v, point) == expected
        assert sp.Heaviside(point, 0) == expected


def test_relu_block_jacobian_at_seed_point() -> None:
    branch = sym.relu_branch(2, sp.Rational(1, 2))
    point = dict(zip(branch.xs, (-1, 2), strict=True))
    residual = sym.block_jacobian(branch, 1).subs(point)
    plain = branch.jacobian.subs(point)
    assert residual == sp.diag(1, sp.Rational(3, 2)), f"residual J = {residual}"
    assert plain == sp.diag(0, sp.Rational(1, 2)), f"plain J = {plain}"


def test_negative_gain_cancels_the_identity_on_the_positive_coordinate() -> None:
    branch = sym.relu_branch(2, -1)
    jac = sym.block_jacobian(branch, 1).subs(dict(zip(branch.xs, (-1, 2), strict=True)))
    assert jac == sp.diag(1, 0), f"J_y at x=[-1,2], g=-1 is {jac}, expected diag(1, 0)"


def test_tanh_block_jacobian_is_one_plus_alpha_sech_squared() -> None:
    branch = sym.tanh_branch(1)
    x = branch.xs[0]
    jac = sym.block_jacobian(branch)[0, 0]
    assert sp.simplify(jac - (1 + sym.ALPHA * (1 - sp.tanh(x) ** 2))) == 0, f"J_y = {jac}"


@pytest.mark.parametrize("residual", [True, False])
def test_depth_law_holds_for_symbolic_depth_by_induction(residual: bool) -> None:
    proof = sym.depth_induction(residual)
    assert proof.holds, f"induction for residual={residual}: base {proof.base}, step {proof.step}"


@pytest.mark.parametrize("depth", range(7))
def test_unrolled_stack_derivative_matches_depth_law(depth: int) -> None:
    for residual in (True, False):
        got = sym.stack_derivative(depth, residual)
        law = sp.expand(sym.depth_law(residual, sp.Integer(depth)))
        assert got == law, f"d x_{depth}/d x_0 = {got}, but should be {law} [residual={residual}]"


def test_induction_rejects_a_wrong_depth_law() -> None:
    wrong = sym.Induction(sp.Integer(0), sp.expand((1 + sym.SLOPE) * sym.SLOPE**sym.DEPTH
                                                   - sym.SLOPE ** (sym.DEPTH + 1)))
    assert not wrong.holds, "a^L is not the residual law, the step must not simplify to 0"


def test_binomial_expansion_by_induction() -> None:
    proof = sym.binomial_induction()
    assert proof.holds, f"Pascal's rule step: {proof.step}"


def test_expansion_at_depth_three_has_cross_terms() -> None:
    a = sym.SLOPE
    assert sym.expansion(3) == 1 + 3 * a + 3 * a**2 + a**3, f"got {sym.expansion(3)}"


def test_expansion_sweep_passes_up_to_depth_1000() -> None:
    assert sym.expansion_sweep(1000) is None


def test_expansion_sweep_detects_a_wrong_coefficient(monkeypatch: pytest.MonkeyPatch) -> None:
    num, den = sym._coefficient_ratio()
    monkeypatch.setattr(sym, "_coefficient_ratio", lambda: (lambda d, k: num(d, k) + 1, den))
    assert sym.expansion_sweep(5) == 1, "a corrupted ratio must be caught at the first depth"


def test_geometric_sum_is_refuted_at_the_smallest_depth() -> None:
    ref = sym.refute_geometric_sum()
    assert ref.depth == 2, f"smallest differing depth {ref.depth}, expected 2 (L=0, 1 agree)"
    assert ref.residual != ref.geometric
    a = ref.slope
    assert ref.residual == (1 + a) ** ref.depth, f"(1+a)^L at a={a}: {ref.residual}"
    assert ref.geometric == sum(a**k for k in range(ref.depth + 1)), f"Σa^k: {ref.geometric}"
    for depth in (0, 1):
        assert sp.expand(sym.depth_law(True, sp.Integer(depth)) - sym.geometric_sum(depth)) == 0


@pytest.mark.parametrize(("slope", "expected"), [(Fraction(-1, 2), Fraction(1, 8)),
                                                 (Fraction(1), Fraction(8))])
def test_depth_three_values(slope: Fraction, expected: Fraction) -> None:
    got = sym.stack_derivative(3, True).subs(sym.SLOPE, sp.Rational(slope))
    assert got == sp.Rational(expected), f"(1+a)^3 at a={slope}: {got}, expected {expected}"


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_unrolled_sum_for_concrete_depths(depth: int) -> None:
    gap = sym.unrolled_sum_difference(depth)
    assert gap == 0, f"x_L - (x_0 + ΣF_l(x_l)) = {gap} at L={depth}"


def test_unrolled_sum_for_symbolic_depth_by_induction() -> None:
    proof = sym.unrolled_sum_induction()
    assert proof.holds, f"base {proof.base}, step {proof.step}"


def test_variance_of_sum_keeps_the_covariance_term() -> None:
    gap, cov = sym.variance_identity()
    assert gap == 0, f"Var(X+F) - (VarX + VarF + 2Cov) = {gap}"
    assert cov != 0, "F = cX + Z depends on X: the covariance must not vanish"


def test_independent_updates_add_variance_for_symbolic_depth() -> None:
    proof = sym.independent_sum_induction()
    assert proof.holds, f"base {proof.base}, step {proof.step}"


def test_inverse_sqrt_depth_rescaling_keeps_variance() -> None:
    sigma = sp.Symbol("sigma", positive=True)
    assert sym.rescaled_variance() == sigma**2, f"got {sym.rescaled_variance()}"


def test_hundred_layers_of_unit_noise() -> None:
    assert sym.noise_variance(100) == 100
    assert sym.noise_variance(100, scale=Fraction(1, 10)) == 1


def test_sample_moment_identity_is_exact_in_rationals() -> None:
    rng = np.random.default_rng(7)
    xs = [Fraction(int(v), 7) for v in rng.integers(-50, 50, size=40)]
    fs = [x * Fraction(3, 5) + Fraction(int(v), 3) for x, v in
          zip(xs, rng.integers(-9, 9, size=40), strict=True)]
    assert sym.sample_covariance(xs, fs) != 0
    assert sym.sample_identity_gap(xs, fs) == 0


def test_sample_moment_identity_fails_without_covariance() -> None:
    xs = [Fraction(v) for v in (1, 2, 3, 4)]
    fs = [2 * x for x in xs]
    dropped = sym.sample_variance([x + f for x, f in zip(xs, fs, strict=True)]) - (
        sym.sample_variance(xs) + sym.sample_variance(fs))
    assert dropped == 2 * sym.sample_covariance(xs, fs) != 0, f"dropped covariance: {dropped}"


def test_float32_depth_product_at_one_tenth_is_not_exact_but_within_bound() -> None:
    got = Fraction(sym.rounded_depth_product(0.1, 3, "float32"))
    exact = Fraction(1331, 1000)
    bound = sym.depth_product_bound(Fraction(1, 10), 3, Fraction(1, 2**24))
    assert got != exact, "float32 (1+0.1)^3 cannot be exactly 1.331"
    assert abs(got - exact) <= bound, f"|{float(got)} - 1.331| > {float(bound)}"
    assert f"{float(got):.10f}" == "1.3310000896"


def test_float32_bound_rejects_a_result_eight_ulps_off() -> None:
    got = np.float32(sym.rounded_depth_product(0.1, 3, "float32"))
    off = Fraction(float(got + 8 * np.spacing(got)))
    bound = sym.depth_product_bound(Fraction(1, 10), 3, Fraction(1, 2**24))
    assert abs(off - Fraction(1331, 1000)) > bound, f"{float(off)} is inside ±{float(bound)}"


# --- each derivation is made once and answered from its cache ---

ONE = sp.Integer(1)

DERIVATIONS: dict[str, tuple[Callable[..., object], Callable[[], object]]] = {
    "jacobian law, symbolic branch": (
        sym.jacobian_law_difference,
        lambda: sym.jacobian_law_difference(sym.symbolic_branch(2), ONE)),
    "vjp law, tanh branch": (
        sym.vjp_law_difference, lambda: sym.vjp_law_difference(sym.tanh_branch(2), ONE)),
    "linear vjp": (sym.linear_vjp_difference, lambda: sym.linear_vjp_difference(2)),
    "expansion": (sym.expansion, lambda: sym.expansion(7)),
    "refutation": (sym.refute_geometric_sum, lambda: sym.refute_geometric_sum(4)),
    "unrolled sum": (sym.unrolled_sum_difference, lambda: sym.unrolled_sum_difference(3)),
}


@pytest.mark.parametrize("name", DERIVATIONS)
def test_a_repeated_derivation_is_answered_from_the_cache(name: str) -> None:
    cached, derive = DERIVATIONS[name]
    first = derive()
    hits = cached.cache_info().hits  # type: ignore[attr-defined]
    again = derive()
    assert again is first, f"{name}: the second derivation built a new answer"
    assert cached.cache_info().hits == hits + 1, cached.cache_info()  # type: ignore[attr-defined]


def test_branches_are_hashable_and_built_once() -> None:
    assert sym.tanh_branch(3) is sym.tanh_branch(3)
    zero = sym.Branch("zero", sym.symbolic_branch(2).xs, sp.zeros(2, 1))
    assert isinstance(zero.values, sp.ImmutableMatrix)
    assert hash(zero) == hash(sym.Branch("zero", zero.xs, sp.zeros(2, 1)))
    assert zero.jacobian is zero.jacobian


def test_a_cached_answer_cannot_be_changed_by_its_caller() -> None:
    law = sym.jacobian_law_difference(sym.symbolic_branch(2), ONE)
    with pytest.raises(TypeError):
        law[0, 0] = 1
    assert all(entry == 0 for entry in sym.jacobian_law_difference(sym.symbolic_branch(2), ONE))


def test_the_depth_sweep_reuses_one_derivation_and_still_checks_every_depth() -> None:
    sym.expansion_sweep(20)
    misses = sym._coefficient_ratio.cache_info().misses
    assert sym.expansion_sweep(60) is None
    info = sym._coefficient_ratio.cache_info()
    assert info.misses == misses and info.hits >= 1, info
    assert not hasattr(sym.expansion_sweep, "cache_info"), "the sweep itself must run again"
