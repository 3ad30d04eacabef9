"""rms_norm's VJP budget when its argument's error reaches the argument's own size, on rows
as wide as a Llama's hidden 256: whatever the argument's error, the computed gradient's
parts are at most ``R_top (|ĝ_i| + K² ‖ĝ‖)`` in size (``R_top <= 1/sqrt(ε)`` and a little)
and the true one at most ``r (|ḡ_i| + |y_i| mean|ḡ y|)``, so the bound stays finite where
the step-by-step analysis, whose ``(1 + ρ)³`` reaches about 1e36, gives inf. Judged against
torch's float32 and float64 autograd through Llama's RMSNorm composition, ``x *
rsqrt(x.pow(2).mean(-1) + ε)``, on arguments and cotangents anywhere inside their bounds."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.ops.layer_norm import LayerNorm
from resverify.spec.rational import of_mpf
from resverify.spec.rounding import INF, Bound, Ctx, Parts
from tests.installed import skip_without_torch
from tests.spec.ops.cap_checks import spike, worst_ratio

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

N, EPS = 256, Fraction(1, 10**6)  # LlamaConfig's rms_norm_eps
OP = OP_TABLE["rms_norm"]


def _rows(dtype: str, seed: int) -> np.ndarray:
    """Three rows of a unit normal in ``dtype``, as float64."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, N)).astype(dtype).astype(np.float64)


def _site(x: np.ndarray) -> Site:
    exact = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    return Site(EPS, [exact], [Fraction(0)], np.zeros(x.shape, dtype=object), Fraction(0))


def _budget(dtype: str, x: np.ndarray, err: np.ndarray, g: np.ndarray, g_err: np.ndarray
            ) -> Bound:
    c, site = Ctx.of(dtype), _site(x)
    x_b = Bound(np.abs(x), err)
    with np.errstate(invalid="ignore", over="ignore"):  # as error_budget runs the rules
        y = OP.budget(c, site, [x_b])
        return OP.budget_vjp(c, site, [x_b], y, Bound(np.abs(g), g_err))[0]


def _true(x: np.ndarray, g: np.ndarray) -> list[list[Fraction]]:
    """``r (ḡ - y mean(ḡ y))`` with ``r = 1/sqrt(mean(x²) + ε)`` at 200 bits (within
    ``2**-180`` of the exact value for these rows)."""
    out = []
    with mpmath.workprec(200):
        for row, cot in zip(x.tolist(), g.tolist(), strict=True):
            w = sum((Fraction(v) ** 2 for v in row), Fraction(0)) / len(row) + EPS
            r = of_mpf(1 / mpmath.sqrt(mpmath.mpf(w.numerator) / w.denominator))
            ys = [Fraction(v) * r for v in row]
            m = sum((Fraction(gi) * yi for gi, yi in zip(cot, ys, strict=True)),
                    Fraction(0)) / len(row)
            out.append([r * (Fraction(gi) - yi * m) for gi, yi in zip(cot, ys, strict=True)])
    return out


def _torch(dtype: str, x_hat: np.ndarray, g_hat: np.ndarray) -> np.ndarray:
    """autograd's gradient of Llama's RMSNorm composition in ``dtype``."""
    t = getattr(torch, dtype)
    x = torch.from_numpy(x_hat).to(t).requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + float(EPS))
    y.backward(torch.from_numpy(g_hat).to(t))
    assert x.grad is not None
    return x.grad.double().numpy()


def _worst(dtype: str, x_hat: np.ndarray, g_hat: np.ndarray, true: list[list[Fraction]],
           bound: np.ndarray) -> tuple[Fraction, tuple[int, int]]:
    """The largest ``|â - ā| / bound`` of torch's run on ``x_hat``, ``g_hat``, and where."""
    return worst_ratio(_torch(dtype, x_hat, g_hat), true, bound)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rms_norm_vjp_bound_holds_where_the_argument_error_reaches_its_size(dtype: str
                                                                           ) -> None:
    x, g = _rows(dtype, 0), _rows(dtype, 2)
    err = np.abs(x) + 1.0  # every argument may be anywhere within 1 of 0 or of -x
    g_err = np.abs(g) * 2.0**-20 + 2.0**-30
    found = _budget(dtype, x, err, g, g_err)
    assert isinstance(found, Parts)
    assert np.isfinite(found.err).all() and np.isfinite(found.size).all(), (
        f"rms_norm budget_vjp.err max={float(found.err.max())!r}, size max="
        f"{float(found.size.max())!r}, but both should be finite [rms_norm(x, eps={EPS}), "
        f"{dtype}, |e| = |x| + 1]")
    true = _true(x, g)
    rng = np.random.default_rng(3)
    draws = [(x + err * rng.uniform(-1, 1, x.shape), g + g_err * rng.uniform(-1, 1, g.shape))
             for _ in range(6)]
    draws += [(spike(x, s), g + g_err) for s in (0.0, 1e-6, 1e-3, 1.0)]
    tops = []
    for x_hat, g_hat in draws:
        used, where = _worst(dtype, x_hat, g_hat, true, found.err)
        tops.append(float(used))
        assert used <= 1, (
            f"torch {dtype} rms_norm VJP{list(where)}: |error| / bound = {float(used):.6g}, "
            f"but should be at most 1 [rms_norm(x, eps={EPS}), |e| = |x| + 1]")
    assert max(tops) > 0.05, (
        f"the largest |error| / bound = {max(tops):.3g}, but should be above 0.05: the "
        f"bound is within a factor 20 of what a {dtype} run reaches there")


def test_rms_norm_vjp_steps_alone_are_infinite_where_the_cap_is_finite(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule before the cap (the cap's own bound taken as inf): at ``|e| = |x| + 1``
    ``3 (e_r / r)(1 + ρ)³`` gives above 1e18, at a thousand times that it passes float32's
    largest value (inf), where the cap is a few 1e4 either way."""
    x, g = _rows("float32", 0), _rows("float32", 2)
    g_err = np.abs(g) * 2.0**-20
    wide = {k: (np.abs(x) + 1.0) * k for k in (1, 1000)}
    capped = {k: _budget("float32", x, e, g, g_err) for k, e in wide.items()}
    monkeypatch.setattr(LayerNorm, "_vjp_parts_cap",
                        lambda self, c, at, n, g, c_hat, big_r: np.full_like(c_hat, INF))
    steps = {k: _budget("float32", x, e, g, g_err) for k, e in wide.items()}
    for k in wide:
        assert float(capped[k].err.max()) < 1e5, (
            f"the capped budget_vjp.err max={float(capped[k].err.max())!r}, but should be "
            f"below 1e5 (about 1/sqrt(ε) (|ĝ| + ‖ĝ‖)) [rms_norm(x, eps={EPS}), float32, "
            f"|e| = {k} (|x| + 1)]")
    assert float(steps[1].err.min()) > 1e18, (
        f"the steps' budget_vjp.err min={float(steps[1].err.min())!r}, but should be above "
        f"1e18 [rms_norm(x, eps={EPS}), float32, |e| = |x| + 1]")
    assert np.isinf(steps[1000].err).all(), (
        f"the steps' budget_vjp.err min={float(steps[1000].err.min())!r}, but should be inf "
        f"[rms_norm(x, eps={EPS}), float32, |e| = 1000 (|x| + 1)]")


def test_rms_norm_vjp_cap_is_not_taken_where_the_argument_may_be_infinite() -> None:
    """An argument whose error is inf (it may be inf or NaN): the gradient may be NaN, and
    the cap, which reads only the cotangent, does not stand in for the steps' inf."""
    x, g = _rows("float32", 0), _rows("float32", 2)
    found = _budget("float32", x, np.full_like(x, INF), g, np.zeros_like(g))
    assert np.isinf(found.err).all(), (
        f"rms_norm budget_vjp.err min={float(found.err.min())!r}, but should be inf "
        f"[rms_norm(x, eps={EPS}), float32, |e| = inf]")
