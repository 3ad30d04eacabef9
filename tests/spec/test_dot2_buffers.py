"""Dot2 written into reused buffers, its product-range test hoisted out of the loop where one
test decides it: bit for bit the Dot2 it replaced.

Why: Dot2 is the largest single cost of the float64 judgement of a Llama layer (one pass of
some 24 array operations per term); the rewrite does the same floating-point operations in
the same order on every element, 17 a term, and tests the two-product's range once where the
largest and smallest factors decide it. Compared here with the former code, kept verbatim,
on matrices drawn with zeros, subnormals, tiny and huge entries (where the range test falls
back to term by term) and ordinary ones.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec import ball
from resverify.spec.ball import _SAFE_HI, _SAFE_LO, _split, add_up, matmul_up, next_up


def _former(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``ball._dot2`` before (commit 306a587), verbatim."""
    k = a.shape[1]
    (ah, al), (bh, bl) = _split(a), _split(b)
    safe = ((np.abs(a) < _SAFE_HI).all(axis=1)[:, None]
            & (np.abs(b) < _SAFE_HI).all(axis=0)[None, :])
    with np.errstate(over="ignore", invalid="ignore"):
        p = s = np.zeros((a.shape[0], b.shape[1]))
        for i in range(k):
            x, xl, y, yl = ah[:, i:i + 1], al[:, i:i + 1], bh[i:i + 1], bl[i:i + 1]
            h = a[:, i:i + 1] * b[i:i + 1]
            size = np.abs(h)
            zero = (a[:, i:i + 1] == 0) | (b[i:i + 1] == 0)
            safe &= zero | ((size > _SAFE_LO) & (size < _SAFE_HI))
            r = xl * yl - (((h - x * y) - xl * y) - x * yl)
            total = p + h
            v = total - p
            q = (p - (total - v)) + (h - v)
            p, s = total, s + (q + r)
        res = p + s
    u = 2.0**-53
    gamma = k * u / (1 - k * u)
    err = add_up(u * np.abs(res), gamma * gamma * matmul_up(np.abs(a), np.abs(b)))
    return res, np.zeros_like(res), next_up(err * (1 + 4 * u)), safe & np.isfinite(res)


SCALES = [1.0, 1e-3, 1e3, 1e-160, 1e160, 1e-300, 1e300, 5e-324]


@st.composite
def _pair(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    m, k, n = draw(st.integers(1, 9)), draw(st.integers(1, 12)), draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from(SCALES))
    sparse = draw(st.floats(0.0, 0.9))
    out = []
    for shape in ((m, k), (k, n)):
        values = rng.normal(size=shape) * np.where(rng.random(shape) < 0.2, scale, 1.0)
        out.append(np.where(rng.random(shape) < sparse, 0.0, values))
    return out[0], out[1]


@settings(max_examples=300, deadline=None, database=None)
@given(_pair())
def test_dot2_is_bit_for_bit_the_former(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    new, old = ball._dot2(a, b), _former(a, b)
    for got, want in zip(new, old, strict=True):
        assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_dot2_on_layer_sized_matrices_is_bit_for_bit_the_former() -> None:
    rng = np.random.default_rng(3)
    for m, k, n in ((64, 64, 128), (64, 128, 64), (32, 16, 32)):
        a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n)) * 0.02
        for got, want in zip(ball._dot2(a, b), _former(a, b), strict=True):
            assert got.tobytes() == want.tobytes()
