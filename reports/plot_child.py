"""One backend's plot series, computed in a process of its own.

``resverify check`` draws each plot with one series per checked backend
(:mod:`resverify.reports.plots`). Asking a backend in the checking process would let a
backend that segfaults, calls ``os._exit`` or hangs take the report down with it, which
is why the property suite runs in a child process too; so each backend's series comes
from ``python -m resverify.reports.plot_child --seed N --backend NAME --out FILE``: it
resolves the backend as typed on the command line, runs it on the plots' programs and
writes :func:`resverify.reports.plots.series_document` as JSON. The parent reads the file;
a process that dies or runs too long leaves that backend's series as gaps, with the
reason, and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from resverify.impl.registry import resolve_backend
from resverify.reports.plots import plot_data, series_document

__all__ = []

_NICENESS = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resverify.reports.plot_child")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--backend", required=True, help="the backend as typed for check")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    args = parser.parse_args(argv)
    os.nice(_NICENESS)  # the property suite runs beside it, some tests against a clock
    backend = resolve_backend(args.backend)
    data = plot_data(args.seed, [backend], exact=False)  # the parent draws the exact curves
    doc = {"name": str(backend.name), "plots": series_document(data, str(backend.name))}
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, allow_nan=False), encoding="utf-8")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
