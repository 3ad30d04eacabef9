"""report.html and report.md from a report document: self-contained, escaped, failures
first, a conformance matrix for several backends, and the same bytes for the same seed."""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities
from resverify.reports.html import PLOT_CAPTIONS, render_html
from resverify.reports.json_report import build_report, claim_entry, property_entry, validate
from resverify.reports.markdown import append_step_summary, render_markdown
from resverify.spec.request import Request, Result
from tests.reports.fakes import HOSTILE


class _Other:
    name = "other|" + HOSTILE
    capabilities = Capabilities(dtypes=("float32",), device="cuda:0")

    def run(self, request: Request) -> Result:  # pragma: no cover - never run
        raise NotImplementedError


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _record(test: str, backend: str, outcome: str, **extra: Any) -> dict:
    props = {"property": test, "backend": backend, "dtype": "float64", "examples": 12}
    props.update(extra.pop("props", {}))
    return {"nodeid": f"properties/test_laws.py::test_{test}[{backend}]", "outcome": outcome,
            "duration": 0.25, "properties": props, "skip_reason": extra.get("skip_reason"),
            "message": extra.get("message")}


def _doc(backends: tuple = ()) -> dict:
    backends = backends or (NumpyBackend(), _Other())
    other = backends[-1].name
    records = [_record("zero_branch", "numpy", "passed"),
               _record("zero_branch", other, "failed", message="backend said " + HOSTILE,
                       props={"vector": "v.json", "replay": "resverify replay v.json"}),
               _record("depth_law", "numpy", "passed"),
               _record("depth_law", other, "skipped", skip_reason="no float64")]
    claims = [claim_entry({"id": "S11", "source": "s.txt", "statement": "0.75^4",
                           "expected": "81/256", "observed": "81/256", "status": "pass"},
                          "numpy"),
              claim_entry({"id": "S30", "source": "s.txt", "statement": "x | y",
                           "expected": "1.331", "observed": "1.3310001", "status": "fail"},
                          "numpy")]
    props = [property_entry(r, None, Path.cwd()) for r in records]
    return build_report(run={"seed": 3, "profile": "ci", "backends": [b.name for b in backends],
                             "pytest_args": [], "pytest_exit_code": 1},
                        backends=list(backends), claims=claims, properties=props,
                        complete=True, warnings=["a warning " + HOSTILE],
                        timings={"total_seconds": 1.5})


@pytest.fixture(scope="module")
def plots() -> dict[str, bytes]:
    """A one-pixel PNG for each plot: the page embeds the bytes it is given (the real plots
    are drawn, and rendered in a browser, in test_report_plots and test_html_chromium)."""
    from matplotlib.image import imsave

    from resverify.reports.plots import PLOT_NAMES

    drawn = {}
    for i, name in enumerate(PLOT_NAMES):
        png = io.BytesIO()
        imsave(png, np.full((1, 1, 3), i / len(PLOT_NAMES)), format="png")
        drawn[name] = png.getvalue()
    return drawn


def test_page_is_self_contained_and_scriptless(plots: dict[str, bytes]) -> None:
    page = render_html(_doc(), plots)
    tags = _tags(page)
    assert [t for t, _ in tags if t in ("script", "iframe", "object", "embed", "link")] == []
    assert [a for _, a in tags if any(k.startswith("on") for k in a)] == [], "event handler"
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page), "a network reference"
    sources = re.findall(r'<img [^>]*src="([^"]{0,22})', page)
    assert sources == ["data:image/png;base64,"] * len(plots), sources
    assert set(PLOT_CAPTIONS) == set(plots), "a plot without its caption, or a caption unused"
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_every_backend_string_is_escaped(plots: dict[str, bytes]) -> None:
    page = render_html(_doc(), plots)
    assert HOSTILE not in page
    assert page.count("&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;") >= 4


def test_conformance_matrix_has_a_cell_per_backend_and_appears_when_properties_ran(
        plots: dict[str, bytes]) -> None:
    other = _Other.name
    doc = _doc()
    cells = {(r["property"], c["backend"], c["dtype"]): c["status"]
             for r in doc["matrix"]["rows"] for c in r["cells"]}
    assert cells == {
        ("depth_law", "numpy", "float64"): "pass",  # other claims float32 only:
        ("depth_law", other, "float64"): "not claimed",
        ("zero_branch", "numpy", "float64"): "pass", ("zero_branch", other, "float64"): "fail",
    }, cells
    assert "Conformance matrix" in render_html(doc, plots)
    doc["properties"], doc["matrix"]["rows"] = [], []
    assert "Conformance matrix" not in render_html(doc, plots)


def test_page_is_the_same_for_the_same_document_apart_from_timings(plots: dict[str, bytes]) -> None:
    first = render_html(_doc(), plots)
    second_doc = _doc()
    second_doc["timings"] = {"total_seconds": 99.0}
    for prop in second_doc["properties"]:
        prop["time_seconds"] = 7.0
    second = render_html(second_doc, dict(plots))
    untimed = re.compile(r'<(td|p) class="timing[^"]*">.*?</\1>')
    assert first != second
    assert untimed.sub("", first) == untimed.sub("", second)


def test_report_document_built_here_is_valid() -> None:
    validate(_doc())


def test_markdown_puts_failures_first_and_escapes_table_text() -> None:
    text = render_markdown(_doc())
    assert text.startswith("# resverify: FAIL")
    assert text.index("## Failures") < text.index("## Properties") < text.index("## Claims")
    assert "test_zero_branch[" in text.split("## Failures")[1].split("\n## ")[0]
    failures = text.split("## Failures")[1].split("\n## ")[0]
    assert "claim `S30`" in failures and "x \\| y" in failures, failures
    outside_code = re.sub(r"(`{3,})text\n.*?\n\1", "", text, flags=re.S)
    assert HOSTILE not in outside_code and "&lt;script&gt;" in outside_code
    assert HOSTILE in text.split("```text\n")[1], "code blocks show the message verbatim"
    table = text.split("## Properties")[1].split("\n## ")[0]
    assert "4 property tests: 2 passed, 1 skipped" in table, table
    rows = [line for line in table.splitlines() if line.startswith("| `test_")]
    assert len(rows) == 1 and "test_zero_branch[" in rows[0] and "❌ fail" in rows[0], rows
    assert "other\\|&lt;script" in rows[0], "a pipe in a backend name must not split the row"


def test_markdown_counts_what_could_not_run_by_reason() -> None:
    doc = _doc()
    other = doc["backends"][1]
    other["not_run"] = [{"id": f"t::test_{i}", "property": f"p{i}", "dtype": "float64",
                         "reason": "dtype float64 not claimed" if i < 3 else "no example ran"}
                        for i in range(4)]
    backends = render_markdown(doc).split("## Backends")[1].split("\n## ")[0]
    assert "- 3 tests: dtype float64 not claimed\n- 1 test: no example ran" in backends, backends
    assert "test_0" not in backends, "a test that could not run is listed one a line"


def test_step_summary_is_appended_only_when_named(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("before\n")
    assert append_step_summary("# one", {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert append_step_summary("# two\n", {"GITHUB_STEP_SUMMARY": str(target)}) == target
    assert target.read_text() == "before\n# one\n# two\n"
    assert append_step_summary("# three", {}) is None


def test_markdown_details_at_most_twenty_failures() -> None:
    doc = _doc()
    failed = next(p for p in doc["properties"] if p["status"] == "fail")
    doc["properties"] = [dict(failed, id=f"{failed['id']}-{i:02d}") for i in range(25)]
    text = render_markdown(doc)
    assert text.count("\n### `") == 20, text.count("\n### `")
    assert "... and 5 more failed property tests" in text


def test_html_shows_known_failures_fixed_first_and_each_backends_library(tmp_path: Path) -> None:
    """A fixed known failure (it fails the run) is shown as such, and the backends table says
    which library and version ran."""
    from resverify.impl.about import describe_backend
    from resverify.properties.vectors import save_vector
    from resverify.spec.fixtures import linear_block_request
    from tests.properties.test_known_failures import _entry, _failed, _file, _report

    prop = "forward_and_gradients_match_spec_within_budget"
    save_vector(linear_block_request(), tmp_path, prop, "numpy").rename(tmp_path / "s06.json")
    path = _file(tmp_path, _entry("numpy"))
    passed = dict(_failed("numpy"), status="pass", failure_kind=None, failures=[])
    doc = _report(path, [NumpyBackend()], [passed])
    page = render_html(doc, {})
    assert "<h2>Known failures</h2>" in page, page[:400]
    assert '<td class="fixed nw">fixed</td>' in page, "no fixed cell in the known failures"
    about = describe_backend(NumpyBackend())
    shown = f"{about['library']} {about['version']}"
    assert shown in page, f"{shown!r} not in the backends table"
