"""softmax's budget under a declared float32 accumulation: exp, sum and division in float32,
one rounding to bfloat16 (torch's CPU softmax kernel, the ``_softmax`` of an attention
layer that keeps bfloat16).

The laws: the declared behaviour is inside the budget, plain and masked; the budget is
never above the one for every step in bfloat16; and a softmax whose exponentials are
rounded to bfloat16 and summed in it (the declaration violated) is outside it where the
bfloat16 rule still allows it.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec.budget import error_budget
from resverify.spec.enclosure import verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request
from resverify.spec.rounding import TINY
from tests.spec.test_accumulate import bf16


def request(x: np.ndarray, accumulate: str | None) -> Request:
    program = Program((Input("x", x.shape),),
                      (Node("y", "softmax", ("x",), params={"axis": 1}),), "y")
    return Request(program, {"x": x}, "bfloat16", np.zeros(x.shape, np.float32),
                   accumulate=accumulate)


def masked(x: np.ndarray, mask: np.ndarray, accumulate: str | None) -> Request:
    program = Program((Input("x", x.shape), Input("m", mask.shape)),
                      (Node("y", "masked_softmax", ("x", "m"), params={"axis": 1}),), "y")
    return Request(program, {"x": x, "m": mask}, "bfloat16", np.zeros(x.shape, np.float32),
                   accumulate=accumulate)


def scores(seed: int, width: int, spread: float) -> np.ndarray:
    return bf16(np.random.default_rng(seed).standard_normal((4, width)) * spread)


def fused(x: np.ndarray) -> np.ndarray:
    """torch's kernel: ``exp(x - max)``, their sum and the quotient in float32, one rounding."""
    e = np.exp(x.astype(np.float32) - x.astype(np.float32).max(axis=1, keepdims=True))
    return bf16(e / e.sum(axis=1, keepdims=True, dtype=np.float32))


def narrow(x: np.ndarray) -> np.ndarray:
    """The declaration violated: each exponential rounded to bfloat16, summed in bfloat16
    one addition at a time, the quotient rounded (tests/blocks/planted_kernels.py's bug)."""
    e = bf16(np.exp(x.astype(np.float32) - x.astype(np.float32).max(axis=1, keepdims=True)))
    total = e[:, :1]
    for k in range(1, e.shape[1]):
        total = bf16(total + e[:, k:k + 1])
    return bf16(e / total)


def _call(seed: int, width: int, spread: float, how: str) -> str:
    return f"[softmax bfloat16 width {width}, seed {seed}, spread {spread}, {how}]"


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([1, 4, 16, 64]),
       spread=st.sampled_from([0.1, 1.0, 8.0, 100.0]))
def test_the_fused_float32_softmax_is_within_the_declared_budget(
        seed: int, width: int, spread: float) -> None:
    x = scores(seed, width, spread)
    verdict = verify(request(x, "float32"), fused(x), {"x": np.zeros_like(x)})
    assert not verdict.misses, (f"{verdict.misses[:3]}, but should be none "
                                f"{_call(seed, width, spread, 'fused float32 kernel')}")


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([4, 16]))
def test_a_causal_masked_softmax_is_within_the_declared_budget(seed: int, width: int) -> None:
    x = scores(seed, width, 1.0)
    mask = np.tril(np.ones((4, width), np.float32), k=width - 4)
    kept = np.where(mask != 0, x, -np.inf)
    verdict = verify(masked(x, mask, "float32"), fused(kept), {"x": np.zeros_like(x),
                                                               "m": np.zeros_like(mask)})
    assert not verdict.misses, (f"{verdict.misses[:3]}, but should be none "
                                f"{_call(seed, width, 1.0, 'causal mask, fused kernel')}")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([1, 4, 16, 64]),
       spread=st.sampled_from([1e-3, 1.0, 8.0, 100.0]))
def test_the_float32_softmax_budget_is_never_above_the_bfloat16_one(
        seed: int, width: int, spread: float) -> None:
    """Up to one smallest bfloat16 subnormal: the one rounding to bfloat16 of a value below
    its smallest normal may add it where both bounds are the flushed exps' ``(n+2) 2⁻¹²⁵``
    (an element ``e⁻¹⁰⁰`` below its row's max)."""
    x = scores(seed, width, spread)
    exact = evaluate(request(x, None))
    new = error_budget(request(x, "float32"), exact=exact).output
    old = error_budget(request(x, None), exact=exact).output
    above = np.argwhere(~(new <= old + float(TINY["bfloat16"])))
    assert not above.size, (f"output{list(above[0])}: bound {new[tuple(above[0])]!r}, but "
                            f"should be at most {old[tuple(above[0])]!r} "
                            f"{_call(seed, width, spread, 'float32 declared')}")


def test_bfloat16_sums_are_caught_where_the_bfloat16_rule_allowed_them() -> None:
    """Rows of 16 scores of spread 1: exponentials rounded to bfloat16 and summed one
    addition at a time in it miss by several ``u |y|``, inside the bfloat16 rule (``8u``
    for the exp alone) and outside the declared one (one rounding)."""
    caught = []
    for seed in range(8):
        x = scores(seed, 16, 1.0)
        missed = verify(request(x, None), narrow(x), {"x": np.zeros_like(x)}).misses
        assert not missed, f"{missed[:3]}, but should be none {_call(seed, 16, 1.0, 'narrow')}"
        caught.append(bool(verify(request(x, "float32"), narrow(x),
                                  {"x": np.zeros_like(x)}).misses))
    assert all(caught), (f"caught on {caught}, but should be caught on every seed "
                         f"{_call(0, 16, 1.0, 'bfloat16 sums, float32 declared')}")
