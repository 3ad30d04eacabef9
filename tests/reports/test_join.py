""":mod:`resverify.reports.join`: report.json files of several machines joined into one.

The runs are two real ``resverify check`` runs of ``numpy`` on the fake suite
(:func:`tests.reports.fakes.two_machine_reports`), the first passing, the second failing
one test, standing for the same backend on two machines. The laws: the same backend on
two machines stays two columns, every cell is the one its machine's run decided, each
machine keeps its whole report (environment, library versions, devices), the joined
document follows its schema, and an input that is not a complete report of this schema
version, or runs that disagree about the claims' catalog, are refused with one line.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from resverify.reports import join
from resverify.reports.html import render_joined_html
from resverify.reports.json_report import SCHEMA_VERSION
from resverify.reports.markdown import render_joined_markdown
from resverify.spec.errors import UsageError
from tests.reports.chromium import browse, console_lines, dom_tags, find_chromium
from tests.reports.fakes import two_machine_reports

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return two_machine_reports(tmp_path_factory.mktemp("join"))


@pytest.fixture
def reports(paths: tuple[Path, Path]) -> tuple[Doc, Doc]:
    first, second = (join.read_run(p) for p in paths)
    return first, second


def _joined(first: Doc, second: Doc, labels: tuple[str, str] = ("laptop", "gpu-box")) -> Doc:
    runs = [join.Run(labels[0], "a/report.json", first),
            join.Run(labels[1], "b/report.json", second)]
    join.check_catalogs(runs)
    return join.join(runs)


def test_the_same_backend_on_two_machines_is_two_columns_not_a_merged_verdict(
        reports: tuple[Doc, Doc]) -> None:
    doc = _joined(*reports)
    machines = {(c["machine"], c["backend"]) for c in doc["matrix"]["columns"]}
    assert machines == {("laptop", "numpy"), ("gpu-box", "numpy")}, \
        f"columns' (machine, backend) = {sorted(machines)}, but should be numpy on both machines"
    cells = {(r["property"], c["machine"]): c["status"]
             for r in doc["matrix"]["rows"] for c in r["cells"] if c["dtype"] == "float64"}
    want = {("zero_branch_is_identity", "laptop"): "none",
            ("zero_branch_is_identity", "gpu-box"): "fail",
            ("addition_commutes", "laptop"): "pass",
            ("addition_commutes", "gpu-box"): "pass"}
    assert {k: cells.get(k) for k in want} == want, f"float64 cells {cells}, expected {want}"
    statuses = [(m["label"], m["status"]) for m in doc["machines"]]
    assert statuses == [("laptop", "pass"), ("gpu-box", "fail")], statuses
    assert doc["status"] == "fail", f"joined status {doc['status']!r}, expected 'failed'"
    sides = {(m["machine"], m["backend"]) for m in doc["matrix"]["modes"]}
    assert sides == machines, f"modes' (machine, backend) {sides}, columns' {machines}"


def test_every_cell_is_the_one_its_machines_run_decided(reports: tuple[Doc, Doc]) -> None:
    doc = _joined(*reports)
    for label, report in zip(("laptop", "gpu-box"), reports, strict=True):
        own = {(r["property"], r["mode"]): r["cells"] for r in report["matrix"]["rows"]}
        for row in doc["matrix"]["rows"]:
            mine = [{k: v for k, v in c.items() if k != "machine"}
                    for c in row["cells"] if c["machine"] == label]
            expected = own.get((row["property"], row["mode"]))
            if expected is None:  # a row this run has no test for: every cell none
                assert {c["status"] for c in mine} == {"none"}, (label, row["property"], mine)
            else:
                assert mine == expected, \
                    f"{label} {row['property']}: cells {mine}, but its run decided {expected}"


def test_each_machine_keeps_its_whole_report_versions_and_devices(
        reports: tuple[Doc, Doc]) -> None:
    doc = _joined(*reports)
    for machine, report in zip(doc["machines"], reports, strict=True):
        assert machine["report"] == report, f"{machine['label']}: its report changed in the join"
        about = machine["report"]["backends"][0]["about"]
        assert about["library"] == "numpy" and about["device"] == "cpu", about
        assert machine["report"]["environment"]["dependencies"]["numpy"], "numpy's version lost"


def test_the_joined_report_follows_its_schema(reports: tuple[Doc, Doc]) -> None:
    join.validate_joined(_joined(*reports))


@pytest.mark.parametrize(("where", "value"), [
    (("status",), "sort of"),
    (("matrix", "columns", 0, "machine"), ""),
    (("machines", 0, "report", "backends", 0, "device"), 7),  # inside a machine's report
])
def test_the_joined_schema_refuses_a_broken_document(
        reports: tuple[Doc, Doc], where: tuple[str | int, ...], value: object) -> None:
    doc = copy.deepcopy(_joined(*reports))
    target: Any = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        join.validate_joined(doc)


def test_a_claim_is_joined_once_with_each_machines_check(reports: tuple[Doc, Doc]) -> None:
    doc = _joined(*reports)
    ids = [c["id"] for c in doc["claims"]]
    assert ids == sorted(c["id"] for c in reports[0]["claims"]), ids
    for claim in doc["claims"]:
        machines = [m["machine"] for m in claim["machines"]]
        assert machines == ["laptop", "gpu-box"], f"claim {claim['id']}: machines {machines}"


def test_derived_labels_are_system_and_architecture_numbered_when_shared(
        reports: tuple[Doc, Doc]) -> None:
    env = reports[0]["environment"]
    derived = f"{env['platform'].split('-')[0]} {env['machine']}"
    got = join.default_labels([*reports, reports[0]], [None, "gpu-box", None])
    assert got == [derived, "gpu-box", f"{derived} #2"], f"labels {got}, derived {derived!r}"


@pytest.mark.parametrize(("labels", "said"), [
    (["x", "x"], "two runs are labelled 'x'"), (["", None], "label is empty")])
def test_labels_that_do_not_name_one_machine_each_are_refused(
        reports: tuple[Doc, Doc], labels: list[str | None], said: str) -> None:
    with pytest.raises(UsageError, match=re.escape(said)):
        join.default_labels(reports, labels)


def _written(tmp_path: Path, doc: object, name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(UsageError) as caught:
        join.read_run(path)
    said = str(caught.value)
    assert "\n" not in said and str(path) in said, f"not one line naming {path}: {said!r}"
    return said


def test_a_truncated_report_is_refused_naming_the_file(paths: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    text = paths[0].read_text(encoding="utf-8")
    cut = tmp_path / "cut.json"
    cut.write_text(text[:len(text) // 2], encoding="utf-8")
    said = _refusal(cut)
    assert "not a complete JSON document" in said, said


def test_a_report_of_another_schema_version_is_refused_naming_both(
        reports: tuple[Doc, Doc], tmp_path: Path) -> None:
    said = _refusal(_written(tmp_path, {**reports[0], "schema_version": SCHEMA_VERSION - 1}))
    assert f"schema version {SCHEMA_VERSION - 1}" in said and f"version {SCHEMA_VERSION}" in said, \
        said


@pytest.mark.parametrize(("doc", "said"), [
    ({"schema": "resverify-joined-report"}, "a joined report"),
    ([1, 2], 'its "schema" is null'),
])
def test_a_document_that_is_no_report_is_refused(tmp_path: Path, doc: object, said: str) -> None:
    assert said in _refusal(_written(tmp_path, doc))


def test_a_report_the_schema_refuses_is_refused_with_where(
        reports: tuple[Doc, Doc], tmp_path: Path) -> None:
    said = _refusal(_written(tmp_path, {**reports[0], "status": "sort of"}))
    assert "at /status" in said, said


def _with_claims(report: Mapping[str, Any], claims: list[Doc]) -> Doc:
    return {**report, "claims": claims}


def test_runs_that_disagree_about_a_claims_expected_value_are_refused(
        reports: tuple[Doc, Doc]) -> None:
    first, second = reports
    changed = copy.deepcopy(second["claims"])
    changed[-1]["expected"] = "2"
    runs = [join.Run("a", "a.json", first), join.Run("b", "b.json", _with_claims(second, changed))]
    with pytest.raises(UsageError, match=rf"claim {changed[-1]['id']} expects .* and '2'"):
        join.check_catalogs(runs)


def test_runs_that_disagree_about_the_claim_ids_are_refused_at_the_first(
        reports: tuple[Doc, Doc]) -> None:
    first, second = reports
    missing = sorted(c["id"] for c in second["claims"])[0]
    fewer = [c for c in second["claims"] if c["id"] != missing]
    runs = [join.Run("a", "a.json", first), join.Run("b", "b.json", _with_claims(second, fewer))]
    with pytest.raises(UsageError, match=rf"claim {missing} expects .* nothing \(no such claim\)"):
        join.check_catalogs(runs)


def test_a_run_that_checked_no_claim_joins_any_catalog(reports: tuple[Doc, Doc]) -> None:
    first, second = reports
    join.check_catalogs([join.Run("a", "a.json", first),
                         join.Run("b", "b.json", _with_claims(second, []))])


def test_the_markdown_names_each_backend_with_its_machine(reports: tuple[Doc, Doc]) -> None:
    text = render_joined_markdown(_joined(*reports))
    header = next(line for line in text.splitlines() if line.startswith("| property | mode |"))
    assert header == "| property | mode | numpy on laptop | numpy on gpu-box |", header
    assert "# resverify joined: FAIL" in text


def test_the_page_shows_each_machine_above_its_columns(reports: tuple[Doc, Doc]) -> None:
    page = render_joined_html(_joined(*reports, labels=("laptop", "<b>gpu</b>")))
    machines = re.findall(r'<th class="machine" colspan="(\d+)">(.*?)</th>', page)
    per_machine = {label: len(report["matrix"]["columns"]) for label, report
                   in zip(("laptop", "&lt;b&gt;gpu&lt;/b&gt;"), reports, strict=True)}
    assert {label: int(span) for span, label in machines} == per_machine, machines
    assert "<b>gpu</b>" not in page, "a machine's label reached the page unescaped"


def test_a_browser_reads_each_columns_machine_from_the_joined_page(
        reports: tuple[Doc, Doc], tmp_path: Path) -> None:
    chromium = find_chromium()
    doc = _joined(*reports)
    page = tmp_path / "report.html"
    page.write_text(render_joined_html(doc), encoding="utf-8")
    done = browse(chromium, page, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_lines(done.stderr) == [], console_lines(done.stderr)
    dom = done.stdout
    assert [t for t, _ in dom_tags(dom) if t == "script"] == [], "a <script> reached the DOM"
    header = re.search(r'<table class="matrix"><thead>(.*?)</thead>', dom, re.S)
    assert header is not None, "no matrix in the rendered page"
    rows = re.findall(r"<tr>(.*?)</tr>", header.group(1), re.S)
    machines = re.findall(r'<th class="machine" colspan="(\d+)">(.*?)</th>', rows[0])
    want = [(str(len(r["matrix"]["columns"])), label)
            for r, label in zip(reports, ("laptop", "gpu-box"), strict=True)]
    assert machines == want, f"machine headers (span, label) {machines}, expected {want}"
    backends = re.findall(r'<th class="name" colspan="\d+">(.*?)</th>', rows[1])
    assert backends == ["numpy", "numpy"], f"backend headers {backends}: one under each machine"
    listed = re.findall(r'<th class="machine">(.*?)</th>', dom)
    assert listed == ["laptop", "gpu-box"], f"machines table {listed}"
