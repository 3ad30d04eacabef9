"""layer_norm's VJP budget when its argument's error reaches the argument's own size, on rows
of width 64 with BERT's ``ε = 10⁻¹²``: whatever the argument's error, the computed
gradient's parts are at most ``A (G_i + mean G) + A³ mean(G C)(C_i + mean C)`` in size
(``A <= 1/sqrt(ε)`` and a little, ``C`` the computed centred values' bound) and the true one
at most the rule's magnitude, so the bound stays finite where the step-by-step analysis,
whose ``(1 + ρ)³`` passes the dtype's largest value, gives inf. Judged against torch's
``layer_norm`` (float64, float32, and bfloat16's fused float32 kernel) and autograd through
the float32 composition, on arguments and cotangents anywhere inside their bounds.

The cap reads no variance (it holds for Welford's as for the two-pass one), so where the
row's spread is far above ``sqrt(ε)`` it is about ``A² C²`` (1e12 here) above what a run
reaches (largest ratio 5e-14 at unit size): finite, not tight. Where the argument is below
``sqrt(ε)`` in size (3e-7 here) the cap is about its direct term ``A (G_i + mean G)`` and the
runs reach 0.013 to 0.015 of it (the true ``r`` is itself near ``1/sqrt(ε)`` there, so no
run can be far from it: the cap is not what keeps those ratios small)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.ops.layer_norm import LayerNorm
from resverify.spec.rational import obj
from resverify.spec.rounding import INF, Bound, Ctx, Parts
from tests.installed import skip_without_torch
from tests.spec.ops.cap_checks import spike, worst_ratio

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

N, EPS = 64, Fraction(1, 10**12)  # BertConfig's layer_norm_eps
OP = OP_TABLE["layer_norm"]
CTX = {"float64": Ctx.of("float64"), "float32": Ctx.of("float32"),
       "bfloat16": Ctx.of("bfloat16", "float32")}  # torch's CPU kernel: float32 inside


def _in(dtype: str, v: np.ndarray) -> np.ndarray:
    return torch.from_numpy(v).to(getattr(torch, dtype)).double().numpy()


def _rows(dtype: str, seed: int, scale: float = 1.0) -> np.ndarray:
    """Three rows of ``scale`` times a normal around 0.5, in ``dtype``, as float64."""
    rng = np.random.default_rng(seed)
    return _in(dtype, scale * (rng.standard_normal((3, N)) + 0.5))


def _site(x: np.ndarray) -> Site:
    exact = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    return Site(EPS, [exact], [Fraction(0)], np.zeros(x.shape, dtype=object), Fraction(0))


def _budget(dtype: str, x: np.ndarray, err: np.ndarray, g: np.ndarray, g_err: np.ndarray
            ) -> Bound:
    c, site = CTX[dtype], _site(x)
    x_b = Bound(np.abs(x), err)
    with np.errstate(invalid="ignore", over="ignore"):  # as error_budget runs the rules
        y = OP.budget(c, site, [x_b])
        return OP.budget_vjp(c, site, [x_b], y, Bound(np.abs(g), g_err))[0]


def _true(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The spec's exact VJP ``r (ḡ - mean(ḡ) - y mean(ḡ y))`` (``r`` within ``2**-199``)."""
    a = np.vectorize(Fraction, otypes=[object])(x.astype(object))
    cot = np.vectorize(Fraction, otypes=[object])(g.astype(object))
    return obj(OP.exact_vjp(cot, [a], OP.exact([a], EPS), EPS)[0])


def _torch(dtype: str, how: str, x_hat: np.ndarray, g_hat: np.ndarray) -> np.ndarray:
    """torch's gradient in ``dtype``: its ``layer_norm`` kernel, or autograd through the
    composition ``(x - mean) / sqrt(var + ε)``."""
    t = getattr(torch, dtype)
    x = torch.from_numpy(x_hat).to(t).requires_grad_(True)
    if how == "kernel":
        y = torch.nn.functional.layer_norm(x, (N,), eps=float(EPS))
    else:
        c = x - x.mean(-1, keepdim=True)
        y = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + float(EPS))
    y.backward(torch.from_numpy(g_hat).to(t))
    assert x.grad is not None
    return x.grad.double().numpy()


def _worst(dtype: str, how: str, x_hat: np.ndarray, g_hat: np.ndarray, true: np.ndarray,
           bound: np.ndarray) -> tuple[Fraction, tuple[int, int]]:
    """The largest ``|â - ā| / bound`` of torch's run on ``x_hat``, ``g_hat``, and where."""
    a_hat = _torch(dtype, how, x_hat, g_hat)
    assert np.isfinite(a_hat).all()
    return worst_ratio(a_hat, true, bound)


CASES = [("float64", "kernel"), ("float32", "kernel"), ("float32", "composition"),
         ("bfloat16", "kernel")]


def _check(dtype: str, how: str, scale: float) -> float:
    """The largest ratio over draws inside the bounds at ``|e| = |x| + scale``; each <= 1."""
    x, g = _rows(dtype, 0, scale), _rows(dtype, 2)
    err = np.abs(x) + scale  # every argument may be anywhere within scale of 0 or of -x
    g_err = np.abs(g) * 2.0**-20 + 2.0**-30
    found = _budget(dtype, x, err, g, g_err)
    assert isinstance(found, Parts)
    assert np.isfinite(found.err).all() and np.isfinite(found.size).all(), (
        f"layer_norm budget_vjp.err max={float(found.err.max())!r}, size max="
        f"{float(found.size.max())!r}, but both should be finite [layer_norm(x, eps={EPS}), "
        f"{dtype}, |e| = |x| + {scale}]")
    true = _true(x, g)
    rng = np.random.default_rng(3)
    draws = [(_in(dtype, x + err * rng.uniform(-1, 1, x.shape)),
              _in(dtype, g + g_err * rng.uniform(-1, 1, g.shape))) for _ in range(4)]
    draws += [(spike(x, s * scale), _in(dtype, g + g_err)) for s in (0.0, 1e-3, 1.0)]
    tops = []
    for x_hat, g_hat in draws:
        used, where = _worst(dtype, how, x_hat, g_hat, true, found.err)
        tops.append(float(used))
        assert used <= 1, (
            f"torch {dtype} layer_norm VJP ({how}){list(where)}: |error| / bound = "
            f"{float(used):.6g}, but should be at most 1 [layer_norm(x, eps={EPS}), "
            f"|e| = |x| + {scale}]")
    return max(tops)


@pytest.mark.parametrize(("dtype", "how"), CASES)
def test_layer_norm_vjp_bound_holds_where_the_argument_error_reaches_its_size(
        dtype: str, how: str) -> None:
    """Rows of unit size (the cap is about 1e12 above what a run reaches: finite), and rows
    of size 3e-7, below sqrt(ε), where the cap is near its direct term."""
    _check(dtype, how, 1.0)
    top = _check(dtype, how, 3e-7)
    assert top > 0.01, (
        f"the largest |error| / bound = {top:.3g}, but should be above 0.01: the bound is "
        f"within a factor 100 of what a {dtype} run ({how}) reaches for rows below sqrt(ε)")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_vjp_steps_alone_are_infinite_where_the_cap_is_finite(
        dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule before the cap (the cap's own bound taken as inf): at ``|e| = |x| + 1`` the
    steps' ``(1 + ρ)³`` passes the dtype's largest value (inf), where the cap is below
    1e21 (about ``A³ C² G``, ``A`` about 1e6)."""
    x, g = _rows(dtype, 0), _rows(dtype, 2)
    err, g_err = np.abs(x) + 1.0, np.abs(g) * 2.0**-20
    capped = _budget(dtype, x, err, g, g_err)
    monkeypatch.setattr(LayerNorm, "_centred_vjp_cap",
                        lambda self, c, s, at, n, x, g, big_r: np.full_like(g.hat, INF))
    steps = _budget(dtype, x, err, g, g_err)
    assert float(capped.err.max()) < 1e21, (
        f"the capped budget_vjp.err max={float(capped.err.max())!r}, but should be below "
        f"1e21 [layer_norm(x, eps={EPS}), {dtype}, |e| = |x| + 1]")
    assert np.isinf(steps.err).all(), (
        f"the steps' budget_vjp.err min={float(steps.err.min())!r}, but should be inf "
        f"[layer_norm(x, eps={EPS}), {dtype}, |e| = |x| + 1]")


def test_layer_norm_vjp_cap_is_not_taken_where_the_argument_may_be_infinite() -> None:
    """An argument whose error is inf (it may be inf or NaN): the gradient may be NaN, and
    the cap, which reads the argument's size, does not stand in for the steps' inf."""
    x, g = _rows("float32", 0), _rows("float32", 2)
    found = _budget("float32", x, np.full_like(x, INF), g, np.zeros_like(g))
    assert np.isinf(found.err).all(), (
        f"layer_norm budget_vjp.err min={float(found.err.min())!r}, but should be inf "
        f"[layer_norm(x, eps={EPS}), float32, |e| = inf]")
