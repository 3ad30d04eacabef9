"""Bench section ``exact``: tracing and judging a residual MLP against its own forward+backward.

Why this baseline: the exact judgement (:func:`resverify.blocks.exact.judge_module`) should be
read against what running the module costs. The module is ``x + ½·tanh(x W1) W2`` on
``x`` of batch 32 (``tests.blocks.exact_modules.ResidualMLP``), at width 64 and 256, in
float64 and float32. Per case two rows, each the median over rounds of one run: the trace
(``torch.export``, decompositions, the table; one-off per module and dtype) and the
judgement of every element of the output and every gradient (the enclosures, the budget,
the verdict), each in units of the module's own eager forward+backward (the median of
calibrated repeats, timed between the rounds), torch on one thread throughout.

    .venv/bin/python tools/bench.py --only exact
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from tools.bench_timing import Row, calibrate, per_call

SECTION = "exact"
BATCH = 32
WIDTHS = (64, 256)
DTYPES = ("float64", "float32")


def _forward_backward(width: int, dtype: str) -> Callable[[], object]:
    import torch

    from resverify.blocks.trace import TORCH_DTYPES
    from tests.blocks.exact_modules import ResidualMLP

    kind = TORCH_DTYPES[dtype]
    return forward_backward(ResidualMLP(width).to(kind), torch.randn(BATCH, width, dtype=kind))


def forward_backward(module: Any, x: Any) -> Callable[[], object]:
    """One forward and backward of ``module`` at ``x`` (a cotangent of ones), as a call."""
    import torch

    def once() -> object:
        y = module(x.detach().requires_grad_(True))
        y.backward(torch.ones_like(y))
        return y

    return once


def _rows(width: int, dtype: str, rounds: int) -> list[Row]:
    import torch

    from resverify.blocks.exact import judge_module
    from tests.blocks.exact_modules import ResidualMLP

    passes = _forward_backward(width, dtype)
    calls = calibrate(passes, 0.05)
    module, example = ResidualMLP(width), (torch.zeros(BATCH, width),)
    base, trace, judge = [], [], []
    elements = 0
    for seed in range(rounds):
        base.append(per_call(passes, calls))
        judged = judge_module(module, example, dtype, seed)
        assert judged.passed, str(judged)
        elements = judged.elements
        trace.append(judged.seconds["trace"])
        judge.append(judged.seconds["judge"])
    base.append(per_call(passes, calls))
    fb = statistics.median(base)
    case = f"ResidualMLP width {width}, batch {BATCH}, {dtype}"
    note = f"{elements} elements judged (output and every gradient)"
    return [Row(SECTION, case, "forward+backward", what, fb, statistics.median(spent),
                statistics.median(spent) / max(fb, 1e-12), unit="x baseline", note=note)
            for what, spent in (("trace (one-off)", trace), ("exact judgement", judge))]


def rows(quick: bool = False) -> list[Row]:
    """Two rows (trace, judgement) per width and dtype; ``quick``: width 64, float64, one
    round."""
    import torch

    widths, dtypes = ((WIDTHS[0],), DTYPES[:1]) if quick else (WIDTHS, DTYPES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the block checks run: one thread, steadier on a shared machine
    try:
        return [row for width in widths for dtype in dtypes
                for row in _rows(width, dtype, 1 if quick else 3)]
    finally:
        torch.set_num_threads(threads)
