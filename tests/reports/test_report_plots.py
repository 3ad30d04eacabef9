"""The report's plots: each shows one series per checked backend, computed by running that
backend on the plot's programs beside the exact or reference curve; a backend that
refuses or raises leaves a gap with its reason; the PNG bytes depend only on the seed and
the backends."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities
from resverify.reports import plots
from resverify.reports.json_report import validate
from resverify.spec.fixtures import STACK_W
from resverify.spec.request import Request, Result
from tests import mutants as catalog
from tests.mutants import foils as bb
from tests.report_mode_backends import Refusing
from tests.reports.fakes import run_check

ROOT = Path(__file__).resolve().parents[2]


class Raising(NumpyBackend):
    name = "_raising $x$"  # a leading underscore and mathtext must stay legend text

    def run(self, request: Request) -> Result:
        raise RuntimeError("adapter bug")


class Float32Only(NumpyBackend):
    name = "float32-only"
    capabilities = Capabilities(dtypes=("float32",), modes=("vjp", "jvp"))


@pytest.fixture(scope="module")
def checked() -> dict[str, plots.PlotData]:
    """numpy, a backend whose merge forgets the identity edge in its backward pass, and
    one that drops scale (so the 1/√L rescaling too)."""
    return plots.plot_data(3, [NumpyBackend(), catalog.DroppedIdentityGrad(), bb.IgnoresScale()])


def test_s11_retention_is_exactly_three_quarters_and_a_quarter_to_the_depth() -> None:
    weights = [np.array(STACK_W)] * 8
    for residual, factor in ((True, Fraction(3, 4)), (False, Fraction(1, 4))):
        curve = plots.retention_curve(weights, residual)
        expected = [factor**depth for depth in range(9)]
        assert [Fraction(v) for v in curve] == expected, (residual, curve.tolist(), expected)


def test_every_plot_has_one_series_per_backend_named_after_it(
        checked: dict[str, plots.PlotData]) -> None:
    names = ["numpy", catalog.DroppedIdentityGrad.name, bb.IgnoresScale.name]
    assert list(checked) == list(plots.PLOT_NAMES)
    for name, plot in checked.items():
        assert plot.series == names, (name, plot.series)
        assert all(list(c.by_backend) == names for c in plot.curves), name
        assert plot.gaps == {}, (name, plot.gaps)


def test_the_reference_backend_follows_every_exact_curve(
        checked: dict[str, plots.PlotData]) -> None:
    """numpy's series lie on the exact curves (float64 rounding apart) and on the reference
    simulation exactly; S11's powers of 3/4 and 1/4 and the depth law at a = -1/2, 1 are
    exact in binary."""
    for name, plot in checked.items():
        for curve in plot.curves:
            got = curve.by_backend["numpy"]
            shown = ~np.isnan(got)
            assert shown.any(), (name, curve.label)
            # float64 rounding over at most 30 layers; a bug moves a point by O(1)
            np.testing.assert_allclose(got[shown], curve.reference[shown], rtol=1e-12, atol=0,
                                       err_msg=f"{name}: {curve.label}")
    law = {c.label: c.by_backend["numpy"] for c in checked["depth_law"].curves}
    assert law["a = -0.5"].tolist() == [0.5**k for k in range(31)]
    assert law["a = 1.0"].tolist() == [2.0**k for k in range(31)]
    path = checked["variance_growth"].curves[0]
    every = plots.STREAM_CHUNK  # the backend's stream is sampled every few layers
    assert path.by_backend["numpy"][::every].tolist() == path.reference[::every].tolist()
    assert np.isnan(np.delete(path.by_backend["numpy"], np.s_[::every])).all()


def test_a_broken_backend_gets_its_own_different_series_and_different_pngs(
        checked: dict[str, plots.PlotData]) -> None:
    broken = catalog.DroppedIdentityGrad.name
    law = {c.label: c.by_backend[broken] for c in checked["depth_law"].curves}
    # x̄ = a^L instead of (1+a)^L: the identity edge is missing from each merge's backward
    assert law["a = -0.5"].tolist() == [(-0.5) ** k for k in range(31)], law["a = -0.5"]
    for name in ("gradient_retention", "norm_depth"):
        differs = [c.label for c in checked[name].curves if not np.array_equal(
            c.by_backend[broken], c.by_backend["numpy"], equal_nan=True)]
        assert differs, f"{name}: the broken backend's series equal numpy's"
    grow, flat = checked["variance_growth"].curves
    assert np.array_equal(grow.by_backend[bb.IgnoresScale.name], grow.by_backend["numpy"],
                          equal_nan=True), "no scale in the unscaled stream: the same values"
    # unscaled updates: the depth-64 stream's variance is about 64, not 1
    assert flat.by_backend[bb.IgnoresScale.name][63] > 32, flat.by_backend[bb.IgnoresScale.name]
    assert abs(flat.by_backend["numpy"][63] - 1) < 0.3, flat.by_backend["numpy"]
    alone = plots.render_plots(3, [NumpyBackend()])
    both = plots.render_plots(3, data=checked)
    assert all(alone[n] != both[n] for n in plots.PLOT_NAMES), "a PNG ignores the backends"


def test_a_refusing_or_raising_backend_leaves_gaps_with_the_reason_and_plots_still_draw() -> None:
    data = plots.plot_data(3, [Refusing(), Raising(), Float32Only()])
    for name, plot in data.items():
        assert plot.gaps["refusing"] == "unsupported: refusing: not today", (name, plot.gaps)
        assert plot.gaps[Raising.name] == "raised RuntimeError: adapter bug", plot.gaps
        assert "float32-only" not in plot.gaps, plot.gaps
        assert plot.dtypes == {"refusing": "float64", Raising.name: "float64",
                               "float32-only": "float32"}, plot.dtypes
        for curve in plot.curves:
            assert np.isnan(curve.by_backend["refusing"]).all(), (name, curve.label)
            assert np.isfinite(curve.by_backend["float32-only"]).any(), (name, curve.label)
    pngs = plots.render_plots(3, data=data)
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs.values())
    assert plots._legend_text(Raising.name, data["depth_law"]) == "\u200b_raising \\$x\\$ (gaps)"


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
    first = plots.render_plots(5)
    second = plots.render_plots(5)
    assert list(first) == list(plots.PLOT_NAMES)
    assert first == second
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in first.values())
    assert all(b"Software" not in png and b"matplotlib" not in png for png in first.values())
    assert not np.array_equal(plots.variance_path(6), plots.variance_path(5)), "seed unused"


def test_check_draws_each_checked_backend_and_reports_its_gaps(tmp_path: Path) -> None:
    """``resverify check`` plots the backends it checks: report.json names each plot's
    series, a backend that refuses is a warning and a caption note, never a lost report."""
    with pytest.MonkeyPatch.context() as mp:  # the plot processes import the tests package
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        code, out = run_check(mp, tmp_path, "--backend", "numpy",
                              "--backend", "tests.report_mode_backends:Refusing", mode="pass")
    doc = json.loads((out / "report.json").read_text())
    assert code == 0, doc["status"]
    validate(doc)
    reason = "unsupported: refusing: not today"
    expected = {"series": ["numpy", "refusing"],
                "dtypes": {"numpy": "float64", "refusing": "float64"}, "gaps": {"refusing": reason}}
    shown = {name: {k: part[k] for k in expected} for name, part in doc["plots"].items()}
    assert shown == dict.fromkeys(plots.PLOT_NAMES, expected), doc["plots"]
    warning = f"plots: refusing gave no data for part of {', '.join(plots.PLOT_NAMES)}: {reason}"
    assert warning in doc["warnings"], doc["warnings"]
    page = (out / "report.html").read_text()
    notes = [f"Series: numpy (asked in float64), refusing (asked in float64); ops "
             f"{', '.join(plots.plot_ops()[name])}. Gaps in refusing: {reason}."
             for name in plots.PLOT_NAMES]
    assert all(said in page for said in notes), [s for s in notes if s not in page]
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
        f"{n}.png" for n in plots.PLOT_NAMES)


def test_a_backend_that_exits_in_a_plot_leaves_gaps_and_the_report_stands(
        tmp_path: Path) -> None:
    """Each backend's series comes from a process of its own: a backend calling
    ``os._exit`` there costs its series, not the run."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        code, out = run_check(mp, tmp_path, "--backend", "numpy",
                              "--backend", "tests.hostile_backends:Exits", mode="pass")
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    part = doc["plots"]["depth_law"]
    assert part["series"] == ["numpy", "hostile-exits"], part
    assert part["gaps"] == {"hostile-exits": "its plot process ended with exit code 3 "
                                             "(see plots.log)"}, part
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
        f"{n}.png" for n in plots.PLOT_NAMES)
    assert code == 0, doc["status"]
