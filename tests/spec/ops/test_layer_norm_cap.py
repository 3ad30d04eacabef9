"""layer_norm's forward budget when its argument's error reaches the argument's own size, on
rows of width 64 with BERT's ``ε = 10⁻¹²``: whatever the argument's error and whatever
algorithm computes the variance, the computed output is at most ``(1 + u)(1 + u_s)² (X_i +
M) A`` (``A <= 1/sqrt(ε̂)`` and a little) and the true one ``sqrt(n)``, so the bound stays
finite where the steps, ``E_c R`` with ``R`` about ``(E_w / ε) r``, pass the largest value.
Judged against torch's ``layer_norm`` (float64, float32, bfloat16's fused float32 kernel)
and the float32 composition, on arguments anywhere inside their bounds.

The cap reads no variance: at unit size it is about ``1/sqrt(ε)`` times the argument (1e6
here) above what a run reaches (largest ratio 1.2e-6 at unit size); for rows below
``sqrt(ε)`` (3e-7) the runs reach 0.31 of the bound."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.ops.layer_norm import LayerNorm
from resverify.spec.rounding import INF, Bound
from tests.installed import skip_without_torch
from tests.spec.ops.cap_checks import spike, worst_ratio
from tests.spec.ops.test_layer_norm_vjp_cap import CASES, CTX, EPS, OP, N, _in, _rows, _site

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch


def _budget(dtype: str, x: np.ndarray, err: np.ndarray) -> Bound:
    with np.errstate(invalid="ignore", over="ignore"):  # as error_budget runs the rules
        return OP.budget(CTX[dtype], _site(x), [Bound(np.abs(x), err)])


def _torch(dtype: str, how: str, x_hat: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(x_hat).to(getattr(torch, dtype))
    if how == "kernel":
        y = torch.nn.functional.layer_norm(x, (N,), eps=float(EPS))
    else:
        c = x - x.mean(-1, keepdim=True)
        y = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + float(EPS))
    return y.double().numpy()


def _check(dtype: str, how: str, scale: float) -> float:
    """The largest ``|ŷ - y| / bound`` over draws inside ``|e| = |x| + scale``; each <= 1."""
    x = _rows(dtype, 0, scale)
    err = np.abs(x) + scale
    bound = _budget(dtype, x, err).err
    assert np.isfinite(bound).all(), (
        f"layer_norm budget.err max={float(bound.max())!r}, but should be finite "
        f"[layer_norm(x, eps={EPS}), {dtype}, |e| = |x| + {scale}]")
    a = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    true = OP.exact([a], EPS)
    rng = np.random.default_rng(1)
    draws = [_in(dtype, x + err * rng.uniform(-1, 1, x.shape)) for _ in range(4)]
    draws += [spike(x, s * scale) for s in (0.0, 1e-3, 1.0)]
    top = Fraction(0)
    for x_hat in draws:
        ratio, (i, j) = worst_ratio(_torch(dtype, how, x_hat), true, bound)
        assert ratio <= 1, (
            f"torch {dtype} layer_norm ({how})[{i}, {j}]: |error| / bound = "
            f"{float(ratio):.6g}, but should be at most 1 [layer_norm(x, eps={EPS}), "
            f"|e| = |x| + {scale}]")
        top = max(top, ratio)
    return float(top)


@pytest.mark.parametrize(("dtype", "how"), CASES)
def test_layer_norm_bound_holds_where_the_argument_error_reaches_its_size(
        dtype: str, how: str) -> None:
    _check(dtype, how, 1.0)
    top = _check(dtype, how, 3e-7)
    assert top > 0.1, (
        f"the largest |error| / bound = {top:.3g}, but should be above 0.1 for rows below "
        f"sqrt(ε) [torch {dtype} layer_norm ({how})]")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_steps_alone_are_infinite_where_the_cap_is_finite(
        dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At ``|e| = 10¹² (|x| + 1)`` the steps' ``E_c R`` passes the dtype's largest value;
    the cap is about ``(X + M)/sqrt(ε)``, below 1e20."""
    x = _rows(dtype, 0)
    err = 1e12 * (np.abs(x) + 1.0)
    capped = _budget(dtype, x, err).err
    monkeypatch.setattr(LayerNorm, "_centred_cap",
                        lambda self, c, s, at, x, big_r, y_top: np.full_like(y_top, INF))
    steps = _budget(dtype, x, err).err
    assert float(capped.max()) < 1e20, (
        f"the capped budget.err max={float(capped.max())!r}, but should be below 1e20 "
        f"[layer_norm(x, eps={EPS}), {dtype}, |e| = 1e12 (|x| + 1)]")
    assert np.isinf(steps).all(), (
        f"the steps' budget.err min={float(steps.min())!r}, but should be inf "
        f"[layer_norm(x, eps={EPS}), {dtype}, |e| = 1e12 (|x| + 1)]")
