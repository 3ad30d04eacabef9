"""``resverify run`` runs one JSON request; user mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from resverify.reports.cli import main
from resverify.spec import dumps, loads_result
from resverify.spec.fixtures import linear_block_request
from resverify.spec.request import ResultError, Value


def test_run_prints_the_result_of_a_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "req.json"
    path.write_text(dumps(linear_block_request()))
    assert main(["run", str(path)]) == 0
    result = loads_result(capsys.readouterr().out)
    assert isinstance(result, Value) and result.output.tolist() == [1.0, -3.25]


def test_missing_file_unknown_backend_and_bad_json_are_usage_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"resverify": 1, "kind": "request"}))
    good = tmp_path / "good.json"
    good.write_text(dumps(linear_block_request()))
    for argv in (["run", str(tmp_path / "none.json")], ["run", str(bad)],
                 ["run", str(good), "--backend", "nope"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("resverify: error: ") and err.count("\n") == 1, err


def test_run_on_an_unclaimed_dtype_prints_an_unsupported_result(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("autograd")
    path = tmp_path / "req.json"
    path.write_text(dumps(linear_block_request(dtype="bfloat16")))
    assert main(["run", str(path), "--backend", "autograd"]) == 0
    result = loads_result(capsys.readouterr().out)
    assert isinstance(result, ResultError) and result.kind == "unsupported", result


def test_run_labels_a_bfloat16_result_bfloat16(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "req.json"
    path.write_text(dumps(linear_block_request(dtype="bfloat16")))
    assert main(["run", str(path), "--backend", "torch"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dtype"] == "bfloat16", doc


def test_adapter_module_that_raises_on_import_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_at_import.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "req.json"
    path.write_text(dumps(linear_block_request()))
    assert main(["run", str(path), "--backend", "explodes_at_import:B"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err
    assert "ZeroDivisionError" in err, err


def test_engine_whose_hello_misspells_a_dtype_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = tmp_path / "typo_engine.py"
    engine.write_text(
        "import json, sys\nsys.stdin.readline()\n"
        "print(json.dumps({'resverify': 1, 'kind': 'capabilities', 'dtypes': ['f64'], "
        "'ops': ['linear']}), flush=True)\nsys.stdin.read()\n")
    path = tmp_path / "req.json"
    path.write_text(dumps(linear_block_request()))
    backend = f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(engine))}"
    assert main(["run", str(path), "--backend", backend]) == 2
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err
    assert "'f64' is not one of" in err, err


def test_adapter_module_in_the_working_folder_is_found(tmp_path: Path) -> None:
    """``resverify run --backend mymod:Engine`` from the folder holding ``mymod.py`` works
    without PYTHONPATH, as ``python -m pytest`` would find it."""
    (tmp_path / "my_engine_module.py").write_text(
        "from resverify.impl import NumpyBackend\n\n"
        "class Engine(NumpyBackend):\n    name = 'my-engine'\n", encoding="utf-8")
    (tmp_path / "request.json").write_text(dumps(linear_block_request()), encoding="utf-8")
    script = Path(sys.executable).with_name("resverify")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(script), "run", "request.json", "--backend",
                           "my_engine_module:Engine"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert isinstance(loads_result(done.stdout), Value), done.stdout


def test_run_tells_a_shape_invalid_json_request_to_write_a_null_cotangent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad_shapes.json"
    path.write_text(json.dumps({
        "resverify": 1, "kind": "request", "dtype": "float64",
        "program": {"inputs": [{"name": "x", "shape": [2, 2]}, {"name": "b", "shape": [2]}],
                    "nodes": [{"name": "y", "op": "residual_add", "args": ["x", "b"]}],
                    "output": "y"},
        "inputs": {"x": {"shape": [2, 2], "data": [1, 1, 1, 1]},
                   "b": {"shape": [2], "data": [1, 2]}},
        "cotangent": {"shape": [2], "data": [1, 2]}}))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and '"cotangent": null' in err and "None" not in err, \
        f"stderr {err!r}, expected one line saying '\"cotangent\": null'"
