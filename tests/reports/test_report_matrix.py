"""The conformance matrix: VJP and JVP side by side in report.json, report.md and
report.html, one row per property, a cell per backend and dtype (report.md folds a
backend's dtypes into one cell); a backend that does not claim a mode or a dtype shows
"not claimed" there, never a verdict."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from resverify.reports.html import render_html
from resverify.reports.json_report import build_report, property_entry, validate
from resverify.reports.markdown import render_markdown
from resverify.reports.matrix import build_matrix, cell_text
from resverify.spec.ir import DTYPES
from tests.report_mode_backends import BOTH, REVERSE_ONLY, BothModes, ReverseOnly, many_backends
from tests.reports.fakes import run_check

ROOT = Path(__file__).resolve().parents[2]

def _record(prop: str, backend: str, dtype: str | None, outcome: str, mode: str | None,
            examples: int = 7, skip: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"property": prop, "backend": backend, "examples": examples}
    if dtype is not None:
        props["dtype"] = dtype
    if mode is not None:
        props["mode"] = mode
    return {"nodeid": f"properties/test_x.py::test_{prop}[{backend}-{dtype}]",
            "outcome": outcome, "duration": 0.1, "properties": props, "skip_reason": skip,
            "message": "wrong" if outcome == "failed" else None}


RECORDS = [
    _record("oracle", BOTH, "float64", "passed", "vjp"),
    _record("oracle", REVERSE_ONLY, "float64", "passed", "vjp", examples=5),
    _record("oracle", BOTH, "float16", "skipped", "vjp", 0, "dtype float16 not claimed"),
    _record("oracle", REVERSE_ONLY, "float32", "skipped", "vjp", 0, "no example fits"),
    _record("tangent_oracle", BOTH, "float64", "passed", "jvp", examples=9),
    _record("tangent_oracle", REVERSE_ONLY, "float64", "skipped", "jvp", 0,
            "backend reverse-only: mode jvp not claimed (claims ['vjp'])"),
    _record("tangent_oracle", BOTH, "float32", "failed", "jvp", examples=2),
    _record("duality", BOTH, None, "passed", "jvp", examples=4),
    _record("duality", REVERSE_ONLY, None, "skipped", "jvp", 0, "mode jvp not claimed"),
]


def _doc(records: list[dict[str, Any]] = RECORDS,
         backends: list[Any] | None = None) -> dict[str, Any]:
    chosen = [BothModes(), ReverseOnly()] if backends is None else backends
    props = [property_entry(r, None, Path.cwd()) for r in records]
    return build_report(run={"seed": 0, "profile": "ci", "backends": [b.name for b in chosen],
                             "pytest_args": [], "pytest_exit_code": 1},
                        backends=chosen, claims=[], properties=props,
                        complete=True, warnings=[], timings={})


def _cells(doc: dict[str, Any]) -> dict[tuple[str, str], dict[tuple[str, str], tuple[str, int]]]:
    return {(r["property"], r["mode"]): {(c["backend"], c["dtype"]): (c["status"], c["examples"])
                                         for c in r["cells"]} for r in doc["matrix"]["rows"]}


def test_matrix_puts_vjp_rows_before_jvp_rows_with_a_cell_per_backend_and_dtype() -> None:
    doc = _doc()
    validate(doc)
    assert [(r["property"], r["mode"]) for r in doc["matrix"]["rows"]] == [
        ("oracle", "vjp"), ("duality", "jvp"), ("tangent_oracle", "jvp")]
    assert [(c["backend"], c["dtype"]) for c in doc["matrix"]["columns"]] == [
        (b, d) for b in (BOTH, REVERSE_ONLY) for d in ("float64", "float32", "float16", "any")]
    cells = _cells(doc)
    assert cells[("oracle", "vjp")] == {
        (BOTH, "float64"): ("pass", 7), (BOTH, "float32"): ("none", 0),
        (BOTH, "float16"): ("not claimed", 0), (BOTH, "any"): ("none", 0),
        (REVERSE_ONLY, "float64"): ("pass", 5), (REVERSE_ONLY, "float32"): ("skipped", 0),
        (REVERSE_ONLY, "float16"): ("none", 0), (REVERSE_ONLY, "any"): ("none", 0)}
    tangent = cells[("tangent_oracle", "jvp")]
    assert tangent[(BOTH, "float32")] == ("fail", 2), tangent
    assert tangent[(REVERSE_ONLY, "float64")] == ("not claimed", 0), tangent
    assert cells[("duality", "jvp")][(REVERSE_ONLY, "any")] == ("not claimed", 0)


def test_each_backend_has_a_verdict_per_mode_and_unclaimed_jvp_is_not_claimed() -> None:
    sides = {(m["backend"], m["mode"]): m for m in _doc()["matrix"]["modes"]}
    assert list(sides) == [(BOTH, "vjp"), (BOTH, "jvp"), (REVERSE_ONLY, "vjp"),
                           (REVERSE_ONLY, "jvp")]
    assert (sides[(BOTH, "vjp")]["status"], sides[(BOTH, "vjp")]["tests_run"]) == ("pass", 1)
    both_jvp = sides[(BOTH, "jvp")]
    assert (both_jvp["status"], both_jvp["tests_run"], both_jvp["examples"],
            both_jvp["failed"]) == ("fail", 3, 15, 1), both_jvp
    assert sides[(REVERSE_ONLY, "jvp")] == {
        "backend": REVERSE_ONLY, "mode": "jvp", "claimed": False, "status": "not claimed",
        "tests_run": 0, "examples": 0, "failed": 0, "expected": 0}


def test_a_failure_in_a_cell_wins_and_a_failure_is_never_shown_as_not_claimed() -> None:
    records = [_record("tangent_oracle", REVERSE_ONLY, "float64", "failed", "jvp", 1),
               _record("oracle", BOTH, "float64", "passed", "vjp", 3),
               _record("oracle", BOTH, "float64", "failed", "vjp", 2)]
    props = [property_entry(r, None, Path.cwd()) for r in records]
    backends = _doc()["backends"]
    matrix = build_matrix(props, backends)
    cells = {(r["property"], c["backend"], c["dtype"]): (c["status"], c["examples"])
             for r in matrix["rows"] for c in r["cells"]}
    assert cells[("oracle", BOTH, "float64")] == ("fail", 5)
    assert cells[("tangent_oracle", REVERSE_ONLY, "float64")] == ("fail", 1)
    sides = {(m["backend"], m["mode"]): m["status"] for m in matrix["modes"]}
    assert sides[(REVERSE_ONLY, "jvp")] == "fail", sides


def test_a_record_without_a_mode_is_reverse_mode() -> None:
    doc = _doc([_record("oracle", BOTH, "float64", "passed", None)])
    assert doc["properties"][0]["mode"] == "vjp"
    assert [r["mode"] for r in doc["matrix"]["rows"]] == ["vjp"]


def test_html_shows_modes_side_by_side_and_the_grouped_matrix() -> None:
    page = render_html(_doc(), {})
    matrix = page.split("<h2>Conformance matrix</h2>")[1].split("<h2>")[0]
    assert matrix.index("VJP (reverse mode)") < matrix.index("JVP (forward mode)"), matrix
    assert '<td class="not-claimed nw">not claimed</td>' in matrix, matrix
    assert f'<th class="name" colspan="4">{BOTH}</th>' in matrix, matrix
    assert '<td class="fail nw">fail (2)</td>' in matrix, matrix
    assert "fail: 3 tests, 15 examples, 1 failed" in matrix, matrix
    backends = page.split("<h2>Backends</h2>")[1].split("<h2>")[0]
    assert "<th>modes</th>" in backends and "<td>vjp, jvp</td>" in backends, backends
    single = _doc([_record("oracle", BOTH, "float64", "passed", "vjp")])
    single["backends"] = single["backends"][:1]
    assert "<h2>Conformance matrix</h2>" in render_html(single, {}), \
        "one backend's two modes are side by side too"


def test_markdown_shows_the_matrix_after_the_failures_and_counts_skips_in_cells() -> None:
    text = render_markdown(_doc())
    assert text.index("## Failures") < text.index("## Conformance matrix") < text.index(
        "## Backends"), text
    matrix = text.split("## Conformance matrix")[1].split("\n## ")[0]
    assert "| backend | VJP (reverse) | JVP (forward) |" in matrix, matrix
    assert f"| `{REVERSE_ONLY}` | ✅ pass: 1 tests, 5 examples | not claimed |" in matrix
    assert f"| property | mode | {BOTH} | {REVERSE_ONLY} |" in matrix, matrix
    assert "| `oracle` | vjp | ✅ 1/1 | ✅ 1/2 · ⏭ 1 |" in matrix, matrix
    assert "| `tangent_oracle` | jvp | ❌ float32 · ✅ 1/2 | n/c |" in matrix, matrix
    assert "| `duality` | jvp | ✅ 1/1 | n/c |" in matrix, matrix
    backends = text.split("## Backends")[1]
    assert f"| `{BOTH}` | ❌ fail | vjp, jvp | 4 |" in backends, backends
    assert f"| `{REVERSE_ONLY}` | ✅ pass | vjp | 1 |" in backends, backends


def _ten_backend_records() -> list[dict[str, Any]]:
    """A suite's records on ten backends (:func:`many_backends`): ``oracle`` in every dtype
    (engine-3 fails float16, engine-7 skips float16, engine-9 does not claim bfloat16),
    and two forward-mode properties (the odd engines do not claim jvp)."""
    records = []
    for i in range(10):
        name = f"engine-{i}"
        for dtype in DTYPES:
            outcome, skip = "passed", None
            if (i, dtype) == (3, "float16"):
                outcome = "failed"
            elif (i, dtype) in ((7, "float16"), (9, "bfloat16")):
                outcome = "skipped"
                skip = "no example fits" if i == 7 else "dtype bfloat16 not claimed"
            records.append(_record("oracle", name, dtype, outcome, "vjp",
                                   0 if skip else 7, skip))
        jvp, why = ("passed", None) if i % 2 == 0 else ("skipped", "mode jvp not claimed")
        records += [_record("tangent_oracle", name, "float64", jvp, "jvp", 0 if why else 9, why),
                    _record("duality", name, None, jvp, "jvp", 0 if why else 4, why)]
    return records


def test_markdown_matrix_folds_each_backends_dtypes_into_one_cell_at_ten_backends() -> None:
    """Ten backends of four dtypes: report.md has one column per backend (twelve in all,
    not forty-two), each cell naming the dtypes that failed and counting those that
    passed; report.json and report.html keep a cell per backend and dtype."""
    doc = _doc(_ten_backend_records(), many_backends(10))
    validate(doc)
    matrix = render_markdown(doc).split("## Conformance matrix")[1].split("\n## ")[0]
    table = [line for line in matrix[matrix.index("| property | mode |"):].split("\n\n")[0]
             .splitlines() if not line.startswith("| ---")]
    assert [line.split(" | ")[0] for line in table] == [
        "| property", "| `oracle`", "| `duality`", "| `tangent_oracle`"], table
    assert all(line.count(" | ") == 11 for line in table), table
    assert max(len(line) for line in table) < 160, table
    cells = {line.split(" | ")[0][3:-1]: line.strip("| ").split(" | ")[2:] for line in table}
    oracle = cells["oracle"]
    assert oracle[0] == "✅ 4/4" and oracle[3] == "❌ float16 · ✅ 3/4", oracle
    assert (oracle[7], oracle[9]) == ("✅ 3/4 · ⏭ 1", "✅ 3/3"), oracle
    for row in ("duality", "tangent_oracle"):
        assert cells[row] == ["✅ 1/1", "n/c"] * 5, (row, cells[row])
    assert len(doc["matrix"]["columns"]) == 10 * 5, "report.json lost the per-dtype cells"
    page = render_html(doc, {})
    assert page.count('<th class="name" colspan="5">engine-') == 10, (
        "report.html lost the per-dtype cells")


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``resverify check`` on a suite that uses the real plugin: one property marked jvp
    and one not, on a backend that claims jvp and one that does not."""
    root = tmp_path_factory.mktemp("modes")
    suite = root / "suite-modes"
    suite.mkdir()
    (suite / "conftest.py").write_text('pytest_plugins = ["resverify.properties.plugin"]\n')
    (suite / "test_modes.py").write_text(
        "import pytest\n\n\n@pytest.mark.jvp\n@pytest.mark.parametrize('dtype', ['float64'])\n"
        "def test_tangent_law(prop, backend, dtype):\n    pass\n\n\n"
        "@pytest.mark.parametrize('dtype', ['float64'])\n"
        "def test_gradient_law(prop, backend, dtype):\n    pass\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        code, out = run_check(mp, root, "--no-plots", "--backend",
                              "tests.report_mode_backends:BothModes",
                              "--backend", "tests.report_mode_backends:ReverseOnly",
                              mode="modes")
    assert code == 0, f"exit {code}: {(out / 'pytest.log').read_text()[-2000:]}"
    return out


def test_check_records_the_marker_as_the_mode_and_skips_unclaimed_jvp(checked: Path) -> None:
    doc = json.loads((checked / "report.json").read_text())
    modes = {(p["property"], p["backend"]): (p["mode"], p["status"], p["skip_reason"])
             for p in doc["properties"]}
    assert modes == {
        ("tangent_law", BOTH): ("jvp", "pass", None),
        ("gradient_law", BOTH): ("vjp", "pass", None),
        ("gradient_law", REVERSE_ONLY): ("vjp", "pass", None),
        ("tangent_law", REVERSE_ONLY): (
            "jvp", "skipped",
            "backend tests.report_mode_backends:ReverseOnly: mode jvp not claimed (claims "
            "['vjp'])"),
    }, modes
    cells = _cells(doc)
    assert cells[("tangent_law", "jvp")][(REVERSE_ONLY, "float64")] == ("not claimed", 0)
    assert cells[("tangent_law", "jvp")][(BOTH, "float64")] == ("pass", 1)
    page = (checked / "report.html").read_text()
    assert "JVP (forward mode)" in page and "not claimed" in page


def test_failed_cell_says_after_how_many_of_the_wanted_examples_it_failed() -> None:
    failing = _record("oracle", BOTH, "float64", "failed", "vjp", examples=801)
    failing["properties"].update(failed_after=12, max_examples=25, shrink_seconds=305.0)
    passing = _record("oracle", BOTH, "float32", "passed", "vjp", examples=25)
    passing["properties"]["max_examples"] = 25
    doc = _doc([failing, passing], [BothModes()])
    validate(doc)  # raises when the document breaks the schema
    [entry] = [p for p in doc["properties"] if p["status"] == "fail"]
    assert (entry["examples"], entry["failed_after"], entry["shrink_seconds"]) == (
        801, 12, 305.0), entry
    cells = {c["dtype"]: c for c in doc["matrix"]["rows"][0]["cells"]}
    assert cell_text(cells["float64"]) == "failed after 12 of 25 examples", cells["float64"]
    assert cell_text(cells["float32"]) == "pass (25)", cells["float32"]
    assert cells["float64"]["examples"] == 801, "the cell's examples count every example run"


def test_the_html_matrix_cell_says_after_how_many_examples_it_failed() -> None:
    """report.html shows the cell as people read it, not the examples counted while
    shrinking (``fail (801)``)."""
    failing = _record("oracle", BOTH, "float64", "failed", "vjp", examples=801)
    failing["properties"].update(failed_after=12, max_examples=25, shrink_seconds=305.0)
    page = render_html(_doc([failing], [BothModes()]), {})
    assert "failed after 12 of 25 examples" in page and "fail (801)" not in page, (
        [line for line in page.split("<td") if "failed" in line][:3])
