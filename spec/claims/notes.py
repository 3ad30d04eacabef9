"""Claims S21–S30 of the study notes (seed ``004_…``): depth, variance, and rounding.

Why: the notes unroll a stack of scalar blocks into ``(1+a)^L``, reason about the variance
of the residual stream, and compare float32 with exact arithmetic; some of their statements
are subtly wrong, and the claims record the project's decision beside the corrected fact.
Each claim is one block: its declaration (:mod:`~resverify.spec.claims.register`) on the
function that observes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from resverify.spec import exact
from resverify.spec import symbolic as sym
from resverify.spec.budget import error_budget
from resverify.spec.claims.build import frac, fracs, is_zero, make_program, make_request
from resverify.spec.claims.model import (
    Claim,
    Interpreter,
    Run,
    Runner,
    backend_interpreter,
    exact_run,
    flat,
    value_of,
)
from resverify.spec.claims.register import SeedClaims
from resverify.spec.ir import Program
from resverify.spec.request import Request

__all__ = []

NOTES = "004_d56be5c065187336.txt"
SEED = SeedClaims(NOTES)

_COMPOSITE = SEED.section("从复合函数理解残差连接",
                          "Understanding residual connections as composite functions", "zh")
_RECURRENCE = SEED.section("先写递推，再展开公式",
                           "Write the recurrence first, then unroll the formula", "zh")
_LINEAR_CHECK = SEED.section("用一个线性函数检查梯度",
                             "Checking the gradient with a linear function", "zh")
_VARIANCE = SEED.section("残差流的方差为什么会增长",
                         "Why the variance of the residual stream grows", "zh")
_IMPLEMENTATION = SEED.section("实现时应该检查什么",
                               "What to check in an implementation", "zh")
_PYTORCH = SEED.section("展开 PyTorch 示例", "Expand the PyTorch example", "zh")


def _chain(residual: bool, depth: int = 3) -> bool:
    """``d/dx₀`` of a composition of blocks is the product of each block's local derivative,
    ``1 + F_l'(x_l)`` (residual) or ``F_l'(x_l)`` (plain), each taken at its own state."""
    x0, t = sp.Symbol("x_0", real=True), sp.Symbol("t", real=True)
    state: sp.Expr = x0
    factors = []
    for layer in range(depth):
        f = sp.Function(f"F{layer}")
        factors.append((1 if residual else 0) + sp.diff(f(t), t).subs(t, state))
        state = state + f(state) if residual else f(state)
    return bool(sp.simplify(sp.diff(state, x0) - sp.Mul(*factors)) == 0)


@SEED.exact_claim("S21", _COMPOSITE,
                  "A residual module has Jacobian I + J_F, and the derivative of a composition "
                  "is the product of the modules' Jacobians, plain or residual.",
                  expected={"residual module J = I + J_F": True,
                            "plain chain is product of J_F": True,
                            "residual chain is product of (I + J_F)": True})
def _s21() -> dict[str, bool]:
    branch = sym.symbolic_branch(2)
    module = is_zero(sym.jacobian_law_difference(branch, sp.Integer(1)))
    return {"residual module J = I + J_F": module,
            "plain chain is product of J_F": _chain(False),
            "residual chain is product of (I + J_F)": _chain(True)}


@SEED.exact_claim("S22", _RECURRENCE,
                  "x_{l+1} = x_l + F_l(x_l) unrolls to x_L = x_0 + Σ F_l(x_l), each F_l taken "
                  "at its own state (symbolic L by induction, and L=1..5 directly).",
                  expected={"symbolic L": True, "L = 1..5": True})
def _s22() -> dict[str, bool]:
    return {"symbolic L": sym.unrolled_sum_induction().holds,
            "L = 1..5": all(sym.unrolled_sum_difference(d) == 0 for d in range(1, 6))}


def _scalar_stack(depth: int, slope: Fraction) -> Program:
    """``depth`` scalar residual blocks ``x ← x + a·x`` (the notes' ``F(x) = a·x``)."""
    nodes: list[tuple[Any, ...]] = []
    prev = "x"
    for layer in range(depth):
        nodes += [(f"s{layer}", "scale", (prev,), slope),
                  (f"h{layer}", "residual_add", (prev, f"s{layer}"))]
        prev = f"h{layer}"
    return make_program({"x": (1,)}, nodes, prev)


def _scalar_grad(interp: Interpreter, depth: int, slope: Fraction) -> Fraction:
    grads = interp(make_request(_scalar_stack(depth, slope), {"x": [1.0]}, [1.0])).grads
    return grads["x"][0]


@SEED.claim("S23", _RECURRENCE,
            "A block's input gradient (1+a)ȳ for F=a·x is not bounded below by 1: it can "
            "shrink (a=-1/2), grow (a=1) or vanish (a=-1).",
            expected={"a=-1/2": frac("1/2"), "a=1": frac("2"), "a=-1": frac("0")})
def _s23(interp: Interpreter) -> dict[str, object]:
    return {f"a={a}": _scalar_grad(interp, 1, a)
            for a in (Fraction(-1, 2), Fraction(1), Fraction(-1))}


@SEED.exact_claim("S24", _LINEAR_CHECK,
                  "L blocks of F=a·x have derivative (1+a)^L, not 1+a+…+a^L; at L=3 it is "
                  "1+3a+3a²+a³.",
                  expected={"(1+a)^L for symbolic L": True,
                            "binomial expansion for symbolic L": True,
                            "expansion L=3": "a**3 + 3*a**2 + 3*a + 1",
                            "1+a+...+a^L first differs": {"L": 2, "a": frac("1"),
                                                          "(1+a)^L": frac("4"),
                                                          "sum": frac("3")},
                            "expansion checked for L=1..1000": True})
def _s24() -> dict[str, object]:
    ref = sym.refute_geometric_sum()
    return {"(1+a)^L for symbolic L": sym.depth_induction(True).holds,
            "binomial expansion for symbolic L": sym.binomial_induction().holds,
            "expansion L=3": str(sym.expansion(3)),
            "1+a+...+a^L first differs": {"L": ref.depth, "a": ref.slope,
                                          "(1+a)^L": ref.residual, "sum": ref.geometric},
            "expansion checked for L=1..1000": sym.expansion_sweep(1000) is None}


@SEED.claim("S25", _LINEAR_CHECK,
            "Three blocks: a=-0.5 gives derivative 0.125 and a=1 gives 8.",
            expected={"a=-1/2": frac("1/8"), "a=1": frac("8")})
def _s25(interp: Interpreter) -> dict[str, object]:
    return {f"a={a}": _scalar_grad(interp, 3, a) for a in (Fraction(-1, 2), Fraction(1))}


_SAMPLE_SEED = 20240824


@SEED.exact_claim("S26", _VARIANCE,
                  "100 layers of independent unit normal noise give per-component variance "
                  "100 and sd 10; one run's sample sd over 768 components only approximates "
                  "10.",
                  expected={"variance": frac("100"), "sd": frac("10"),
                            "sample sd exactly 10": False,
                            "sample sd within 4 standard errors": True},
                  note="The sample part uses a fixed seed; 4 standard errors of an sd estimate "
                       "from 768 values is about ±1.02.")
def _s26() -> dict[str, object]:
    variance = sym.noise_variance(100)
    sd = Fraction(str(sp.sqrt(sp.Rational(variance))))
    draws = np.random.default_rng(_SAMPLE_SEED).standard_normal((100, 768)).sum(axis=0)
    sample_sd = float(np.std(draws))
    standard_error = float(sd) / np.sqrt(2 * 768)
    return {"variance": variance, "sd": sd, "sample sd exactly 10": sample_sd == 10.0,
            "sample sd within 4 standard errors": bool(abs(sample_sd - 10) < 4 * standard_error)}


@SEED.exact_claim("S27", _VARIANCE,
                  "Scaling each of the 100 updates by 1/√100 = 0.1 brings the variance of "
                  "their sum to 1; for any L the 1/√L scaling keeps it at σ².",
                  expected={"scale": frac("1/10"), "variance": frac("1"),
                            "rescaled variance, symbolic L": "sigma**2"})
def _s27() -> dict[str, object]:
    scale = Fraction(str(1 / sp.sqrt(100)))
    return {"scale": scale, "variance": sym.noise_variance(100, scale=scale),
            "rescaled variance, symbolic L": str(sym.rescaled_variance())}


@SEED.exact_claim("S28", _VARIANCE,
                  "Var(x+F) = Var x + Var F + 2Cov(x,F), and when F depends on x the "
                  "covariance is not zero; the same identity holds exactly for sample moments.",
                  expected={"identity gap": "0", "Cov(X, F) for F = cX + Z": "c*sigma_X**2",
                            "sample identity gap (rationals)": frac("0"),
                            "sample covariance nonzero": True})
def _s28() -> dict[str, object]:
    gap, cov = sym.variance_identity()
    rng = np.random.default_rng(_SAMPLE_SEED)
    xs = [Fraction(int(v), 8) for v in rng.integers(-40, 40, size=64)]
    fs = [Fraction(3, 5) * x + Fraction(int(v), 4) for x, v in
          zip(xs, rng.integers(-9, 9, size=64), strict=True)]
    return {"identity gap": str(gap), "Cov(X, F) for F = cX + Z": str(cov),
            "sample identity gap (rationals)": sym.sample_identity_gap(xs, fs),
            "sample covariance nonzero": sym.sample_covariance(xs, fs) != 0}


_EPS = Fraction(7, 4)  # with x = [2, -1]: σ² = 9/4, σ² + ε = 4, so layer_norm is rational


def _placed(where: str) -> Program:
    """One block with a zero linear branch, pre-norm ``x + F(LN(x))`` or post-norm
    ``LN(x + F(x))``, over x of width 2."""
    branch_input = "n" if where == "pre" else "x"
    nodes: list[tuple[Any, ...]] = [("f", "linear", (branch_input, "w")),
                                    ("h", "residual_add", ("x", "f"))]
    if where == "pre":
        nodes.insert(0, ("n", "layer_norm", ("x",), None, _EPS))
    else:
        nodes.append(("y", "layer_norm", ("h",), None, _EPS))
    return make_program({"x": (2,), "w": (2, 2)}, nodes, "h" if where == "pre" else "y")


def _projected(output: str) -> Program:
    """``linear(x, P) + linear(x, W)`` (width 2 -> 3), or either path alone."""
    return make_program({"x": (2,), "p": (2, 3), "w": (2, 3)},
                        [("q", "linear", ("x", "p")), ("f", "linear", ("x", "w")),
                         ("y", "residual_add", ("q", "f"))], output)


@SEED.claim("S29", _IMPLEMENTATION,
            "A branch that changes the width is refused by the merge even where + would "
            "broadcast, a projection shortcut's input gradient is the sum of both paths, and "
            "with the branch off a pre-norm block is the identity while a post-norm block is "
            "the normalization, so where the norm sits changes the recurrence.",
            expected={"width change refused": "shape_mismatch", "refused shapes": ((3,), (2,)),
                      "refused where + broadcasts": ((1,), (2,)),
                      "projected output": fracs("2", "5", "7"),
                      "projected grad x": fracs("7", "13"),
                      "shortcut path + branch path": fracs("7", "13"),
                      "pre-norm, zero branch: output": fracs("2", "-1"),
                      "pre-norm, zero branch: grad x": fracs("1", "0"),
                      "post-norm, zero branch: output": fracs("3/4", "-3/4"),
                      "post-norm, zero branch: grad x": fracs("7/64", "-7/64")},
            note="ε = 7/4 makes σ² + ε = 4 a perfect square for x = [2, -1], so every "
                 "layer_norm value here is an exact rational on every side.")
def _s29(interp: Interpreter) -> dict[str, object]:
    wide = make_program({"x": (3,), "w": (3, 2)},
                        [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f"))], "y")
    refused = interp(make_request(wide, {"x": [1.0, 2.0, 3.0], "w": np.ones((3, 2))}, None))
    narrow = make_program({"x": (1,), "w": (1, 2)},
                          [("f", "linear", ("x", "w")), ("y", "residual_add", ("x", "f"))], "y")
    broadcast = interp(make_request(narrow, {"x": [1.0], "w": [[1.0, 2.0]]}, None))
    values = {"x": [1.0, 2.0], "p": [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]],
              "w": [[1.0, 1.0, 0.0], [0.0, 1.0, 2.0]]}
    runs = {out: interp(make_request(_projected(out), values, [1.0, 2.0, 3.0]))
            for out in ("y", "q", "f")}
    placed = {where: interp(make_request(_placed(where), {"x": [2.0, -1.0],
                                                          "w": np.zeros((2, 2))}, [1.0, 0.0]))
              for where in ("pre", "post")}
    return {"width change refused": refused.error, "refused shapes": refused.error_shapes,
            "refused where + broadcasts": broadcast.error_shapes,
            "projected output": runs["y"].output, "projected grad x": runs["y"].grads["x"],
            "shortcut path + branch path": tuple(
                a + b for a, b in zip(runs["q"].grads["x"], runs["f"].grads["x"], strict=True)),
            **{f"{where}-norm, zero branch: {part}": (run.output if part == "output"
                                                      else run.grads["x"])
               for where, run in placed.items() for part in ("output", "grad x")}}


_U32 = Fraction(1, 2**24)
_TENTH = Fraction(1, 10)


def _float32_stack(slope: Fraction) -> Request:
    return make_request(_scalar_stack(3, slope), {"x": [1.0]}, [1.0], "float32")


def _within_budget(request: Request, output: object, grads: Mapping[str, object]) -> bool:
    """Inside the project's float32 error budget (:mod:`resverify.spec.budget`) around the
    exact result."""
    reference = exact.evaluate(request)
    arrays = {k: np.asarray(v) for k, v in grads.items()}
    return error_budget(request, exact=reference).allows(reference, np.asarray(output), arrays)


def _grad_x(run: Run) -> Fraction:
    return run.grads["x"][0]


def _s30_rounded_in_python() -> dict[str, object]:
    """The exact side: float32 rounding of ``(1+a)^3`` simulated step by step."""
    rounded = sym.rounded_depth_product(0.1, 3, "float32")
    exact_value = _scalar_grad(exact_run, 3, _TENTH)
    as_array = np.array([rounded], dtype=np.float32)
    gap = abs(Fraction(rounded) - exact_value)
    return {"exact a=1/10": exact_value, "float32 a=0.1": rounded,
            "float32 equals exact": Fraction(rounded) == exact_value,
            "float32 within budget": _within_budget(_float32_stack(_TENTH), as_array,
                                                    {"x": as_array}),
            "float32 within γ_9·(1+a)^3": gap <= sym.depth_product_bound(_TENTH, 3, _U32),
            "float32 exact at a=-1/2 and a=1": all(
                Fraction(sym.rounded_depth_product(a, 3, "float32")) == (1 + Fraction(a)) ** 3
                for a in (-0.5, 1.0))}


@SEED.backend_claim("S30", _PYTORCH,
                    "Three steps y = y + a·y from 1 give (1+a)^3; in float32 a=-0.5 and a=1 "
                    "are exact but a=0.1 gives 1.3310000896… ≠ 1.331, inside the float32 "
                    "error bound.",
                    expected={"exact a=1/10": frac("1331/1000"),
                              "float32 a=0.1": 1.3310000896453857,
                              "float32 equals exact": False, "float32 within budget": True,
                              "float32 within γ_9·(1+a)^3": True,
                              "float32 exact at a=-1/2 and a=1": True},
                    exact=_s30_rounded_in_python,
                    backend_expected={"float32 equals exact": False,
                                      "float32 within budget": True,
                                      "float32 exact at a=-1/2 and a=1": True},
                    note="The seed's exact-equality comparison would fail at a=0.1. Decision: "
                         "floating-point results are compared with the exact value within the "
                         "dtype's error budget (resverify.spec.budget; here about 2.8e-7, and "
                         "the symbolic bound γ_9·1.1³ ≈ 7.1e-7 for u=2⁻²⁴ agrees), never for "
                         "equality.")
def _s30(run: Runner) -> dict[str, object]:
    request = _float32_stack(_TENTH)
    result = value_of(run, request)
    interp = backend_interpreter(run)
    got = flat(result.grads["x"])[0]
    return {"float32 equals exact": got == (1 + _TENTH) ** 3,
            "float32 within budget": _within_budget(request, result.output, result.grads),
            "float32 exact at a=-1/2 and a=1": all(
                _grad_x(interp(_float32_stack(a))) == (1 + a) ** 3
                for a in (Fraction(-1, 2), Fraction(1)))}


CLAIMS: tuple[Claim, ...] = SEED.claims
