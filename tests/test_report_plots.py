"""The report's plots: their data come out of the reference backend and match the exact
laws they illustrate, and the PNG bytes depend only on the seed."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from resverify.reports import plots
from resverify.spec.fixtures import STACK_W


def test_s11_retention_is_exactly_three_quarters_and_a_quarter_to_the_depth() -> None:
    weights = [np.array(STACK_W)] * 8
    for residual, factor in ((True, Fraction(3, 4)), (False, Fraction(1, 4))):
        curve = plots.retention_curve(weights, residual)
        expected = [factor**depth for depth in range(9)]
        assert [Fraction(v) for v in curve] == expected, (residual, curve.tolist(), expected)


def test_unscaled_variance_grows_like_depth_and_scaled_stays_near_one() -> None:
    path = plots.variance_path(seed=0, width=768, depth=100)
    low, high = plots._chi2_band(767)
    layers = np.arange(101)
    assert path[0] == 0.0
    inside = (path[1:] >= layers[1:] * low) & (path[1:] <= layers[1:] * high)
    assert inside.mean() > 0.9, f"only {inside.mean():.0%} of layers inside the 99.9% band"
    finals = plots.scaled_finals(seed=0, width=768, max_depth=100)
    # mean of 100 independent sample variances: sd sqrt(2/767)/10 ~ 0.0051; 6 sd allowed
    assert abs(finals.mean() - 1.0) < 6 * np.sqrt(2 / 767) / 10, finals.mean()


def test_chi2_band_matches_the_exact_quantiles() -> None:
    import mpmath

    dof = 767
    low, high = plots._chi2_band(dof)
    for probability, approx in ((0.0005, low * dof), (0.9995, high * dof)):
        exact = mpmath.findroot(
            lambda x, p=probability: mpmath.gammainc(dof / 2, 0, x / 2, regularized=True) - p,
            dof)
        # Wilson–Hilferty is accurate to about 1e-4 relative at this many degrees of freedom
        assert abs(approx - float(exact)) < 1e-4 * float(exact), (probability, approx, exact)


def test_plots_are_the_same_bytes_for_the_same_seed_and_carry_no_software_stamp() -> None:
    first, second = plots.render_plots(5), plots.render_plots(5)
    assert list(first) == list(plots.PLOT_NAMES)
    assert first == second
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in first.values())
    assert all(b"Software" not in png and b"matplotlib" not in png for png in first.values())
    assert plots._png(plots.variance_growth(6)) != first["variance_growth"]
