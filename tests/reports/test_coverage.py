"""The coverage table (resverify.reports.coverage): a law's tests joined per backend and
dtype, its floor held against everything they reached, and the report files that show it."""

from __future__ import annotations

from typing import Any

from resverify.impl import NumpyBackend
from resverify.reports.coverage import build_coverage, heard, short_cells
from resverify.reports.html import render_html
from resverify.reports.json_report import build_report, validate
from resverify.reports.markdown import render_markdown

LAW = "forward_and_gradients_match_spec_within_budget"
FLOOR = ["op:linear", "op:tanh", "alpha:inexact"]


def _prop(family: str, dtype: str, reached: dict[str, int], status: str = "pass",
          warnings: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": f"test_oracle.py::test_{LAW}[numpy-{family}-{dtype}]", "property": LAW,
            "backend": "numpy", "mode": "vjp", "dtype": dtype, "status": status,
            "examples": 8, "time_seconds": 0.1, "vector": None, "replay": None,
            "skip_reason": None, "message": None, "examples_wanted": 8, "failed_after": None,
            "shrink_seconds": None, "failure_kind": None, "failures": [],
            "known_failure": None, "reached": reached, "floor": FLOOR,
            "backend_warnings": list(warnings)}


def test_split_law_is_held_to_its_floor_over_all_its_tests() -> None:
    props = [_prop("linear", "float64", {"op:linear": 8, "alpha:inexact": 3}),
             _prop("tanh", "float64", {"op:tanh": 8}),
             _prop("linear", "float32", {"op:linear": 8}),
             _prop("tanh", "float32", {"op:tanh": 5}, status="skipped")]
    (row,) = build_coverage(props)
    by_dtype = {cell["dtype"]: cell for cell in row["cells"]}
    assert by_dtype["float64"]["unreached"] == [], by_dtype["float64"]
    assert by_dtype["float64"]["reached"] == {"alpha:inexact": 3, "op:linear": 8,
                                              "op:tanh": 8}, by_dtype["float64"]
    assert by_dtype["float64"]["examples"] == 16, by_dtype["float64"]
    assert by_dtype["float32"]["unreached"] == ["alpha:inexact", "op:tanh"], (
        "a skipped test's reach counted", by_dtype["float32"])
    assert short_cells([row]) == [f"{LAW} [numpy, float32]: alpha:inexact, op:tanh"]


def test_report_files_show_coverage_and_backend_warnings() -> None:
    warning = "RuntimeWarning: Mean of empty slice (3 calls)"
    props = [_prop("linear", "float64", {"op:linear": 8}, warnings=(warning,))]
    doc = build_report(run={"seed": 0, "profile": "ci", "backends": ["numpy"],
                            "pytest_args": [], "pytest_exit_code": 0},
                       backends=[NumpyBackend()], claims=[], properties=props, complete=True,
                       warnings=[], timings={})
    validate(doc)
    assert [c["unreached"] for c in doc["coverage"][0]["cells"]] == [["alpha:inexact",
                                                                     "op:tanh"]], doc["coverage"]
    assert heard(doc["properties"]) == [f"numpy: {warning} [{LAW}, float64]"]
    page = render_html(doc, {})
    assert 'id="coverage"' in page and '<td class="short">alpha:inexact, op:tanh</td>' in page
    assert "Mean of empty slice" in page, "the backend's warning is not on the page"
    text = render_markdown(doc)
    assert f"- {LAW} [numpy, float64]: alpha:inexact, op:tanh" in text, text
    assert "## Warnings the backends raised" in text and warning in text, text
