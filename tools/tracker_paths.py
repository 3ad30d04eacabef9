"""Judge the tracker reports' blocks on every path they are about (tests/blocks/tracker_cases.py).

Each case is built (seed 0), traced, and its eager run and every path asked for are judged
against the same exact answer (:func:`resverify.blocks.exact_paths.judge_paths`); prints
the judgement per case and dtype and exits 1 if any path has an element outside its budget.
torch.compile takes tens of seconds a case on two busy cores: run it before resolving, not
in the test suite.

    .venv/bin/python tools/tracker_paths.py                 # every case
    .venv/bin/python tools/tracker_paths.py pytorch#133671  # one
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    from resverify.blocks.exact_paths import judge_paths
    from tests.blocks.tracker_cases import CASES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", help="only these reports (default: all)")
    args = parser.parse_args(argv)
    unknown = set(args.reports) - {c.report for c in CASES}
    if unknown:
        parser.error(f"unknown report(s) {', '.join(sorted(unknown))}; the cases are "
                     f"{', '.join(c.report for c in CASES)}")
    ok = True
    for case in [c for c in CASES if not args.reports or c.report in args.reports]:
        for dtype in case.dtypes:
            torch.manual_seed(0)
            started = time.perf_counter()
            found = judge_paths(case.module(), [torch.zeros(case.shape)], case.paths, dtype)
            print(f"{case.report} {case.module.__name__} {found} "
                  f"[{time.perf_counter() - started:.0f} s in all]", flush=True)
            ok = ok and found.passed
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
