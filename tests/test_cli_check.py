"""``resverify check`` on the command line: usage errors are one line and exit 2; pytest's
own options (-n, --junitxml, -- -k) pass through; ``resverify`` alone means check."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NoReturn

import pytest
from test_report_fakes import write_fake_suite

from resverify.reports.cli import main
from resverify.reports.runner import Progress, SuiteRun


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "said"), [
    (["check", "--backend", "no-such-backend"], "unknown backend"),
    (["check", "--profile", "nightly"], "unknown profile"),
    (["check", "--report-dir", "taken"], "cannot write to report folder"),
    (["check", "--no-such-option"], "unrecognized arguments"),
])
def test_usage_errors_exit_2_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], said: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("a file where the report folder should go")
    assert main(argv) == 2, argv
    assert said in _one_line_error(capsys)
    assert not (tmp_path / "resverify-report").exists(), "a refused run wrote a report"


def test_pytest_refusing_its_arguments_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_fake_suite(tmp_path / "suite")
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--suite", "suite", "--no-claims", "--", "--no-such-pytest-flag"])
    assert code == 2
    assert "pytest refused the arguments" in _one_line_error(capsys)
    assert not (tmp_path / "resverify-report" / "report.json").exists()


def test_bare_command_checks_with_xdist_junit_and_selection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_fake_suite(tmp_path / "suite", "fail")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code = main(["--suite", "suite", "--no-claims", "-n", "2", "--junitxml", "junit.xml",
                 "--", "-k", "commutes or skipped"])
    assert code == 0, capsys.readouterr()
    doc = json.loads((tmp_path / "resverify-report" / "report.json").read_text())
    assert doc["complete"] is True and doc["status"] == "passed", doc["warnings"]
    assert doc["run"]["pytest_args"] == ["-k", "commutes or skipped"]
    assert sorted(p["id"].split("::")[-1] for p in doc["properties"]) == [
        "test_addition_commutes[numpy-float32]", "test_addition_commutes[numpy-float64]",
        "test_unclaimed_dtype_is_skipped[numpy]"]
    examples = [p["examples"] for p in doc["properties"] if p["status"] == "passed"]
    assert examples == [4, 4], f"examples {examples}; the fake ci profile runs 4"
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    assert len(list(cases)) == 3
    text = summary.read_text()
    assert text.startswith("earlier step\n# resverify: PASSED"), text[:80]
    out = capsys.readouterr().out
    assert "\r" not in out, "progress was drawn although stdout is not a terminal"
    assert "passed (report in resverify-report/report.html)" in out, out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_shown_on_a_terminal_and_silent_otherwise() -> None:
    nodeid = "suite/t.py::test_a[numpy]"
    records: list[dict[str, object]] = [{"$report_type": "SessionStart"}]
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "passed")):
        records.append({"$report_type": "TestReport", "nodeid": nodeid, "when": when,
                        "outcome": outcome, "duration": 0.0, "longrepr": None,
                        "resverify_collected": 2, "user_properties": [["examples", 12]]})
    for stream, shown in ((_Terminal(), True), (io.StringIO(), False)):
        progress, suite = Progress(stream), SuiteRun()
        for record in records:
            progress.update(suite, record, suite.add(record))
        text = stream.getvalue()
        assert ("[0/2] running test_a[numpy]" in text) is shown, text
        assert ("[1/2 1 failed] test_a[numpy]: failed, 12 examples" in text) is shown, text
        assert (text == "") is not shown


def test_check_runs_the_real_property_suite_and_reads_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("resverify.properties.plugin", reason="the property suite is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["check", "--no-claims", "--", "-k", "residual_stack and float64"])
    doc = json.loads((tmp_path / "resverify-report" / "report.json").read_text())
    assert code == 0 and doc["complete"] is True, (code, doc["warnings"])
    assert doc["properties"], "no property of the real suite was selected"
    for prop in doc["properties"]:
        assert prop["id"].split("::")[0].endswith("test_depth.py"), prop["id"]
        assert (prop["backend"], prop["dtype"], prop["status"]) == ("numpy", "float64",
                                                                   "passed"), prop
        assert isinstance(prop["examples"], int) and prop["examples"] > 0, prop


def test_help_lists_every_kind_of_backend_name_and_the_new_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    from resverify.impl.registry import BUILTIN

    assert main(["check", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in [*BUILTIN, "module:attr", "cmd:COMMAND", "--allow-nothing-checked",
                 "--timeout SECONDS"]:
        assert name in text, f"{name!r} missing from check --help: {text}"


def test_adapter_module_failing_on_import_is_a_one_line_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exploding_adapter.py").write_text(
        "raise RuntimeError('this adapter cannot load')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-claims", "--backend", "exploding_adapter:Backend"])
    assert code == 2
    err = _one_line_error(capsys)
    assert "exploding_adapter" in err and "this adapter cannot load" in err, err
    assert not (tmp_path / "resverify-report" / "report.json").exists()


def test_status_line_is_cleared_when_ctrl_c_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def interrupted_claims(backends: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr("resverify.reports.cmd_check.run_claims", interrupted_claims)
    assert main(["check", "--report-dir", "out"]) == 1
    text = terminal.getvalue()
    shown = text.index("checking claims on numpy")
    assert "\r\033[K" in text[shown:].split("\n")[0], f"status line left on screen: {text!r}"
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (doc["complete"], doc["status"]) == (False, "incomplete"), doc["warnings"]
