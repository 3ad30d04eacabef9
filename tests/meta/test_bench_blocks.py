"""``tools/bench.py --only blocks`` (``make bench-blocks``): one row per installed catalog
block, each a check's cost in that block's own forward+backward passes, and one skipped row
with the reason per catalog source that did not import (timings not asserted)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from resverify.blocks.catalog import catalog, skipped
from tools import bench_blocks


def test_block_bench_row_is_the_check_in_forward_backward_passes() -> None:
    rows = bench_blocks.rows(quick=True)
    measured = [row for row in rows if row.ratio is not None]
    first = next(r for r in catalog().values() if bench_blocks.DTYPE in r.dtypes)
    assert [row.case for row in measured] == [f"{first.name}, float32"], rows
    row = measured[0]
    assert row.baseline_s is not None and row.candidate_s is not None, row
    assert row.ratio == row.candidate_s / row.baseline_s and row.unit == "x baseline", row


def test_block_bench_names_every_catalog_source_that_did_not_import() -> None:
    rows = bench_blocks.rows(quick=True)
    notes = {row.case: row.note for row in rows if row.ratio is None}
    expected = {f"{source} blocks": f"skipped: {reason}" for source, reason in skipped().items()}
    assert notes == expected, f"skipped rows {notes}, expected {expected}"
