"""What is ``cast``'s own: its rounding to bfloat16, its budget (one rounding to the target,
none where the target holds the source; the VJP's in the source), the dtype rule it
brings into the IR, and the per-node dtypes of the budget (a program without casts is
budgeted as before). The generic checks of every entry are in ``test_table.py``."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.budget import contexts, error_budget
from resverify.spec.enclosure import verify
from resverify.spec.errors import InvalidProgram
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program, infer_dtypes
from resverify.spec.ops.cast import rounded_to
from resverify.spec.request import Request, Value
from resverify.spec.rounding import Ctx, holds
from tests.installed import skip_without_torch

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch


def cast(name: str, arg: str, source: str, target: str) -> Node:
    return Node(name, "cast", (arg,), params={"source": source, "target": target})


def test_rounding_to_bfloat16_is_torchs_from_float32() -> None:
    """Round to nearest even at 8 significant bits, ties, subnormals, overflow to inf."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    ties = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    values = np.concatenate([bits.view(np.float32), ties.view(np.float32),
                             np.array([3.4e38, -3.39e38, 1e-40, -1e-45, 0.0], dtype=np.float32)])
    values = values[np.isfinite(values)]
    want = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    mine = rounded_to(values, "bfloat16")
    assert mine.dtype == np.float32
    same = (mine == want) | (np.isnan(mine) & np.isnan(want))
    assert same.all(), f"rounded_to={mine[~same][:3]}, but should be {want[~same][:3]} " \
                       f"[bfloat16 of {values[~same][:3]}]"


def test_rounding_from_float64_rounds_once_where_torch_rounds_twice() -> None:
    """``1 + 2**-8 + 2**-30`` is nearest ``1 + 2**-7``; torch's path through float32 gives 1."""
    x = np.array([1 + 2**-8 + 2**-30])
    assert rounded_to(x, "bfloat16")[0] == 1 + 2**-7
    assert torch.from_numpy(x).to(torch.bfloat16).item() == 1.0


def test_holds_says_which_casts_are_exact() -> None:
    assert holds("float64", "float32") and holds("float32", "bfloat16")
    assert holds("float32", "float16") and not holds("float16", "bfloat16")
    assert not holds("bfloat16", "float16") and not holds("float32", "float64")


def _reference(request: Request) -> Value:
    result = NumpyBackend().run(request)
    assert isinstance(result, Value), result
    return result


def _request(program: Program, dtype: str, x: np.ndarray, seed: int = 0) -> Request:
    rng = np.random.default_rng(seed)
    cot = rounded_to(rng.standard_normal(x.shape), dtype).astype(np.float64)
    return Request(program, {"x": rounded_to(x, dtype)}, dtype, cot)


def test_a_narrowing_cast_is_charged_one_rounding_and_its_vjp_none() -> None:
    """float64 -> float32 of values float32 cannot hold: the reference's answer is off by
    its rounding, inside ``u32 |x|``; the gradient is the float64 cotangent rounded to the
    output's float32 (as torch rounds it), widened back exactly: one rounding, no more."""
    x = np.array([1 / 3, -2 / 7, 1e-3 / 3, 5.1])
    program = Program((Input("x", (4,)),), (cast("y", "x", "float64", "float32"),), "y")
    request = _request(program, "float64", x)
    result, budget = _reference(request), error_budget(request)
    error = np.abs(result.output.astype(np.float64) - x)
    assert np.all(error > 0) and np.all(error <= budget.output), (error, budget.output)
    assert np.all(budget.output <= 2**-24 * np.abs(x) * (1 + 2**-20) + 2**-149 * 1.01)
    cot = np.abs(request.cotangent)
    assert np.all(budget.grads["x"] <= 2**-24 * cot * (1 + 2**-20) + 2**-149 * 1.01)
    assert np.all(np.abs(result.grads["x"] - request.cotangent) <= budget.grads["x"])


def test_a_judge_that_ignored_the_cast_fails_the_rounded_answer() -> None:
    """The check above can fail: the same answer judged against the program without the
    cast (float64 throughout) is outside its budget."""
    x = np.array([1 / 3, -2 / 7])
    with_cast = Program((Input("x", (2,)),),
                        (Node("s", "scale", ("x",), alpha=Fraction(1, 2)),
                         cast("y", "s", "float64", "float32")), "y")
    without = Program((Input("x", (2,)),), (Node("y", "scale", ("x",), alpha=Fraction(1, 2)),),
                      "y")
    request = _request(with_cast, "float64", x)
    result = _reference(request)
    assert not verify(request, result.output, result.grads).misses
    blind = _request(without, "float64", x)
    misses = verify(blind, result.output, result.grads).misses
    assert misses, "a float32-rounded answer passed the float64 program's budget"


def test_an_upcast_is_exact_and_its_vjp_rounds_the_cotangent_to_the_source() -> None:
    """bfloat16 -> float32: the value passes exactly (its bound is the argument's, 0), the
    cotangent of float32 comes back rounded once to bfloat16."""
    program = Program((Input("x", (3,)),),
                      (cast("h", "x", "bfloat16", "float32"),
                       Node("y", "mul", ("h", "h")),
                       cast("o", "y", "float32", "bfloat16")), "o")
    request = _request(program, "bfloat16", np.array([1.5, -0.75, 3.0]))
    budget = error_budget(request)
    u16 = 2.0**-8
    y = np.array([1.5, -0.75, 3.0]) ** 2
    # one float32 product and one rounding to bfloat16
    assert np.all(budget.output < (u16 + 2**-23) * y * 1.001), budget.output
    assert np.all(budget.output > u16 * y * 0.99), budget.output
    assert np.all(budget.grads["x"] > 0), budget.grads["x"]


def test_the_cast_rules_read_the_target_and_the_source_dtype() -> None:
    x = np.array([[0.1, 0.2], [0.3, 0.4]])
    program = Program((Input("x", (2, 2)),), (cast("y", "x", "float64", "bfloat16"),), "y")
    request = _request(program, "float64", x)
    result = _reference(request)
    assert result.output.dtype == np.float32
    assert np.array_equal(result.output, rounded_to(x, "bfloat16"))
    budget = error_budget(request)
    assert np.all(np.abs(result.output - x) <= budget.output)
    assert np.all(budget.output >= 2**-8 * np.abs(x) * 0.999)


def test_a_node_computes_in_its_arguments_dtype_and_a_cast_in_its_target() -> None:
    program = Program((Input("x", (2,)),),
                      (cast("h", "x", "bfloat16", "float32"), Node("s", "mul", ("h", "h")),
                       cast("y", "s", "float32", "bfloat16")), "y")
    assert infer_dtypes(program, "bfloat16") == {"x": "bfloat16", "h": "float32",
                                                 "s": "float32", "y": "bfloat16"}


def test_arguments_in_two_dtypes_or_a_cast_from_the_wrong_source_are_invalid() -> None:
    mixed = Program((Input("x", (2,)),),
                    (cast("h", "x", "bfloat16", "float32"), Node("y", "mul", ("h", "x"))), "y")
    with pytest.raises(InvalidProgram, match=r"^node 'y': mul's arguments are in float32 and "
                                             r"bfloat16: a node computes in one dtype"):
        infer_dtypes(mixed, "bfloat16")
    wrong = Program((Input("x", (2,)),), (cast("y", "x", "float32", "float64"),), "y")
    with pytest.raises(InvalidProgram, match=r"^node 'y': cast from float32 of a bfloat16 value"):
        infer_dtypes(wrong, "bfloat16")
    with pytest.raises(InvalidProgram, match="cast from float32 of a bfloat16"):
        error_budget(_request(wrong, "bfloat16", np.array([1.0, 2.0])))


def test_each_node_gets_the_context_of_its_dtype_with_accumulation_in_the_request_dtype() -> None:
    """Only nodes in the request's own dtype accumulate in its declared ``accumulate``; a
    float32 node of a bfloat16 program sums in float32, a program without casts has the one
    context it always had."""
    program = Program((Input("x", (2, 2)),),
                      (cast("h", "x", "bfloat16", "float32"), Node("s", "linear", ("h", "h")),
                       cast("c", "s", "float32", "bfloat16"), Node("y", "linear", ("c", "c"))),
                      "y")
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    request = Request(program, {"x": x}, "bfloat16", x, accumulate="float32")
    ctx = contexts(request, "bfloat16")
    assert ctx["x"] == ctx["c"] == ctx["y"] == Ctx.of("bfloat16", "float32")
    assert ctx["h"] == ctx["s"] == Ctx.of("float32")
    plain = Program((Input("x", (2, 2)),), (Node("y", "linear", ("x", "x")),), "y")
    one = contexts(Request(plain, {"x": x}, "bfloat16", x, accumulate="float32"), "bfloat16")
    assert set(one.values()) == {Ctx(dtype="bfloat16", u=2.0**-8, tiny=2.0**-133,
                                     accumulate="float32")}
    assert set(contexts(Request(plain, {"x": x}, "float32", x), "float16").values()) == {
        Ctx(dtype="float16", u=2.0**-11, tiny=2.0**-24)}


def test_a_bfloat16_program_through_float32_is_judged_within_its_budget() -> None:
    """The exact value of casts is the identity: the enclosure and the exact path agree."""
    program = Program((Input("x", (2, 3)),),
                      (cast("h", "x", "bfloat16", "float32"), Node("t", "tanh", ("h",)),
                       cast("y", "t", "float32", "bfloat16")), "y")
    x = rounded_to(np.array([[0.3, -1.2, 2.5], [0.01, 4.0, -0.7]]), "bfloat16")
    request = _request(program, "bfloat16", x.astype(np.float64))
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    t = torch.from_numpy(x).to(torch.bfloat16).requires_grad_(True)
    out = torch.tanh(t.float()).to(torch.bfloat16)
    out.backward(torch.from_numpy(request.cotangent.astype(np.float32)).to(torch.bfloat16))
    assert t.grad is not None
    actual, grad = out.detach().float().numpy(), t.grad.float().numpy()
    verdict = verify(request, actual, {"x": grad})
    assert not verdict.misses and not verdict.exact_path, verdict.misses
    budget = error_budget(request, exact=exact)
    assert not budget.misses(exact, actual, {"x": grad})
