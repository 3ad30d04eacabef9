"""The forward-mode depth-law plot: ``|J·t|`` through L blocks of the depth-law stack on
each checked backend that claims ``jvp``, against the spec's ``(1+a)^L·t``; a backend that
claims only ``vjp`` is not asked, has no series, and the legend, report.json and the HTML
caption say so."""

from __future__ import annotations

import copy
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.reports import plots
from resverify.reports.json_report import validate
from resverify.spec.request import Request, Result
from tests.mutants.forward import TangentDropsIdentity
from tests.report_mode_backends import REVERSE_ONLY, ReverseOnly
from tests.reports.fakes import run_check

ROOT = Path(__file__).resolve().parents[2]
PLOT = "depth_law_jvp"
T = plots.DEPTH_LAW_TANGENT


def _law(a: float, depth: int = 30) -> list[Fraction]:
    return [(1 + Fraction(a)) ** k * T for k in range(depth + 1)]


@pytest.fixture(scope="module")
def forward() -> dict[str, plots.PlotData]:
    """numpy (claims jvp), a catalog mutant whose merge drops the identity path from the
    tangent, and a backend that claims reverse mode only."""
    return plots.plot_data(3, [NumpyBackend(), TangentDropsIdentity(), ReverseOnly()])


def test_the_exact_curve_is_the_spec_law_one_plus_a_to_the_l_times_t(
        forward: dict[str, plots.PlotData]) -> None:
    for curve, a in zip(forward[PLOT].curves, plots.DEPTH_LAW_A, strict=True):
        expected = [float(v) for v in _law(a)]
        assert curve.reference.tolist() == expected, (curve.label, curve.reference, expected)


def test_numpy_forward_mode_lies_on_the_law_and_exactly_where_the_powers_are_binary(
        forward: dict[str, plots.PlotData]) -> None:
    law = {c.label: c for c in forward[PLOT].curves}
    for label in ("a = -0.5", "a = 1.0", "a = -2.5"):  # (1+a)^L·t exact in float64 to L = 30
        got = law[label].by_backend["numpy"].tolist()
        assert got == law[label].reference.tolist(), (label, got)
    got = law["a = 0.1"].by_backend["numpy"]  # 1 + a is not binary: J·t is rounded
    # two roundings per block (a·t, then the sum) over 30 blocks, and the law's own: 61 u
    np.testing.assert_allclose(got, law["a = 0.1"].reference, rtol=61 * 2.0**-53, atol=0,
                               err_msg="numpy's J·t at a = 0.1 against (1.1)^L·3/4")


def test_a_backend_whose_tangent_drops_the_identity_is_off_the_law(
        forward: dict[str, plots.PlotData]) -> None:
    """J·t = a^L·t instead of (1+a)^L·t: on the law only where a^L = (1+a)^L."""
    broken = TangentDropsIdentity.name
    plot = forward[PLOT]
    assert plot.series == ["numpy", broken] and plot.gaps == {}, (plot.series, plot.gaps)
    for curve, a in zip(plot.curves, plots.DEPTH_LAW_A, strict=True):
        got = curve.by_backend[broken]
        if a in (-0.5, 1.0):  # a^L·t is binary: exactly the broken rule's values
            wrong = [float(Fraction(a) ** k * T) for k in range(31)]
            assert got.tolist() == wrong, (curve.label, got, wrong)
        off = ~np.isclose(got, curve.reference, rtol=1e-6, atol=0)
        # off wherever a^L ≠ (1+a)^L: every L >= 1, but the even L at a = -1/2
        should = [Fraction(a) ** k != (1 + Fraction(a)) ** k for k in range(31)]
        assert off.tolist() == should, (curve.label, got, curve.reference)
        assert sum(should) >= 15, (curve.label, should)


def test_a_reverse_only_backend_gets_no_forward_series_and_the_legend_says_so(
        forward: dict[str, plots.PlotData]) -> None:
    plot = forward[PLOT]
    assert (plot.mode, plot.not_claimed) == ("jvp", [REVERSE_ONLY]), plot
    assert all(REVERSE_ONLY not in c.by_backend for c in plot.curves), "a series it never gave"
    assert REVERSE_ONLY not in plot.dtypes and REVERSE_ONLY not in plot.gaps, plot
    for name in plots.PLOT_NAMES:
        if plots.PLOT_MODES[name] == "vjp":  # every backend claims reverse mode
            assert REVERSE_ONLY in forward[name].series, (name, forward[name].series)
            assert forward[name].not_claimed == [], (name, forward[name].not_claimed)
    legend = plots.FIGURES[PLOT](plot).axes[0].get_legend()
    assert legend is not None, "the forward plot has no legend"
    texts = [t.get_text() for t in legend.get_texts()]
    assert f"{REVERSE_ONLY}: jvp not claimed, no series" in texts, texts
    named = [t.split(",")[0] for t in texts]  # a backend's entry goes on with its deviation
    assert "numpy" in named and TangentDropsIdentity.name in named, texts


def test_the_plot_process_document_carries_not_claimed_to_the_parent(
        forward: dict[str, plots.PlotData]) -> None:
    """What plot_child sends back for a reverse-only backend, read by the parent: no series
    in the forward plot, a series in every other."""
    sent = json.loads(json.dumps(plots.series_document(forward, REVERSE_ONLY)))
    assert sent[PLOT] == {"not_claimed": "jvp"}, sent[PLOT]
    parent = plots.plot_data(3, [])
    plots.add_series(parent, REVERSE_ONLY, sent)
    assert (parent[PLOT].series, parent[PLOT].not_claimed) == ([], [REVERSE_ONLY])
    assert parent["depth_law"].series == [REVERSE_ONLY], parent["depth_law"].series
    summary = plots.plot_summary(parent)
    assert summary[PLOT] == {"mode": "jvp", "series": [], "dtypes": {}, "gaps": {},
                             "not_claimed": [REVERSE_ONLY]}, summary[PLOT]


def test_report_json_schema_takes_the_plot_mode_and_refuses_an_unknown_one(
        forward: dict[str, plots.PlotData], checked: tuple[dict[str, Any], Path]) -> None:
    doc = copy.deepcopy(checked[0])
    doc["plots"] = plots.plot_summary(forward)
    validate(doc)
    broken = copy.deepcopy(doc)
    broken["plots"][PLOT]["mode"] = "sideways"
    with pytest.raises(jsonschema.ValidationError, match="sideways"):
        validate(broken)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """report.json and the report folder of a check on numpy and a reverse-only backend
    (the fake passing suite)."""
    root = tmp_path_factory.mktemp("forward")
    with pytest.MonkeyPatch.context() as mp:  # the plot processes import the tests package
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        code, out = run_check(mp, root, "--backend", "numpy",
                              "--backend", "tests.report_mode_backends:ReverseOnly", mode="pass")
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    assert code == 0, doc["status"]
    return doc, out


def test_check_plots_forward_mode_for_the_backends_that_claim_it(
        checked: tuple[dict[str, Any], Path]) -> None:
    """``resverify check`` draws the forward plot with numpy's series only, says in the
    caption that the reverse-only backend has none, and writes its PNG."""
    doc, out = checked
    validate(doc)
    part = doc["plots"][PLOT]
    assert (part["series"], part["gaps"]) == (["numpy"], {}), part
    assert doc["plots"]["depth_law"]["series"] == ["numpy", REVERSE_ONLY], doc["plots"]
    page = (out / "report.html").read_text()
    figure = page.split(f'<figure id="plot-{PLOT}">')[1].split("</figure>")[0]
    ops = ", ".join(plots.plot_ops()[PLOT])
    said = (f"Series: numpy (asked in float64); ops {ops}. "
            f"No series (jvp not claimed): {REVERSE_ONLY}.")
    assert said in figure, figure
    assert "not claimed" not in page.split('<figure id="plot-depth_law">')[1].split(
        "</figure>")[0], "a reverse-mode plot says a backend does not claim it"
    png = out / "plots" / f"{PLOT}.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), png


class _Logging(NumpyBackend):
    """The reference backend, noting whether each request asked for forward mode."""

    name = "logging"

    def __init__(self) -> None:
        self.forward: list[bool] = []

    def run(self, request: Request) -> Result:
        self.forward.append(request.forward_mode)
        return super().run(request)


def test_the_forward_plot_asks_last_so_a_backend_out_of_time_loses_it_first() -> None:
    backend = _Logging()
    data = plots.plot_data(3, [backend], exact=False)
    assert list(data) == list(plots.PLOT_NAMES), list(data)
    assert backend.forward.count(True) == 1 and backend.forward[-1], backend.forward
