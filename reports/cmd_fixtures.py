"""``resverify check``: for now, run the seed fixtures on a backend and compare them exactly."""

from __future__ import annotations

import argparse
from fractions import Fraction

import numpy as np

from impl import resolve_backend
from spec.fixtures import seed_cases

NAME = "check"
HELP = "check a backend against the seed fixtures"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="numpy", help="numpy (default) or module:attr")


def _flat(array: np.ndarray | None) -> tuple[Fraction, ...]:
    return () if array is None else tuple(Fraction(float(v)) for v in np.ravel(array))


def run(args: argparse.Namespace) -> int:
    backend = resolve_backend(args.backend)
    failures = 0
    for case, (request, output, grads) in seed_cases().items():
        result = backend.run(request)
        got = {"output": _flat(result.output)}
        got.update({k: _flat(v) for k, v in (result.grads or {}).items()})
        for key, expected in {"output": output, **grads}.items():
            ok = got.get(key) == expected
            failures += not ok
            shown = " ".join(str(float(v)) for v in got.get(key, ()))
            print(f"{case}.{key}=[{shown}] {'ok' if ok else 'FAIL'}")
    print(f"backend={backend.name} failures={failures}")
    return 1 if failures else 0
