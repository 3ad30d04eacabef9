"""Every op entry is whole, and every consumer of it agrees with its exact rules.

These tests run over :data:`resverify.spec.ops.OP_TABLE` and each entry's ``samples``, so a
new op is checked by them as soon as its entry exists: its SymPy form against its
hand-written VJP, its reference NumPy rule and every installed array library within the
error budget of its exact rule, and its shape rule enforced by each of them. Its JVP is
checked the same way, against SymPy's Jacobian times a tangent.
"""

from __future__ import annotations

import importlib.util
import inspect
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import sympy

from resverify.impl import resolve_backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.budget import error_budget
from resverify.spec.derive import attribute_symbol, derived, derived_jvp, derived_vjp
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.exact import evaluate
from resverify.spec.ir import OPS, Input, Node, Program
from resverify.spec.ops import OP_TABLE, Op
from resverify.spec.ops.attributes import sample_params
from resverify.spec.request import Request, ResultError, Value

PARTS = sorted(name for name, member in vars(Op).items()
               if getattr(member, "__isabstractmethod__", False))
ATTRIBUTE_VALUES = {"alpha": Fraction(3, 4), "eps": Fraction(1, 100)}
CASES = [(name, shapes) for name, op in OP_TABLE.items() for shapes in op.samples]
ADAPTERS = [name for name, module in (("torch", "torch"), ("jax", "jax"),
                                      ("autograd", "autograd"))
            if importlib.util.find_spec(module) is not None]


def attributes(name: str, shapes: tuple[Shape, ...]) -> dict[str, Any]:
    """The op's attributes on a sample: α = 3/4, ε = 1/100, a layout op's from its sample."""
    attr = OP_TABLE[name].attribute
    return {attr: ATTRIBUTE_VALUES[attr]} if attr else {"params": sample_params(shapes)}


def one_op_request(name: str, shapes: tuple[Shape, ...], seed: int = 0) -> Request:
    """The op alone on inputs ``a``, ``b`` of ``shapes``, random dyadic values, and
    :func:`attributes`."""
    rng = np.random.default_rng(seed)
    names = "abc"[: len(shapes)]
    program = Program(tuple(Input(n, s) for n, s in zip(names, shapes, strict=True)),
                      (Node("y", name, tuple(names), **attributes(name, shapes)),), "y")
    out_shape = OP_TABLE[name].shape(list(shapes), sample_params(shapes))
    inputs = dict(zip(names, OP_TABLE[name].draw(rng, shapes), strict=True))
    return Request(program, inputs, "float64", rng.integers(-8, 9, size=out_shape) / 4.0)


def test_every_op_has_every_part() -> None:
    expected = ["budget", "budget_jvp", "budget_vjp", "error", "error_jvp",
                "error_vjp", "exact", "exact_jvp", "exact_vjp", "numpy", "numpy_jvp", "shape",
                "symbolic"]
    assert expected == PARTS
    for name, op in OP_TABLE.items():
        assert op.name == name and OPS[name] == op.arity, name
        for part in PARTS:
            assert not getattr(getattr(op, part), "__isabstractmethod__", False), (name, part)
        assert op.samples, f"{name} has no sample shapes"
        assert all(len(shapes) == op.arity for shapes in op.samples), name


def test_an_entry_missing_a_part_cannot_be_made() -> None:
    """The check above can fail: a class without every rule is refused at construction."""
    members = {part: getattr(OP_TABLE["relu"], part) for part in PARTS if part != "budget_vjp"}
    partial = type("Partial", (Op,), {"name": "partial", "arity": 1, **members})
    assert inspect.isabstract(partial)
    with pytest.raises(TypeError, match="budget_vjp"):
        partial()


def nonzero_differences(left: np.ndarray, right: np.ndarray) -> list[sympy.Expr]:
    assert left.shape == right.shape, f"shape {left.shape}, but should be {right.shape}"
    return [d for d in (sympy.simplify(sympy.sympify(p) - q)
                        for p, q in zip(left.flat, right.flat, strict=True)) if d != 0]


@pytest.mark.parametrize(("name", "shapes"), CASES)
def test_entry_vjp_equals_the_sympy_derivative_of_its_symbolic_form(
        name: str, shapes: tuple[Shape, ...]) -> None:
    """On symbols where the VJP is one formula; at random non-zero rationals otherwise."""
    op, case = OP_TABLE[name], derived(name, shapes)
    alpha = attribute_symbol(name, shapes)
    derived_parts = derived_vjp(name, shapes)
    if op.smooth:
        hand = op.exact_vjp(case.cotangent, case.args, case.output, alpha)
        for i, (mine, sym) in enumerate(zip(hand, derived_parts, strict=True)):
            wrong = nonzero_differences(mine, sym)
            assert not wrong, f"{name}{shapes} arg {i}: hand - derived = {wrong[:3]}"
    if op.rational:
        point, at, k = rational_point([*case.args, case.cotangent], alpha)
        args, g = at[:-1], at[-1]
        forward = np.asarray(op.exact(args, k), dtype=object).reshape(case.output.shape)
        assert not nonzero_differences(forward, at_point(case.output, point)), f"{name}{shapes}"
        hand = op.exact_vjp(g, args, forward, k)
        for i, (mine, sym) in enumerate(zip(hand, derived_parts, strict=True)):
            wrong = nonzero_differences(mine, at_point(sym, point))
            assert not wrong, f"{name}{shapes} arg {i} at a point: hand - derived = {wrong[:3]}"


def at_point(array: np.ndarray, point: dict[sympy.Symbol, sympy.Expr]) -> np.ndarray:
    return np.vectorize(lambda e: sympy.sympify(e).subs(point), otypes=[object])(array)


def rational_point(arrays: list[np.ndarray], alpha: object
                   ) -> tuple[dict[sympy.Symbol, sympy.Expr], list[np.ndarray], object]:
    """Random non-zero rationals for every symbol of ``arrays`` (and α): the point, each
    array at it, and α's value (a layout op's integer attributes as they are, None for an
    op without an attribute)."""
    if alpha is not None and not isinstance(alpha, sympy.Symbol):
        point, at, _ = rational_point(arrays, None)
        return point, at, alpha
    rng = np.random.default_rng(1)
    symbols = [*arrays] + ([] if alpha is None else [np.array(alpha)])
    point = {s: sympy.Rational(int(rng.choice([-7, -3, -1, 1, 2, 5])), 4)
             for array in symbols for s in np.asarray(array).flat}
    at = [at_point(np.asarray(a, dtype=object), point) for a in symbols]
    k = None if alpha is None else at.pop()[()]
    return point, at, k


@pytest.mark.parametrize(("name", "shapes"), CASES)
def test_entry_jvp_equals_the_sympy_jacobian_times_the_tangent(
        name: str, shapes: tuple[Shape, ...]) -> None:
    """``exact_jvp`` is ``Σ_i J_i t_i`` with SymPy's Jacobians: on symbols where the
    derivative is one formula, at random non-zero rationals where the op is rational."""
    op, case = OP_TABLE[name], derived(name, shapes)
    alpha, want = attribute_symbol(name, shapes), derived_jvp(name, shapes)
    if op.smooth:
        mine = op.exact_jvp(case.tangents, case.args, case.output, alpha)
        wrong = nonzero_differences(np.asarray(mine, dtype=object), want)
        assert not wrong, f"{name}{shapes}: hand jvp - J t = {wrong[:3]}"
    if op.rational:
        point, at, k = rational_point([*case.args, *case.tangents], alpha)
        args, ts = at[: op.arity], at[op.arity:]
        forward = np.asarray(op.exact(args, k), dtype=object).reshape(case.output.shape)
        mine = np.asarray(op.exact_jvp(ts, args, forward, k), dtype=object)
        wrong = nonzero_differences(mine, at_point(want, point))
        assert not wrong, f"{name}{shapes} at a point: hand jvp - J t = {wrong[:3]}"


def test_a_wrong_jvp_is_caught() -> None:
    """The JVP comparison can fail: linear's tangent with ``wᵀ`` (the VJP's matrix) instead
    of ``w`` differs from SymPy's ``J t``."""
    case = derived("linear", ((2,), (2, 2)))
    (x, w), (tx, tw) = case.args, case.tangents
    transposed = tx @ w.T + x @ tw
    assert nonzero_differences(transposed, derived_jvp("linear", ((2,), (2, 2))))
    assert not nonzero_differences(tx @ w + x @ tw, derived_jvp("linear", ((2,), (2, 2))))


@pytest.mark.parametrize(("name", "shapes"), CASES)
@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
def test_reference_and_adapters_run_each_op_within_its_budget(
        backend: str, name: str, shapes: tuple[Shape, ...]) -> None:
    request = one_op_request(name, shapes)
    exact = evaluate(request)
    result = NumpyBackend().run(request) if backend == "numpy" else resolve_backend(
        backend).run(request)
    assert isinstance(result, Value), result
    misses = error_budget(request, exact=exact).misses(exact, result.output, result.grads)
    assert not misses, f"{backend} {request.program.describe()}{shapes}: {misses[:3]}"


@pytest.mark.parametrize(("name", "shapes"), CASES)
@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
def test_reference_and_adapters_run_each_op_tangent_within_its_budget(
        backend: str, name: str, shapes: tuple[Shape, ...]) -> None:
    """Forward mode, for every backend that claims it: the op's output tangent is inside
    ``Budget.tangent`` around the exact ``J t``."""
    runner = NumpyBackend() if backend == "numpy" else resolve_backend(backend)
    if "jvp" not in runner.capabilities.modes:
        pytest.skip(f"backend {backend}: mode jvp not claimed")
    plain = one_op_request(name, shapes)
    rng = np.random.default_rng(2)
    request = Request(plain.program, plain.inputs, "float64", plain.cotangent,
                      {n: rng.integers(-8, 9, size=v.shape) / 4.0
                       for n, v in plain.inputs.items()})
    exact = evaluate(request)
    result = runner.run(request)
    assert isinstance(result, Value), result
    misses = error_budget(request, exact=exact).misses(exact, result.output, result.grads,
                                                       result.tangent)
    assert not misses, f"{backend} {request.program.describe()}{shapes}: {misses[:3]}"


@pytest.mark.parametrize("backend", ["numpy", *ADAPTERS])
@pytest.mark.parametrize("name", sorted(n for n, op in OP_TABLE.items() if op.arity == 2))
def test_reference_and_adapters_refuse_what_the_shape_rule_refuses(
        backend: str, name: str) -> None:
    shapes = ((2, 3), (2,))  # refused by every binary op of the table
    given = attributes(name, OP_TABLE[name].samples[0])  # cat's axis
    with pytest.raises(ShapeMismatch, match=r"\[2, 3\] vs \[2\]"):
        OP_TABLE[name].shape(list(shapes), given.get("params"))
    program = Program((Input("a", shapes[0]), Input("b", shapes[1])),
                      (Node("y", name, ("a", "b"), **given),), "y")
    request = Request(program, {"a": np.ones(shapes[0]), "b": np.ones(shapes[1])}, "float64",
                      None)
    result = NumpyBackend().run(request) if backend == "numpy" else resolve_backend(
        backend).run(request)
    assert isinstance(result, ResultError) and result.kind == "shape_mismatch", result
    assert result.shapes == shapes
