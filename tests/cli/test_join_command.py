"""``resverify join``: the command's files, exit codes and one-line refusals.

Two fake-suite runs of ``numpy`` (:func:`tests.reports.fakes.two_machine_reports`) stand
for two machines; the slow test joins two real ``resverify check --profile dev`` runs,
of numpy and of torch (numpy twice where torch is missing), as the CI example of
``docs/report.md`` does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from resverify.cli.main import main
from resverify.reports import join
from tests.reports.fakes import two_machine_reports


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return two_machine_reports(tmp_path_factory.mktemp("join-command"))


def test_join_writes_the_three_files_and_exits_1_when_a_machine_failed(
        paths: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "joined"
    code = main(["join", f"{paths[0]}=laptop", f"{paths[1]}=gpu-box", "--report-dir", str(out)])
    said = capsys.readouterr().out
    assert code == 1, f"exit {code}, expected 1: gpu-box's run failed\n{said}"
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    join.validate_joined(doc)
    labels = [m["label"] for m in doc["machines"]]
    assert labels == ["laptop", "gpu-box"], labels
    assert summary.read_text(encoding="utf-8") == (out / "report.md").read_text(encoding="utf-8")
    assert said.splitlines()[-1] == f"joined 2 runs: fail; report in {out}/", said


def test_join_of_runs_that_passed_exits_0(paths: tuple[Path, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["join", f"{paths[0]}=a", f"{paths[0]}=b", "--report-dir", str(tmp_path)])
    assert code == 0, f"exit {code}, expected 0: both runs passed"


def _broken(paths: tuple[Path, Path], tmp_path: Path, how: str) -> Path:
    """A copy of the first report, broken as ``how`` says."""
    text = paths[0].read_text(encoding="utf-8")
    doc = json.loads(text)
    if how == "truncated":
        text = text[: len(text) * 2 // 3]
    elif how == "old schema":
        text = json.dumps({**doc, "schema_version": doc["schema_version"] - 1})
    elif how == "other catalog":
        doc["claims"][0]["expected"] = "not what the seed says"
        text = json.dumps(doc)
    path = tmp_path / f"{how.replace(' ', '-')}.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("how", "said"), [
    ("truncated", "is not a complete JSON document"),
    ("old schema", "is a report of schema version"),
    ("other catalog", "disagree about the claims' catalog: claim S25 expects"),
])
def test_a_bad_input_is_one_line_and_exit_2(
        paths: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        how: str, said: str) -> None:
    bad = _broken(paths, tmp_path, how)
    code = main(["join", str(paths[1]), str(bad), "--report-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert (code, len(lines)) == (2, 1), f"exit {code} with stderr {captured.err!r}, expected " \
        "2 with one line"
    assert lines[0].startswith("resverify: error: ") and said in lines[0], lines[0]
    assert bad.name in lines[0], f"{lines[0]!r} does not name {bad.name}"
    assert not (tmp_path / "out").exists(), "a refused join wrote a report"


KNOWN = Path(__file__).resolve().parents[2] / "docs" / "findings" / "known-failures.toml"


def _real_check(root: Path, backend: str) -> Path:
    """A dev-profile check, its documented findings expected (torch's float16 layer_norm
    tangent on a one-element row is one the dev profile's simplest norm stack meets)."""
    folder = root / f"run-{backend}"
    code = main(["check", "--profile", "dev", "--no-plots", "--backend", backend,
                 "--known-failures", str(KNOWN), "--report-dir", str(folder)])
    assert code == 0, f"resverify check --backend {backend}: exit {code}"
    return folder / "report.json"


@pytest.mark.slow
def test_two_real_runs_join_with_each_machines_backend_and_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from resverify.impl.registry import BUILTINS

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    second = "torch" if BUILTINS["torch"].missing() is None or os.environ.get("CI") else "numpy"
    runs = [_real_check(tmp_path, "numpy"), _real_check(tmp_path, second)]
    code = main(["join", f"{runs[0]}=machine-a", f"{runs[1]}=machine-b",
                 "--report-dir", "joined"])
    assert code == 0, f"join of two passing runs: exit {code}"
    doc = json.loads((tmp_path / "joined" / "report.json").read_text(encoding="utf-8"))
    join.validate_joined(doc)
    columns = {(c["machine"], c["backend"]) for c in doc["matrix"]["columns"]}
    assert columns == {("machine-a", "numpy"), ("machine-b", second)}, columns
    devices = [(m["label"], b["name"], b["about"]["device"], b["about"]["version"])
               for m in doc["machines"] for b in m["report"]["backends"]]
    assert [d[:3] for d in devices] == [("machine-a", "numpy", "cpu"),
                                        ("machine-b", second, "cpu")], devices


@pytest.mark.parametrize(("arg", "want"), [
    ("runs/report.json=gpu-box", ("runs/report.json", "gpu-box")),
    ("runs/report.json", ("runs/report.json", None)),
    ("a=b/report.json", ("a=b/report.json", None)),  # an existing file: a path, not a label
])
def test_an_argument_is_a_path_and_the_label_after_its_last_equals_sign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arg: str,
        want: tuple[str, str | None]) -> None:
    from resverify.cli.join import _split

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a=b").mkdir()
    (tmp_path / "a=b" / "report.json").write_text("{}", encoding="utf-8")
    path, label = _split(arg)
    assert (str(path), label) == want, f"_split({arg!r}) = {(str(path), label)}, expected {want}"
