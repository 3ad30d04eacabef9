"""``resverify run`` runs one JSON request; user mistakes are one line and exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from resverify.cli.main import main
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


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["run", *argv]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def data_of(doc: dict[str, object]) -> list[str]:
    """Every number of a result document's arrays, in document order."""
    assert isinstance(doc["output"], dict) and isinstance(doc["grads"], dict), doc
    arrays = [doc["output"], *(doc["grads"][k] for k in sorted(doc["grads"]))]
    return [v for a in arrays for v in a["data"]]


def test_run_prints_lossless_hex_floats_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    numbers = data_of(run_json(capsys, "examples/request.json"))
    assert all(v.startswith(("0x", "-0x")) for v in numbers), \
        f"default output {numbers}, expected float.hex text only"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_run_decimal_prints_shortest_decimals_that_read_back_bit_for_bit(
        dtype: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "req.json"
    request = linear_block_request(dtype=dtype)
    path.write_text(dumps(request))
    hexed = run_json(capsys, str(path))
    decimal = run_json(capsys, str(path), "--decimal")
    assert set(decimal) == set(hexed) and decimal["dtype"] == dtype, (decimal, hexed)
    numbers = data_of(decimal)
    assert numbers and not any("0x" in v for v in numbers), f"--decimal printed {numbers}"
    assert "1.0" in numbers or "-3.25" in numbers, f"--decimal printed {numbers}"
    exact, shown = (loads_result(json.dumps(d), dtype) for d in (hexed, decimal))
    assert isinstance(exact, Value) and isinstance(shown, Value), (exact, shown)
    pairs = [("output", exact.output, shown.output),
             *((f"grads[{k}]", exact.grads[k], shown.grads[k]) for k in exact.grads)]
    for name, want, got in pairs:
        assert want.tobytes() == got.tobytes(), f"{name}: --decimal reads back {got}, not {want}"


def test_run_decimal_keeps_signed_zeros_and_specials(capsys: pytest.CaptureFixture[str]) -> None:
    from resverify.cli.run import decimal_array

    shown = decimal_array(np.array([-0.0, np.inf, -np.inf, np.nan, 0.1, 5e-324]))
    assert shown["data"] == ["-0.0", "inf", "-inf", "nan", "0.1", "5e-324"], shown
    assert decimal_array(np.array([0.1], dtype=np.float32))["data"] == ["0.1"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_decimal_view_reads_back_bit_for_bit_in_every_dtype(dtype: str) -> None:
    from resverify.cli.run import decimal_array
    from resverify.spec.codec import decode_array
    from resverify.spec.request import as_values

    rng = np.random.default_rng(0)
    raw = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-8, 8, 200),
                          [-0.0, 0.0, 1e-40, 6e-8, 65504.0, np.inf]])
    values = as_values(decode_array({"shape": [raw.size], "data": [float(v).hex() for v in raw]},
                                    dtype, "x"), dtype, "x")
    back = decode_array(decimal_array(values), dtype, "x")
    assert back.tobytes() == values.tobytes(), \
        f"{dtype}: {decimal_array(values)['data'][:4]} read back {back[:4]}, not {values[:4]}"


def test_run_help_offers_the_decimal_view(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--decimal" in shown and "hex" in shown, f"run --help says {shown!r}"
