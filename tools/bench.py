"""Where resverify's time goes, every figure a ratio taken in one run (``make bench``).

Why: a suite that is slow is skipped, and an oracle far slower than what it checks keeps
test shapes tiny. This command measures resverify against the baselines a user would
otherwise use or had before (per-element encoding, ``torch.autograd.gradcheck``, a fresh
SymPy derivation, ``python -c pass``, the reference backend), and prints a table, one
row per comparison, with the target from the performance goals and whether it is met.

Every ratio is measured in the same run, interleaved round by round, as the median of
repeats (:mod:`tools.bench_timing`), so a loaded machine changes the
absolute times printed beside it much more than the ratio. ``--only`` picks sections,
``--quick`` makes every section small (a smoke run, its figures not meaningful), and
``--out FILE`` writes the rows as JSON. Rows that need a library that is not installed
(torch for ``gradcheck``) are skipped with the reason. Not part of the test suite, and
not installed (it measures resverify itself):

    .venv/bin/python tools/bench.py --only encoding,symbolic --out bench.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.* as a script

from resverify.spec.errors import UsageError
from tools.command import run_tool

HELP = "measure resverify's speed against baselines (ratios), print a table"

SECTIONS = {
    "example": "tools.bench_example",
    "encoding": "tools.bench_encoding",
    "oracle": "tools.bench_oracle",
    "symbolic": "tools.bench_symbolic",
    "startup": "tools.bench_startup",
    "suite": "tools.bench_suite",
    "blocks": "tools.bench_blocks",
    "exact": "tools.bench_exact",
}
"""Section name -> module with ``rows(quick) -> list[Row]``."""
DEFAULT = ("example", "encoding", "oracle", "symbolic", "startup")
"""Sections run without ``--only`` (``suite`` runs the whole check several times, ``blocks``
checks every catalog block: minutes each; ``make bench-blocks`` runs the latter; ``exact``
traces and judges a residual MLP, about half a minute)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", metavar="SECTIONS",
                        help=f"comma-separated sections out of {','.join(SECTIONS)} "
                             f"(default: {','.join(DEFAULT)})")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and few repeats: checks the command runs, "
                             "figures not meaningful")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the rows as JSON")


def chosen(only: str | None) -> list[str]:
    """The sections named by ``--only`` (validated), or the default ones."""
    if only is None:
        return list(DEFAULT)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise UsageError(f"--only: unknown section(s) {unknown or [only]}; "
                         f"choose from {','.join(SECTIONS)}")
    return list(dict.fromkeys(names))


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_average": load}


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    return f"{value:.3g}"


def table(rows: list[Any]) -> str:
    """The rows as aligned text, one line each, then every row's note."""
    head = ("section", "case", "baseline", "candidate", "base", "cand", "ratio", "target",
            "met")
    body = [(r.section, r.case, r.baseline, r.candidate, _number(r.baseline_s, "s"),
             _number(r.candidate_s, "s"),
             "-" if r.ratio is None else f"{_number(r.ratio)}{r.unit}", r.target,
             {True: "yes", False: "NO", None: "-"}[r.met]) for r in rows]
    widths = [max(len(str(line[i])) for line in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [head, *body]]
    lines += [f"note: {r.section}/{r.case}: {r.note}" for r in rows if r.note]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    names = chosen(args.only)
    rows = []
    for name in names:
        rows += importlib.import_module(SECTIONS[name]).rows(args.quick)
    about = machine()
    print("ratios: baseline time / candidate time, both measured interleaved in this run "
          "(median of repeats); absolute times are for orientation only")
    print(f"machine: {about['processor']}, {about['cpus']} cpus, load {about['load_average']},"
          f" python {about['python']}" + (" [--quick: figures not meaningful]"
                                            if args.quick else ""))
    print(table(rows))
    judged = [r for r in rows if r.met is not None]
    print(f"targets met: {sum(bool(r.met) for r in judged)} of {len(judged)}")
    if args.out is not None:
        doc = {"machine": about, "quick": args.quick, "sections": names,
               "rows": [dataclasses.asdict(r) for r in rows]}
        try:
            args.out.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("tools/bench.py", HELP, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
