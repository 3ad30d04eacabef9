"""The symbolic model of the residual block ``y = x + αF(x)``, derived with SymPy.

Why: the claims of the seeds are general laws (a Jacobian, a depth law, a variance law),
not numbers at one input. Here each law is stated as a SymPy computation whose difference
from the claimed closed form simplifies to zero, for a symbolic branch and for the concrete
families linear, ``g·relu``, ``a·x`` and tanh; laws over a depth ``L`` are proved for a
symbolic ``L`` by induction (base case and step both simplify to zero) and swept for
concrete depths with exact integers, from a derivation made once and cached.

Every derivation here is cached (``functools.cache``, keyed by the branch family, size,
constants and depth; branches and the matrices returned are immutable, so a cached answer
cannot be changed by a caller): the claims, the property suite and ``resverify bench``
ask for the same laws again and again, and SymPy takes tens to thousands of milliseconds
for each.

Conventions: vectors are rows, a linear branch is ``F(x) = x W`` (so ``J_F = Wᵀ`` and
``J_Fᵀ ȳ = W ȳ``); ``relu`` is ``max(v, 0)`` and its derivative at 0 is 0 (the x ≤ 0 piece
is taken at the kink; :data:`RELU_DERIVATIVE_AT_ZERO`).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy as sp
from sympy import stats

from resverify.spec.errors import UsageError

__all__ = ["SLOPE", "depth_law"]

ALPHA = sp.Symbol("alpha", real=True)
SLOPE = sp.Symbol("a", real=True)
DEPTH = sp.Symbol("L", integer=True, nonnegative=True)
_K = sp.Symbol("k", integer=True, nonnegative=True)
_X0 = sp.Symbol("x_0", real=True)

RELU_DERIVATIVE_AT_ZERO = 0


# --- the branch families ------------------------------------------------------------------

@dataclass(frozen=True)
class Branch:
    """A branch ``F`` over the symbols ``xs``: ``values`` is the column of ``F_i(x)``.

    Immutable and hashable (``values`` is kept as a SymPy ``ImmutableMatrix``), so every
    derivation from a branch can be cached by it.
    """

    name: str
    xs: tuple[sp.Symbol, ...]
    values: sp.ImmutableMatrix

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", sp.ImmutableMatrix(self.values))

    @functools.cached_property
    def jacobian(self) -> sp.ImmutableMatrix:
        """``J_F[i, j] = ∂F_i/∂x_j`` (derived once per branch)."""
        return sp.ImmutableMatrix(self.values.jacobian(sp.Matrix(self.xs)))


def _xs(n: int) -> tuple[sp.Symbol, ...]:
    return tuple(sp.symbols(f"x0:{n}", real=True))


@functools.cache
def symbolic_branch(n: int) -> Branch:
    """An arbitrary branch: ``F_i`` is an undefined SymPy function of all ``n`` inputs."""
    xs = _xs(n)
    return Branch("symbolic", xs, sp.Matrix([sp.Function(f"F{i}")(*xs) for i in range(n)]))


@functools.cache
def linear_weights(n: int) -> sp.ImmutableMatrix:
    """The symbolic weight matrix ``W[i, j] = w_i_j``."""
    return sp.ImmutableMatrix(n, n, lambda i, j: sp.Symbol(f"w_{i}_{j}", real=True))


@functools.cache
def linear_branch(n: int) -> Branch:
    """``F(x) = x W`` with x a row: ``F_j = Σ_i x_i W[i, j]``."""
    xs = _xs(n)
    row = sp.Matrix([list(xs)]) * linear_weights(n)
    return Branch("linear", xs, row.T)


def relu(v: sp.Expr) -> sp.Expr:
    """``max(v, 0)`` as a piecewise expression."""
    return sp.Piecewise((v, v > 0), (0, True))


def relu_derivative(v: sp.Expr) -> sp.Expr:
    """The derivative of :func:`relu`, taken from the piecewise form: 0 at the kink."""
    return sp.Piecewise((1, v > 0), (0, True))


@functools.cache
def relu_branch(n: int, gain: sp.Expr | None = None) -> Branch:
    """``F_i = g·relu(x_i)`` (``g`` symbolic unless given)."""
    xs = _xs(n)
    g = sp.Symbol("g", real=True) if gain is None else sp.sympify(gain)
    return Branch("relu", xs, sp.Matrix([g * relu(x) for x in xs]))


@functools.cache
def scale_branch(n: int, slope: sp.Expr = SLOPE) -> Branch:
    """``F(x) = a·x``."""
    xs = _xs(n)
    return Branch("scale", xs, sp.Matrix([slope * x for x in xs]))


@functools.cache
def tanh_branch(n: int) -> Branch:
    """``F_i = tanh(x_i)``: the smooth nonlinear family."""
    xs = _xs(n)
    return Branch("tanh", xs, sp.Matrix([sp.tanh(x) for x in xs]))


FAMILIES: dict[str, Callable[[int], Branch]] = {
    "symbolic": symbolic_branch,
    "linear": linear_branch,
    "relu": relu_branch,
    "scale": scale_branch,
    "tanh": tanh_branch,
}


# --- one block: y = x + αF(x) -----------------------------------------------------------------

@functools.cache
def block_output(branch: Branch, alpha: sp.Expr = ALPHA) -> sp.ImmutableMatrix:
    """The column ``x + αF(x)``."""
    return sp.ImmutableMatrix(sp.Matrix(branch.xs) + alpha * branch.values)


@functools.cache
def block_jacobian(branch: Branch, alpha: sp.Expr = ALPHA) -> sp.ImmutableMatrix:
    """``J_y``, obtained by differentiating the block output itself (not from the law)."""
    return sp.ImmutableMatrix(block_output(branch, alpha).jacobian(sp.Matrix(branch.xs)))


@functools.cache
def cotangent(n: int) -> sp.ImmutableMatrix:
    """The symbolic output cotangent ``ȳ`` as a column."""
    return sp.ImmutableMatrix(sp.symbols(f"ybar0:{n}", real=True))


def block_vjp(branch: Branch, ybar: sp.Matrix, alpha: sp.Expr = ALPHA) -> sp.Matrix:
    """``x̄ = J_yᵀ ȳ``: the gradient of ``ȳ · y`` with respect to x."""
    pairing = (ybar.T * block_output(branch, alpha))[0, 0]
    return sp.Matrix([sp.diff(pairing, x) for x in branch.xs])


@functools.cache
def jacobian_law_difference(branch: Branch, alpha: sp.Expr = ALPHA) -> sp.ImmutableMatrix:
    """``J_y − (I + αJ_F)``, simplified: the zero matrix when the law holds."""
    n = len(branch.xs)
    law = sp.eye(n) + alpha * branch.jacobian
    return sp.ImmutableMatrix(sp.simplify(block_jacobian(branch, alpha) - law))


@functools.cache
def vjp_law_difference(branch: Branch, alpha: sp.Expr = ALPHA) -> sp.ImmutableMatrix:
    """``x̄ − (ȳ + αJ_Fᵀ ȳ)``, simplified: the zero column when the law holds."""
    ybar = cotangent(len(branch.xs))
    claimed = ybar + alpha * branch.jacobian.T * ybar
    return sp.ImmutableMatrix(sp.simplify(block_vjp(branch, ybar, alpha) - claimed))


@functools.cache
def linear_vjp_difference(n: int) -> sp.ImmutableMatrix:
    """``J_Fᵀ ȳ − W ȳ`` for the row-vector linear branch: zero."""
    branch, ybar = linear_branch(n), cotangent(n)
    return sp.ImmutableMatrix(sp.simplify(branch.jacobian.T * ybar - linear_weights(n) * ybar))


# --- depth: stacks of F = a·x ---------------------------------------------------------------

@dataclass(frozen=True)
class Induction:
    """A proof by induction over ``L``: both differences must simplify to zero."""

    base: sp.Expr
    step: sp.Expr

    @property
    def holds(self) -> bool:
        return bool(sp.simplify(self.base) == 0 and sp.simplify(self.step) == 0)


@functools.cache
def stack_derivative(depth: int, residual: bool, slope: sp.Expr = SLOPE) -> sp.Expr:
    """``d x_L / d x_0`` of ``depth`` unrolled layers ``x ← x + a·x`` (or ``x ← a·x``)."""
    x: sp.Expr = _X0
    for _ in range(depth):
        x = x + slope * x if residual else slope * x
    return sp.expand(sp.diff(x, _X0))


def depth_law(residual: bool, depth: sp.Expr = DEPTH) -> sp.Expr:
    """The claimed closed form: ``(1+a)^L`` for residual stacks, ``a^L`` for plain ones."""
    return ((1 + SLOPE) if residual else SLOPE) ** depth


@functools.cache
def depth_induction(residual: bool) -> Induction:
    """Prove ``d x_L/d x_0 = (1+a)^L`` (or ``a^L``) for symbolic L.

    Base: zero layers give derivative 1 = law(0). Step: if ``x_L(x_0)`` has derivative
    law(L), one more layer applied to it (differentiated by the chain rule, with ``x_L``
    an undefined function) has derivative law(L+1).
    """
    x_l = sp.Function("x_L")(_X0)
    layer = x_l + SLOPE * x_l if residual else SLOPE * x_l
    after = sp.diff(layer, _X0).subs(sp.Derivative(x_l, _X0), depth_law(residual))
    base = sp.diff(_X0, _X0) - depth_law(residual, sp.Integer(0))
    return Induction(base, sp.simplify(after - depth_law(residual, DEPTH + 1)))


@functools.cache
def binomial_induction() -> Induction:
    """Prove the coefficient of ``a^k`` in ``(1+a)^L`` is ``C(L, k)`` for symbolic L, k.

    Base: ``(1+a)^0 = 1 = C(0, 0)``. Step: multiplying by ``(1+a)`` adds the coefficient of
    ``a^(k-1)`` to that of ``a^k``, and ``C(L, k) + C(L, k-1) = C(L+1, k)`` (Pascal's rule).
    """
    step = sp.binomial(DEPTH, _K) + sp.binomial(DEPTH, _K - 1) - sp.binomial(DEPTH + 1, _K)
    return Induction(sp.binomial(0, 0) - 1, sp.combsimp(step))


@functools.cache
def expansion(depth: int) -> sp.Expr:
    """``(1+a)^L`` multiplied out for a concrete depth, e.g. ``a**3 + 3*a**2 + 3*a + 1``."""
    return sp.expand(depth_law(True, sp.Integer(depth)))


@functools.cache
def geometric_sum(depth: int) -> sp.Expr:
    """The tempting wrong law ``1 + a + … + a^L``."""
    return sp.Add(*(SLOPE**k for k in range(depth + 1)))


@dataclass(frozen=True)
class Refutation:
    """The smallest depth where the two laws differ, and a slope where the values differ."""

    depth: int
    slope: Fraction
    residual: Fraction
    geometric: Fraction


@functools.cache
def refute_geometric_sum(max_depth: int = 10) -> Refutation:
    """Search depths 0, 1, … for the first where ``(1+a)^L − Σ a^k`` is not identically 0,
    then slopes 1, −1, 2, −2, … for a value where the two differ."""
    for depth in range(max_depth + 1):
        gap = sp.expand(stack_derivative(depth, True) - geometric_sum(depth))
        if gap == 0:
            continue
        for size in range(1, 10):
            for slope in (Fraction(size), Fraction(-size)):
                if gap.subs(SLOPE, sp.Rational(slope)) != 0:
                    value = stack_derivative(depth, True).subs(SLOPE, sp.Rational(slope))
                    other = geometric_sum(depth).subs(SLOPE, sp.Rational(slope))
                    return Refutation(depth, slope, Fraction(str(value)), Fraction(str(other)))
    raise UsageError(f"(1+a)^L and 1+a+…+a^L agree up to depth {max_depth}; "
                     "ask for a larger max_depth")


@functools.cache
def _coefficient_ratio() -> tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]:
    """Derived once: ``C(L, k+1)/C(L, k)`` as numerator and denominator functions of (L, k)."""
    ratio = sp.combsimp(sp.binomial(DEPTH, _K + 1) / sp.binomial(DEPTH, _K))
    num, den = sp.fraction(sp.factor(ratio))
    return (sp.lambdify((DEPTH, _K), num, "numpy"), sp.lambdify((DEPTH, _K), den, "numpy"))


def _ratio_terms(part: Callable[..., np.ndarray], depth: int) -> list[int]:
    ks = np.arange(depth, dtype=np.int64)
    terms: list[int] = np.broadcast_to(part(depth, ks), ks.shape).tolist()
    return terms


def expansion_sweep(max_depth: int = 1000) -> int | None:
    """Check the expansion of ``(1+a)^L`` for every ``L = 1..max_depth``; the first bad L or None.

    The coefficients of the unrolled stack's derivative are built by multiplying by
    ``(1+a)`` once per layer (exact integer lists); each row must start at 1, satisfy the
    derived ratio ``c[k+1]·den(L,k) = c[k]·num(L,k)`` for every k (which fixes the row as
    the binomial coefficients), and match ``math.comb`` at its middle. Nothing symbolic is
    redone per depth: the ratio is derived once and cached.
    """
    num, den = _coefficient_ratio()
    row = [1]
    for depth in range(1, max_depth + 1):
        row = list(map(operator.add, [0, *row], [*row, 0]))
        left = list(map(operator.mul, row[1:], _ratio_terms(den, depth)))
        right = list(map(operator.mul, row[:-1], _ratio_terms(num, depth)))
        if row[0] != 1 or left != right or row[depth // 2] != math.comb(depth, depth // 2):
            return depth
    return None


@functools.cache
def unrolled_sum_difference(depth: int) -> sp.Expr:
    """``x_L − (x_0 + Σ_l F_l(x_l))`` for undefined functions ``F_l``: zero."""
    x: sp.Expr = _X0
    updates = []
    for layer in range(depth):
        update = sp.Function(f"F{layer}")(x)
        updates.append(update)
        x = x + update
    return sp.simplify(x - (_X0 + sp.Add(*updates)))


@functools.cache
def unrolled_sum_induction() -> Induction:
    """Prove ``x_L = x_0 + Σ_{l<L} u_l`` for symbolic L, where ``u_l`` stands for ``F_l(x_l)``.

    Step: ``x_{L+1} = x_L + u_L``, and ``Δ_L Σ_{l<L} u_l = u_L``.
    """
    layer = sp.Symbol("l", integer=True, nonnegative=True)
    u = sp.Function("u")
    partial = sp.Sum(u(layer), (layer, 0, DEPTH - 1))
    step = sp.difference_delta(partial, DEPTH) - u(DEPTH)
    base = partial.subs(DEPTH, 0).doit()
    return Induction(base, step)


# --- variance ---------------------------------------------------------------------------------

_SIGMA = sp.Symbol("sigma", positive=True)
_LAYERS = sp.Symbol("L", integer=True, positive=True)


@functools.cache
def variance_identity() -> tuple[sp.Expr, sp.Expr]:
    """``Var(X+F) − (Var X + Var F + 2Cov(X,F))`` and ``Cov(X,F)``, with sympy.stats.

    F depends on X (``F = cX + Z``, X and Z independent normals), so the covariance is
    ``c·σ_X²``, not zero: dropping it would be wrong.
    """
    sx, sz = sp.symbols("sigma_X sigma_Z", positive=True)
    c = sp.Symbol("c", real=True)
    x, z = stats.Normal("X", 0, sx), stats.Normal("Z", 0, sz)
    f = c * x + z
    lhs = stats.variance(x + f)
    rhs = stats.variance(x) + stats.variance(f) + 2 * stats.covariance(x, f)
    return sp.simplify(lhs - rhs), sp.simplify(stats.covariance(x, f))


@functools.cache
def independent_sum_induction() -> Induction:
    """Prove ``Var(Σ_{l<L} N_l) = L·σ²`` for independent ``N_l`` of variance σ², symbolic L ≥ 1.

    Base: one update has variance σ². Step: the sum of L updates (variance Lσ² by
    hypothesis) plus one more independent update has variance (L+1)σ² (sympy.stats).
    """
    partial = stats.Normal("S", 0, _SIGMA * sp.sqrt(_LAYERS))
    update = stats.Normal("N", 0, _SIGMA)
    base = stats.variance(update) - _SIGMA**2
    step = stats.variance(partial + update) - (_LAYERS + 1) * _SIGMA**2
    return Induction(base, sp.simplify(step))


@functools.cache
def rescaled_variance() -> sp.Expr:
    """``Var((1/√L) Σ_{l<L} N_l)`` for symbolic L ≥ 1: σ², whatever the depth."""
    partial = stats.Normal("S", 0, _SIGMA * sp.sqrt(_LAYERS))
    return sp.simplify(stats.variance(partial / sp.sqrt(_LAYERS)))


def noise_variance(layers: int, sigma: Fraction = Fraction(1),
                   scale: Fraction = Fraction(1)) -> Fraction:
    """Per-component variance after ``layers`` independent updates of sd ``scale·sigma``."""
    law = (_LAYERS * _SIGMA**2).subs({_LAYERS: layers, _SIGMA: sp.Rational(scale * sigma)})
    return Fraction(str(law))


def sample_variance(values: Sequence[Fraction]) -> Fraction:
    """The population variance of a finite sample, exactly (divides by n)."""
    return sample_covariance(values, values)


def sample_covariance(xs: Sequence[Fraction], ys: Sequence[Fraction]) -> Fraction:
    """The population covariance of paired samples, exactly."""
    if len(xs) != len(ys) or not xs:
        raise UsageError(f"need two samples of one positive length, got {len(xs)} and {len(ys)}")
    mx, my = sum(xs, Fraction(0)) / len(xs), sum(ys, Fraction(0)) / len(ys)
    return sum(((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)), Fraction(0)) / len(xs)


def sample_identity_gap(xs: Sequence[Fraction], fs: Sequence[Fraction]) -> Fraction:
    """``var(x+f) − (var x + var f + 2 cov(x, f))`` over samples: exactly 0 in rationals."""
    total = [x + f for x, f in zip(xs, fs, strict=True)]
    return sample_variance(total) - (sample_variance(xs) + sample_variance(fs)
                                     + 2 * sample_covariance(xs, fs))


# --- rounding: the same depth law in a float format -----------------------------------------

def rounded_depth_product(slope: float, depth: int, dtype: str = "float32") -> float:
    """``depth`` steps ``y = y + a*y`` from ``y = 1`` in ``dtype`` (a rounded to it first).

    This is what a backward pass through the scalar stack computes for ``dx_L/dx_0``.
    """
    kind = np.dtype(dtype).type
    a, y = kind(slope), kind(1)
    for _ in range(depth):
        y = kind(y + kind(a * y))
    return float(y)


def depth_product_bound(slope: Fraction, depth: int, unit_roundoff: Fraction) -> Fraction:
    """A rigorous bound on ``|rounded_depth_product − (1+a)^L|``: ``γ_{3L}·(1+|a|)^L``.

    Why: with ``â = a(1+δ₀)`` and two roundings per step, the computed value is
    ``Π_l (1 + a(1+δ₀)(1+δ₁ₗ))(1+δ₂ₗ)``; each term ``a^|S|`` of the expansion of
    ``(1+a)^L`` carries at most ``3L`` factors ``(1+δ)``, ``|δ| ≤ u``, so it moves by at most
    ``γ_{3L}|a|^|S|`` with ``γ_k = ku/(1−ku)`` (the standard constant).
    """
    k = 3 * depth * unit_roundoff
    if k >= 1:
        raise UsageError(f"depth {depth} too large for unit roundoff {unit_roundoff}")
    return k / (1 - k) * (1 + abs(slope)) ** depth
