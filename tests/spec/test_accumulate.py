"""A declared accumulation dtype: bfloat16 sums and dot products carried out in float32.

torch on CPU computes a bfloat16 matmul or reduction in float32 and rounds once at the end;
a request may declare it (``accumulate="float32"``), and the budget of ``linear``, ``sum``
and the un-broadcast of a gradient then charges float32's gamma and one bfloat16 rounding
instead of bfloat16's gamma. The tests here show the declaration is sound (a float32
accumulation with one rounding passes on drawn inputs), that it is what lets the budget see
a precision bug (the same op accumulating in bfloat16, one rounding per addition, fails
under it and passes without it), and that the codec carries it.

Tightness measured with these helpers (5 seeds, batch 8, a square ``linear`` with its two
gradients, ``|error| / bound`` over all elements, median / 99th percentile / max):

=====  =====================  ============================  ============================
width  accumulation           without the declaration       with ``accumulate="float32"``
=====  =====================  ============================  ============================
16     float32, one rounding  0.007 / 0.062 / 0.105         0.079 / 0.545 / 0.868
16     bfloat16 (the bug)     0.019 / 0.110 / 0.287 (pass)  0.225 / 1.182 / 2.369 (FAIL)
64     float32, one rounding  0.008 / 0.075 / 0.113         0.083 / 0.622 / 0.936
64     bfloat16 (the bug)     0.021 / 0.166 / 0.341 (pass)  0.239 / 1.511 / 3.726 (FAIL)
256    float32, one rounding  0.012 / 0.078 / 0.119         0.097 / 0.642 / 0.981
256    bfloat16 (the bug)     0.027 / 0.172 / 0.432 (pass)  0.243 / 1.443 / 3.590 (FAIL)
=====  =====================  ============================  ============================

``sum`` of N non-negative bfloat16 values (40 seeds, median / 99th / max): float32 with one
rounding 0.36 / 0.69 / 0.74 at N=64 and 0.33 / 0.57 / 0.58 at N=256 under the declaration;
bfloat16 accumulation 1.7 / 5.4 / 6.5 at N=64 (26 of 40 caught) and 6.5 / 17 / 17 at N=256
(40 of 40) under it, while without it bfloat16's ``gamma_{N-1}`` is 0.25 at N=64 (0.02 /
0.07 / 0.08) and infinite from N=256 (nothing is checked). A sum of values of both signs
cancels, and its bfloat16 accumulation is caught on 3 of 40 draws at N=64 only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec.budget import error_budget
from resverify.spec.codec import request_from_dict, request_to_dict
from resverify.spec.enclosure import Verdict, verify
from resverify.spec.errors import InvalidDocument, InvalidRequest
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request
from resverify.spec.rounding import TINY, UNIT_ROUNDOFF, Ctx, gamma, up

MatMul = Callable[[np.ndarray, np.ndarray], np.ndarray]


def bf16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bfloat16 (to nearest, ties to even), held in float32."""
    out = np.asarray(values, dtype=np.float32).copy()
    bits = out.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    bits &= np.uint32(0xFFFF0000)
    return out


def wide_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The declared behaviour: products and sums in float32, one rounding to bfloat16."""
    return bf16(a.astype(np.float32) @ b.astype(np.float32))


def narrow_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The precision bug: each partial sum rounded to bfloat16 (the products of bfloat16
    values are exact in float32)."""
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[1]):
        acc = bf16(acc + np.outer(a[:, k], b[k, :]).astype(np.float32))
    return acc


def linear_verdict(seed: int, width: int, matmul: MatMul, accumulate: str | None,
                   batch: int = 8) -> Verdict:
    """``linear(x, w)`` in bfloat16 and both its gradients, computed with ``matmul``."""
    rng = np.random.default_rng(seed)
    x = bf16(rng.standard_normal((batch, width)))
    w = bf16(rng.standard_normal((width, width)) / math.sqrt(width))
    g = bf16(rng.standard_normal((batch, width)))
    program = Program((Input("x", x.shape), Input("w", w.shape)),
                      (Node("y", "linear", ("x", "w")),), "y")
    request = Request(program, {"x": x, "w": w}, "bfloat16", g, accumulate=accumulate)
    grads = {"x": matmul(g, w.T), "w": matmul(x.T, g)}
    return verify(request, matmul(x, w), grads)


def wide_sum(x: np.ndarray) -> np.ndarray:
    return bf16(np.asarray(x.astype(np.float32).sum(), dtype=np.float32)).reshape(())


def narrow_sum(x: np.ndarray) -> np.ndarray:
    acc = np.zeros((), dtype=np.float32)
    for value in x.ravel():
        acc = bf16(acc + value)
    return acc.reshape(())


def sum_verdict(seed: int, n: int, total: Callable[[np.ndarray], np.ndarray],
                accumulate: str | None) -> Verdict:
    """``sum`` of n non-negative bfloat16 values (a sum of squares, of probabilities)."""
    x = bf16(np.abs(np.random.default_rng(seed).standard_normal(n)))
    program = Program((Input("x", x.shape),), (Node("y", "sum", ("x",)),), "y")
    request = Request(program, {"x": x}, "bfloat16", np.float32(1.0), accumulate=accumulate)
    return verify(request, total(x), {"x": np.ones_like(x)})


def _call(op: str, seed: int, width: int, how: str, accumulate: str | None) -> str:
    return f"[{op} bfloat16 width {width}, seed {seed}, {how}, accumulate={accumulate}]"


# ----------------------------------------------------------------------------------------
# the law: the declared accumulation passes, a narrower one fails under the declaration


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([16, 64, 128]))
def test_linear_accumulated_in_float32_and_rounded_once_is_within_the_declared_budget(
        seed: int, width: int) -> None:
    for accumulate in (None, "float32"):
        verdict = linear_verdict(seed, width, wide_matmul, accumulate)
        assert not verdict.misses, (f"{verdict.misses[:3]}, but should be none "
                                    f"{_call('linear', seed, width, 'float32 sum', accumulate)}")


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([64, 128]))
def test_linear_accumulated_in_bfloat16_fails_under_the_declaration_only(
        seed: int, width: int) -> None:
    caught = linear_verdict(seed, width, narrow_matmul, "float32")
    call = _call("linear", seed, width, "bf16 sum", "float32")
    assert caught.misses, f"no miss, but the bfloat16 accumulation should be caught {call}"
    missed = linear_verdict(seed, width, narrow_matmul, None)
    assert not missed.misses, (f"{missed.misses[:3]}, but bfloat16 accumulation is within "
                               f"bfloat16's gamma {_call('linear', seed, width, 'bf16 sum', None)}")


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([64, 256, 1024]))
def test_sum_accumulated_in_float32_and_rounded_once_is_within_the_declared_budget(
        seed: int, n: int) -> None:
    for accumulate in (None, "float32"):
        verdict = sum_verdict(seed, n, wide_sum, accumulate)
        assert not verdict.misses, (f"{verdict.misses}, but should be none "
                                    f"{_call('sum', seed, n, 'float32 sum', accumulate)}")


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([256, 1024]))
def test_sum_accumulated_in_bfloat16_fails_under_the_declaration_only(seed: int, n: int) -> None:
    caught = sum_verdict(seed, n, narrow_sum, "float32")
    assert caught.misses, ("no miss, but the bfloat16 accumulation should be caught "
                           f"{_call('sum', seed, n, 'bf16 sum', 'float32')}")
    missed = sum_verdict(seed, n, narrow_sum, None)
    assert not missed.misses, (f"{missed.misses}, but bfloat16's gamma_(N-1) allows it "
                               f"{_call('sum', seed, n, 'bf16 sum', None)}")


def test_declared_budget_is_below_the_undeclared_one_and_above_its_final_rounding() -> None:
    """The declaration tightens, never loosens, and keeps the last rounding: every bound is
    at most bfloat16's and at least half a bfloat16 ulp of the output's magnitude."""
    plain = linear_verdict(3, 64, wide_matmul, None).budget
    declared = linear_verdict(3, 64, wide_matmul, "float32").budget
    assert plain.magnitude is not None and declared.magnitude is not None
    assert np.all(declared.output < plain.output), (declared.output.max(), plain.output.min())
    u = float(UNIT_ROUNDOFF["bfloat16"])
    assert np.all(declared.output >= u * declared.magnitude), "the final rounding is charged"


# ----------------------------------------------------------------------------------------
# the rule and the request


def _ctx(dtype: str, accumulate: str | None = None) -> Ctx:
    return Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]), accumulate)


@pytest.mark.parametrize("n", [0, 1, 64, 300])
def test_summed_is_the_dtype_gamma_without_a_declaration(n: int) -> None:
    for c in (_ctx("bfloat16"), _ctx("bfloat16", "bfloat16")):
        assert c.summed(n) == (gamma(n, "bfloat16"), 0.0), (c.summed(n), c)


@pytest.mark.parametrize("n", [1, 64, 300])
def test_summed_is_the_accumulation_gamma_and_one_rounding(n: int) -> None:
    wide = Fraction(gamma(n, "float32"))
    expected = up(wide + UNIT_ROUNDOFF["bfloat16"] * (1 + wide))
    got = _ctx("bfloat16", "float32").summed(n)
    assert got == (expected, float(TINY["bfloat16"])), (got, expected, n)


def test_summed_charges_nothing_when_nothing_is_summed() -> None:
    assert _ctx("bfloat16", "float32").summed(0) == (0.0, 0.0)


def test_summed_is_infinite_past_the_accumulation_gamma_range() -> None:
    assert _ctx("bfloat16", "float32").summed(2**24) == (math.inf, float(TINY["bfloat16"]))


@pytest.mark.parametrize(("dtype", "accumulate"), [("bfloat16", "float16"),
                                                   ("float32", "bfloat16"),
                                                   ("float64", "float32"),
                                                   ("bfloat16", "float128")])
def test_a_narrower_or_unknown_accumulation_is_refused(dtype: str, accumulate: str) -> None:
    program = Program((Input("x", (2,)),), (Node("y", "sum", ("x",)),), "y")
    with pytest.raises(InvalidRequest, match=accumulate):
        Request(program, {"x": np.zeros(2)}, dtype, np.float64(1.0), accumulate=accumulate)


def test_codec_carries_the_declaration_and_omits_it_when_absent() -> None:
    program = Program((Input("x", (2,)),), (Node("y", "sum", ("x",)),), "y")
    plain = Request(program, {"x": np.ones(2, np.float32)}, "bfloat16", np.float32(1.0))
    assert "accumulate" not in request_to_dict(plain), request_to_dict(plain)
    assert request_from_dict(request_to_dict(plain)).accumulate is None
    declared = Request(program, {"x": np.ones(2, np.float32)}, "bfloat16", np.float32(1.0),
                       accumulate="float32")
    doc = request_to_dict(declared)
    assert doc["accumulate"] == "float32", doc
    assert request_from_dict(doc).accumulate == "float32"
    assert {k: v for k, v in doc.items() if k != "accumulate"} == request_to_dict(plain)


def test_the_exact_path_honours_the_declaration_as_the_fast_oracle_does() -> None:
    """:func:`error_budget` on the exact interpreter's trace: the float32-accumulated answer
    is inside, the bfloat16-accumulated one outside, and the verdicts are the fast
    oracle's."""
    rng = np.random.default_rng(5)
    x, w = bf16(rng.standard_normal((2, 64))), bf16(rng.standard_normal((64, 64)) / 8)
    g = bf16(rng.standard_normal((2, 64)))
    program = Program((Input("x", x.shape), Input("w", w.shape)),
                      (Node("y", "linear", ("x", "w")),), "y")
    request = Request(program, {"x": x, "w": w}, "bfloat16", g, accumulate="float32")
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    for matmul, fails in ((wide_matmul, False), (narrow_matmul, True)):
        out, grads = matmul(x, w), {"x": matmul(g, w.T), "w": matmul(x.T, g)}
        misses = budget.misses(exact, out, grads)
        fast = verify(request, out, grads).misses
        assert bool(misses) is fails, (misses[:3], matmul.__name__)
        assert {(m.where, m.index) for m in misses} == {(m.where, m.index) for m in fast}


def test_the_schema_refuses_an_accumulation_dtype_it_does_not_know() -> None:
    program = Program((Input("x", (2,)),), (Node("y", "sum", ("x",)),), "y")
    doc = request_to_dict(Request(program, {"x": np.ones(2)}, "float32", np.float32(1.0)))
    with pytest.raises(InvalidDocument, match="accumulate"):
        request_from_dict({**doc, "accumulate": "float128"})


@pytest.mark.parametrize("seed", range(6))
def test_the_last_rounding_is_charged_on_the_exact_sum_and_holds_where_rows_cancel(
        seed: int) -> None:
    """A declared linear charges its one rounding to bfloat16 on the accumulated value's size
    (``min((1 + γ') x̂@ŵ, |v| + P + A)``): never above the rule that charged it on ``|x|@|w|``,
    far below it where a row cancels (``w``'s last column makes ``x @ w`` nearly 0), and the
    float32-accumulated answer rounded once stays inside."""
    rng = np.random.default_rng(seed)
    x = bf16(rng.standard_normal((8, 32)))
    w = bf16(rng.standard_normal((32, 4)) / math.sqrt(32))
    w[:, 3] = bf16(np.concatenate([w[:16, 0], -w[:16, 0]]))  # columns that cancel
    x[:, 16:] = x[:, :16]
    g = bf16(rng.standard_normal((8, 4)))
    program = Program((Input("x", x.shape), Input("w", w.shape)),
                      (Node("y", "linear", ("x", "w")),), "y")
    request = Request(program, {"x": x, "w": w}, "bfloat16", g, accumulate="float32")
    budget = error_budget(request)
    u, wide = float(UNIT_ROUNDOFF["bfloat16"]), gamma(32, "float32")
    earlier = (wide + u * (1 + wide)) * (np.abs(x) @ np.abs(w))  # the old rule's rounding
    assert np.all(budget.output[:, 3] < 0.01 * earlier[:, 3]), (budget.output[:, 3], earlier)
    grads = {"x": wide_matmul(g, w.T), "w": wide_matmul(x.T, g)}
    verdict = verify(request, wide_matmul(x, w), grads)
    assert not verdict.misses, f"{verdict.misses[:3]}, but should be none [seed {seed}]"
    plain = Request(program, {"x": x, "w": w}, "bfloat16", g)
    assert np.all(budget.output <= error_budget(plain).output), "tighter than bfloat16's rule"
