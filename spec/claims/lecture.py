"""Claims S15–S20 of the lecture page (seed ``001_…``): the Jacobian law and the relu block.

Why: the page states the block's Jacobian ``I + J_F`` and works it through a small relu
block; its claims check the law symbolically and the block's values and Jacobians exactly.
Each claim is one block: its declaration (:mod:`~resverify.spec.claims.register`) on the
function that observes it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from resverify.spec import exact
from resverify.spec import symbolic as sym
from resverify.spec.claims.build import (
    frac,
    fracs,
    is_zero,
    make_program,
    make_request,
    residual_pair,
)
from resverify.spec.claims.model import Claim, Interpreter
from resverify.spec.claims.register import SeedClaims
from resverify.spec.ir import Program
from resverify.spec.request import Request

__all__ = []

LECTURE = "001_47336aab8f275adc.txt"
SEED = SeedClaims(LECTURE)

_KEEP_PATH = SEED.section("Учить поправку и сохранять прямой путь",
                          "Learn the correction and keep the straight path", "ru")
_EXPERIMENT = SEED.section("Эксперимент", "Experiment", "ru")


def _jacobian(interp: Interpreter, request_for_row: Callable[[int], Request], n: int
              ) -> tuple[tuple[Fraction, ...], ...]:
    """Rows of a Jacobian, one unit cotangent each: ``x̄ = Jᵀ e_i`` is row i of J."""
    rows = []
    for i in range(n):
        grads = interp(request_for_row(i)).grads
        rows.append(grads["x"])
    return tuple(rows)


def _unit(i: int, n: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(n)]


def _relu_block(gain: Fraction, residual: bool) -> Program:
    nodes: list[tuple[Any, ...]] = [("r", "relu", ("x",)), ("f", "scale", ("r",), gain)]
    if residual:
        nodes.append(("y", "residual_add", ("x", "f")))
    return make_program({"x": (2,)}, nodes, "y" if residual else "f")


def _relu_request(gain: Fraction, residual: bool, x: list[float], row: int) -> Request:
    """The relu block at ``x`` with the unit cotangent of output ``row``."""
    return make_request(_relu_block(gain, residual), {"x": x}, _unit(row, 2))


@SEED.claim("S15", _KEEP_PATH,
            "A zero branch makes the block the identity; a shape mismatch, even a "
            "broadcastable one, is refused, and an explicit projection makes it valid.",
            expected={"zero branch is identity": True, "broadcastable pair refused": True,
                      "explicit projection accepted": True})
def _s15(interp: Interpreter) -> dict[str, object]:
    zero = sym.Branch("zero", sym.symbolic_branch(2).xs, sp.zeros(2, 1))
    identity = (sym.block_output(zero, sp.Integer(1)) == sp.Matrix(zero.xs)
                and sym.block_jacobian(zero, sp.Integer(1)) == sp.eye(2))
    pair = {"x": [1.0, 2.0], "f": [3.0]}
    broadcast = interp(make_request(residual_pair((2,), (1,)), pair, None))
    projected = make_program({"x": (3,), "p": (3, 2), "w": (3, 2)},
                             [("i", "linear", ("x", "p")), ("f", "linear", ("x", "w")),
                              ("y", "residual_add", ("i", "f"))], "y")
    ones = np.ones((3, 2))
    run = interp(make_request(projected, {"x": [1.0, 2.0, 3.0], "p": ones, "w": ones}, [1.0, 1.0]))
    return {"zero branch is identity": identity,
            "broadcastable pair refused": broadcast.error == "shape_mismatch",
            "explicit projection accepted": run.error is None}


@SEED.exact_claim("S16", _KEEP_PATH,
                  "For any differentiable branch J_y = I + J_F and ∇_x L = (I + J_F)ᵀ ∇_y L.",
                  expected={"J_y = I + J_F": True, "grad_x = (I + J_F)^T grad_y": True})
def _s16() -> dict[str, bool]:
    branch, one = sym.symbolic_branch(3), sp.Integer(1)
    return {"J_y = I + J_F": is_zero(sym.jacobian_law_difference(branch, one)),
            "grad_x = (I + J_F)^T grad_y": is_zero(sym.vjp_law_difference(branch, one))}


_RESIDUAL_JACOBIAN = ((frac("1"), frac("0")), (frac("0"), frac("3/2")))
_PLAIN_JACOBIAN = ((frac("0"), frac("0")), (frac("0"), frac("1/2")))


def _symbolic_residual_jacobian() -> tuple[tuple[Fraction, ...], ...]:
    branch = sym.relu_branch(2, sp.Rational(1, 2))
    point = dict(zip(branch.xs, (-1, 2), strict=True))
    symbolic = sym.block_jacobian(branch, sp.Integer(1)).subs(point)
    return tuple(tuple(Fraction(str(v)) for v in symbolic.row(i)) for i in range(2))


@SEED.claim("S17a", _KEEP_PATH,
            "F(x)=0.5·relu(x) at x=[-1,2]: F=[0,1], y=[-1,3], Jacobian diag(1,1.5); "
            "without the skip the output is [0,1] and the Jacobian diag(0,0.5).",
            expected={"residual output": fracs("-1", "3"),
                      "residual jacobian": _RESIDUAL_JACOBIAN,
                      "plain output": fracs("0", "1"),
                      "plain jacobian": _PLAIN_JACOBIAN,
                      "symbolic residual jacobian": _RESIDUAL_JACOBIAN},
            exact_also={"symbolic residual jacobian": _symbolic_residual_jacobian})
def _s17a(interp: Interpreter) -> dict[str, object]:
    half, x = Fraction(1, 2), [-1.0, 2.0]
    observed: dict[str, object] = {}
    for kind, residual in (("residual", True), ("plain", False)):
        observed[f"{kind} output"] = interp(_relu_request(half, residual, x, 0)).output
        observed[f"{kind} jacobian"] = _jacobian(
            interp, functools.partial(_relu_request, half, residual, x), 2)
    return observed


def _relu_slope_at_zero() -> Fraction:
    v = sp.Symbol("v", real=True)
    return Fraction(str(sp.diff(sym.relu(v), v).subs(v, 0)))


@SEED.claim("S17b", _KEEP_PATH,
            "At the kink the project declares relu'(0) = 0, so the residual relu block's "
            "derivative at x=0 is exactly 1.",
            expected={"relu'(0)": frac("0"),
                      "residual jacobian row 0 at x=[0,2]": fracs("1", "0")},
            exact_also={"relu'(0)": _relu_slope_at_zero},
            note="Left open by the seeds. Decision: relu'(0) = 0 everywhere (spec, "
                 "reference, and what backends are checked against).")
def _s17b(interp: Interpreter) -> dict[str, object]:
    row = interp(_relu_request(Fraction(1, 2), True, [0.0, 2.0], 0)).grads
    assert row is not None
    return {"residual jacobian row 0 at x=[0,2]": row["x"]}


@SEED.claim("S18", _EXPERIMENT,
            "With g=-1 the positive coordinate's derivative is 1 + F' = 0: a residual "
            "block can cancel its gradient, so 'a unit path' is no lower bound of 1.",
            expected={"jacobian g=-1": ((frac("1"), frac("0")), (frac("0"), frac("0")))})
def _s18(interp: Interpreter) -> dict[str, object]:
    return {"jacobian g=-1": _jacobian(
        interp, lambda i: _relu_request(Fraction(-1), True, [-1.0, 2.0], i), 2)}


class _CountingFraction(Fraction):
    """A Fraction that counts the additions it takes part in (as left operand)."""

    additions = 0

    def __add__(self, other: Any) -> Fraction:  # type: ignore[override]
        _CountingFraction.additions += 1
        return Fraction(self) + other


@SEED.exact_claim("S19", _EXPERIMENT,
                  "The skip adds no weights, only one residual_add, costing one addition per "
                  "component.",
                  expected={"added inputs": (), "added ops": ("residual_add",),
                            "additions per component": frac("1")})
def _s19() -> dict[str, object]:
    plain, residual = _relu_block(Fraction(1, 2), False), _relu_block(Fraction(1, 2), True)
    added_inputs = tuple(sorted(set(residual.input_names) - set(plain.input_names)))
    added_ops = tuple(sorted(n.op for n in residual.nodes if n not in plain.nodes))
    width = 5
    values = [_CountingFraction(i) for i in range(width)]
    _CountingFraction.additions = 0
    exact.evaluate_exact(residual_pair((width,), (width,)), {"x": values, "f": values}, None)
    return {"added inputs": added_inputs, "added ops": added_ops,
            "additions per component": Fraction(_CountingFraction.additions, width)}


@SEED.claim("S20", _EXPERIMENT,
            "The page's snippet values hold: F=[0,1] and y=[-1,3] for x=[-1,2], g=0.5.",
            expected={"F": fracs("0", "1"), "y": fracs("-1", "3")})
def _s20(interp: Interpreter) -> dict[str, object]:
    return {"F": interp(_relu_request(Fraction(1, 2), False, [-1.0, 2.0], 0)).output,
            "y": interp(_relu_request(Fraction(1, 2), True, [-1.0, 2.0], 0)).output}


CLAIMS: tuple[Claim, ...] = SEED.claims
