"""softmax's budget when its scores' error bounds pass 709, where ``e^D`` overflows float64:
both the computed and the true value lie in [0, 1] (the computed shifted score ``fl(x̂ -
max x̂)`` is never positive), so the bound stays near 1 where it was infinite. Judged against
torch's float32 softmax on scores anywhere inside their bounds, as a Llama at hidden 256 meets
them once its stream's bound has passed its size."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.ops.attributes import Params
from resverify.spec.rational import of_mpf
from resverify.spec.rounding import Bound, Ctx
from tests.installed import skip_without_torch

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

N, ERR = 128, 1000.0
AXIS = Params({"axis": 1})


def _scores() -> np.ndarray:
    """Three float32 rows of scores of a few units, as float64."""
    rng = np.random.default_rng(2)
    return (rng.standard_normal((3, N)) * 3).astype(np.float32).astype(np.float64)


def _fractions(x: np.ndarray) -> np.ndarray:
    return np.vectorize(Fraction, otypes=[object])(x.astype(object))


def _true(x: np.ndarray) -> list[list[Fraction]]:
    """softmax of the exact scores at 200 bits (within ``2**-190``), as Fractions."""
    out = []
    with mpmath.workprec(200):
        for row in x.tolist():
            e = [mpmath.exp(mpmath.mpf(v) - max(row)) for v in row]
            total = mpmath.fsum(e)
            out.append([of_mpf(v / total) for v in e])
    return out


def _budget(x: np.ndarray) -> np.ndarray:
    y = _true(x)
    out = np.array(y, dtype=object)
    site = Site(AXIS, [_fractions(x)], [Fraction(0)], out, Fraction(1, 2**200))
    err = np.full(x.shape, ERR)
    return OP_TABLE["softmax"].budget(Ctx.of("float32"), site, [Bound(np.abs(x), err)]).err


def test_softmax_bound_stays_near_one_where_score_errors_pass_exps_range() -> None:
    x = _scores()
    bound = _budget(x)
    assert np.all(bound <= 2.001), (
        f"softmax budget.err max={float(bound.max())!r}, but should be at most 2.001 (both "
        f"values in [0, 1]) [softmax(x, axis=1), float32, |e| = {ERR}]")
    true = _true(x)
    rng = np.random.default_rng(3)
    # scores moved anywhere within their bounds, and each row's smallest score made its max
    draws = [x + ERR * rng.uniform(-1, 1, x.shape) for _ in range(4)]
    flipped = x.copy()
    low = np.argmin(x, axis=-1)
    for i, j in enumerate(low):
        flipped[i, j] += ERR
    worst = Fraction(0)
    for x_hat in [*draws, flipped]:
        y_hat = torch.softmax(torch.from_numpy(x_hat).to(torch.float32), dim=1).double()
        for i, j in np.ndindex(*x.shape):
            miss = abs(Fraction(float(y_hat[i, j])) - true[i][j]) + Fraction(1, 2**180)
            used = miss / Fraction(float(bound[i, j]))
            assert used <= 1, (
                f"torch float32 softmax[{i}, {j}]={float(y_hat[i, j])!r}, but should be "
                f"{float(true[i][j])!r} ± {float(bound[i, j]):.3g} [softmax(x, axis=1), "
                f"float32, |e| = {ERR}]")
            worst = max(worst, used)
    assert worst > Fraction(4, 10), (
        f"the largest |error| / bound = {float(worst):.3g}, but should be above 0.4: a score "
        f"moved to its row's max takes nearly all of the row")
