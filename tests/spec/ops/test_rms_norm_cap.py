"""rms_norm's budget when its argument's error reaches the argument's own size, on a row as
wide as a Llama's hidden 256: the normalised output is at most ``sqrt(n)`` in size, computed
or true, so the bound stays near ``2 sqrt(n)`` where the step-by-step analysis gives about
``e / sqrt(ε)`` (above 1,000 here). Judged against torch's float32 run of Llama's RMSNorm
composition, ``x * rsqrt(mean(x²) + ε)``, on arguments anywhere inside their bounds."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np

from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.rational import of_mpf
from resverify.spec.rounding import Bound, Ctx
from tests.installed import skip_without_torch
from tests.spec.ops.cap_checks import worst_ratio

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

N, EPS = 256, Fraction(1, 10**6)  # LlamaConfig's rms_norm_eps


def _rows() -> np.ndarray:
    """Three float32 rows of a unit normal, as float64."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, N)).astype(np.float32).astype(np.float64)


def _budget(x: np.ndarray, err: np.ndarray) -> np.ndarray:
    exact = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    site = Site(EPS, [exact], [Fraction(0)], np.zeros(x.shape, dtype=object), Fraction(0))
    bound = OP_TABLE["rms_norm"].budget(Ctx.of("float32"), site, [Bound(np.abs(x), err)])
    return bound.err


def _true(x: np.ndarray) -> list[list[Fraction]]:
    """``x / sqrt(mean(x²) + ε)`` at 200 bits, as Fractions (within ``2**-190``)."""
    out = []
    with mpmath.workprec(200):
        for row in x.tolist():
            w = sum((Fraction(v) ** 2 for v in row), Fraction(0)) / len(row) + EPS
            r = of_mpf(1 / mpmath.sqrt(mpmath.mpf(w.numerator) / w.denominator))
            out.append([Fraction(v) * r for v in row])
    return out


def _torch(x_hat: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(x_hat).to(torch.float32)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + float(EPS))
    return y.double().numpy()


def _worst(x_hat: np.ndarray, true: list[list[Fraction]], bound: np.ndarray
           ) -> tuple[Fraction, tuple[int, int]]:
    """The largest ``|ŷ - y| / bound`` of torch's float32 run on ``x_hat``, and where."""
    return worst_ratio(_torch(x_hat), true, bound, Fraction(1, 2**180))


def test_rms_norm_bound_holds_where_the_argument_error_reaches_its_size() -> None:
    x = _rows()
    err = np.abs(x) + 1.0  # every argument may be anywhere within 1 of 0 or of -x
    bound = _budget(x, err)
    cap = 2 * math.sqrt(N) * (1 + 2.0**-10)
    assert np.all(bound <= cap), (
        f"rms_norm budget.err max={float(bound.max())!r}, but should be at most "
        f"{cap!r} = 2 sqrt({N}) and a little [rms_norm(x, eps={EPS}), float32, |e| = |x| + 1]")
    true = _true(x)
    rng = np.random.default_rng(1)
    draws = [x + err * rng.uniform(-1, 1, x.shape) for _ in range(8)]
    # one spike per row against its largest value's sign, the rest of the row at 0:
    # torch's output there is about -sign(y) sqrt(n), the true y its own size
    spike = np.zeros_like(x)
    top = np.argmax(np.abs(x), axis=-1)
    for i, j in enumerate(top):
        spike[i, j] = -np.sign(x[i, j])
    for x_hat in [*draws, spike]:
        used, where = _worst(x_hat, true, bound)
        assert used <= 1, (
            f"torch float32 rms_norm{list(where)}: |error| / bound = {float(used):.6g}, "
            f"but should be at most 1 [rms_norm(x, eps={EPS}), float32, |e| = |x| + 1]")
    used, where = _worst(spike, true, bound)
    assert used > Fraction(9, 10), (
        f"the spike's |error| / bound = {float(used):.3g} at {list(where)}, but should be "
        f"above 0.9: the bound is near what a float32 run can reach there")


def test_rms_norm_claims_no_cap_where_gamma_of_its_row_is_infinite() -> None:
    """bfloat16 rows of 300 (``300 u >= 1``): the steps' bound is infinite and the cap,
    whose derivation needs ``gamma_{n+2} < 1``, does not stand in for it."""
    x = np.linspace(-2, 2, 600).reshape(2, 300)
    exact = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    site = Site(EPS, [exact], [Fraction(0)], np.zeros(x.shape, dtype=object), Fraction(0))
    with np.errstate(invalid="ignore", over="ignore"):  # as error_budget runs the rules
        err = OP_TABLE["rms_norm"].budget(Ctx.of("bfloat16"), site,
                                          [Bound(np.abs(x), np.zeros_like(x))]).err
    assert np.isinf(err).all(), (
        f"rms_norm budget.err max={float(err.max())!r}, but should be inf [rms_norm(x, "
        f"eps={EPS}), bfloat16, a row of 300]")
