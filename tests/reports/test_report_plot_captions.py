"""The report's plots say what they are: illustrations of the laws on fixed seeded programs,
not the property verdicts; each caption says how its lines are computed, which ops its
programs use and in which dtype each backend was asked; the legend measures how far each
backend's own answers lie from the lines (and where they are NaN or ±inf); the norm plot's
caption says what its curves do."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.reports import plots
from resverify.reports.html import PLOT_CAPTIONS, render_html
from resverify.spec.request import Request, Result, Value
from tests import mutants as catalog
from tests.reports.test_report_html import _doc


class Recording(NumpyBackend):
    """The reference, keeping the ops of every request it is sent."""

    name = "recording"

    def __init__(self) -> None:
        self.ops: set[str] = set()

    def run(self, request: Request) -> Result:
        self.ops.update(node.op for node in request.program.nodes)
        return super().run(request)


class NanGrads(NumpyBackend):
    """The reference's outputs, but every gradient and tangent NaN."""

    name = "nan-grads"

    def run(self, request: Request) -> Result:
        result = super().run(request)
        assert isinstance(result, Value)
        nan = {k: np.full(np.shape(v), np.nan) for k, v in result.grads.items()}
        tangent = None if result.tangent is None else np.full(np.shape(result.tangent), np.nan)
        return Value(result.output, nan, tangent)


@pytest.fixture(scope="module")
def data() -> dict[str, plots.PlotData]:
    return plots.plot_data(0, [NumpyBackend(), catalog.DroppedIdentityGrad(), NanGrads()])


def _captions(page: str) -> dict[str, str]:
    found = re.findall(r'<figure id="plot-([^"]+)">.*?<figcaption>(.*?)</figcaption>', page, re.S)
    return {name: html.unescape(text) for name, text in found}


def _page(data: dict[str, plots.PlotData]) -> str:
    doc = _doc()
    doc["plots"] = plots.plot_summary(data)
    return render_html(doc, plots.render_plots(0, data=data))


def test_the_plots_section_says_they_are_illustrations_not_the_verdicts(
        data: dict[str, plots.PlotData]) -> None:
    page = _page(data)
    section = html.unescape(page[page.index("<h2>Plots</h2>"):page.index("<figure")])
    for words in ("illustrations of the laws", "not the verdicts", "float16",
                  "largest relative deviation"):
        assert words in section, f"the plots' introduction lacks {words!r}: {section}"


def test_each_caption_says_its_ops_and_the_dtype_each_backend_was_asked_in(
        data: dict[str, plots.PlotData]) -> None:
    captions = _captions(_page(data))
    assert set(captions) == set(plots.PLOT_NAMES), captions.keys()
    for name, caption in captions.items():
        ops = ", ".join(plots.plot_ops()[name])
        assert f"ops {ops}" in caption, f"{name}: caption {caption!r} lacks its ops {ops}"
        for backend in data[name].series:
            asked = f"{backend} (asked in float64)"
            assert asked in caption, f"{name}: caption {caption!r} lacks {asked!r}"
        assert "illustration" in PLOT_CAPTIONS[name], f"{name}: {PLOT_CAPTIONS[name]!r}"


@pytest.mark.parametrize("name", plots.PLOT_NAMES)
def test_plot_ops_are_the_ops_each_plot_sends_its_backends(name: str) -> None:
    backend = Recording()
    plots.plot_data(0, [backend], exact=False, only=(name,))
    assert tuple(sorted(backend.ops)) == plots.plot_ops()[name], \
        f"{name}: sent ops {sorted(backend.ops)}, plot_ops says {plots.plot_ops()[name]}"


def test_the_legend_measures_each_backends_deviation_from_the_lines(
        data: dict[str, plots.PlotData]) -> None:
    broken = catalog.DroppedIdentityGrad.name
    for name, plot in data.items():
        good = plots.departure(plot, "numpy")
        assert good.largest is not None and good.largest < 1e-12 and good.non_finite == 0, \
            f"{name}: numpy departs from the lines by {good}, expected < 1e-12"
        legend = plots._legend_text("numpy", plot)
        assert "max rel. dev." in legend and "off the lines" not in legend, legend
    for name in ("gradient_retention", "depth_law", "norm_depth"):
        bad = plots.departure(data[name], broken)
        assert bad.largest is not None and bad.largest > plots.OFF_LINES, \
            f"{name}: {broken} departs by {bad}, expected > {plots.OFF_LINES}"
        legend = plots._legend_text(broken, data[name])
        assert legend.endswith("off the lines"), f"{name}: legend {legend!r}"


def test_a_backend_answering_nan_is_named_in_the_legend_not_left_a_silent_gap(
        data: dict[str, plots.PlotData]) -> None:
    plot = data["depth_law"]
    points = sum(len(c.x) for c in plot.curves)
    seen = plots.departure(plot, NanGrads.name)
    assert (seen.largest, seen.non_finite, seen.points) == (None, points, points), seen
    legend = plots._legend_text(NanGrads.name, plot)
    assert f"NaN/inf at {points} of {points} points" in legend, legend


def test_the_norm_caption_matches_the_curves_it_captions() -> None:
    """At the default seed 0 (the caption's example) pre-norm rises to about 3 by depth 6;
    post-norm ranges 0.45-2.2; the caption says so and no longer says 'near 1'."""
    caption = PLOT_CAPTIONS["norm_depth"]
    assert "near 1" not in caption, caption
    pre = np.array([plots.norm_gradient_curve("pre", 6, 0, 4, g) for g in (0.5, 1.0)])
    post = np.array([plots.norm_gradient_curve("post", 6, 0, 4, g) for g in (0.5, 1.0)])
    said = re.search(r"seed 0 .*?pre-norm rises to about (\d+) by depth 6.*?post-norm "
                     r"ranges from ([\d.]+) to ([\d.]+)", caption)
    assert said is not None, f"the caption gives no measured example: {caption}"
    top, low, high = int(said[1]), float(said[2]), float(said[3])
    assert round(float(pre[:, 6].max())) == top, f"pre-norm at depth 6: {pre[:, 6]}, said {top}"
    assert (round(float(post.min()), 2), round(float(post.max()), 1)) == (low, high), \
        f"post-norm from {post.min():.3f} to {post.max():.3f}, said {low} to {high}"


@pytest.mark.slow
def test_the_norm_captions_range_over_twenty_seeds_is_measured() -> None:
    """The caption's band at depth 6 over seeds 0-19, both gains (80 exact stacks, ~1 min)."""
    caption = PLOT_CAPTIONS["norm_depth"]
    at6 = {placement: np.array([plots.norm_gradient_curve(placement, 6, seed, 4, gain)[6]
                                for seed in range(20) for gain in (0.5, 1.0)])
           for placement in ("pre", "post")}
    measured = (f"pre-norm lies between {at6['pre'].min():.2g} and {at6['pre'].max():.2g} "
                f"(median {np.median(at6['pre']):.2g}), post-norm between "
                f"{at6['post'].min():.2g} and {at6['post'].max():.2g} "
                f"(median {np.median(at6['post']):.2g})")
    assert measured in caption, f"measured {measured!r}; the caption says {caption!r}"
