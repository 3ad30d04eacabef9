"""``tools/bench.py --only exact``: per width and dtype, the trace and the exact judgement of
the residual MLP, each in units of its own forward+backward (timings not asserted)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tools import bench_exact


def test_exact_bench_rows_are_trace_and_judgement_in_forward_backward_passes() -> None:
    rows = bench_exact.rows(quick=True)
    assert [row.candidate for row in rows] == ["trace (one-off)", "exact judgement"], rows
    for row in rows:
        assert row.baseline_s is not None and row.candidate_s is not None, row
        assert row.ratio == row.candidate_s / row.baseline_s and row.unit == "x baseline", row
        assert row.case == "ResidualMLP width 64, batch 32, float64", row
