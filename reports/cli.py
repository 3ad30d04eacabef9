"""The ``resverify`` command.

Exit codes: 0 everything passed, 1 something failed, 2 a usage error (bad option,
unknown backend, unreadable file), always with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from impl import resolve_backend
from spec import ResverifyError, dumps, loads_request
from spec.fixtures import seed_cases


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"resverify: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="resverify", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    check = sub.add_parser("check", help="check a backend against the seed fixtures")
    check.add_argument("--backend", default="numpy", help="numpy (default) or module:attr")
    run = sub.add_parser("run", help="run one JSON request on a backend, print the result")
    run.add_argument("request", type=Path)
    run.add_argument("--backend", default="numpy")
    return parser


def _flat(array: np.ndarray | None) -> tuple[Fraction, ...]:
    return () if array is None else tuple(Fraction(float(v)) for v in np.ravel(array))


def _check(backend_name: str) -> int:
    backend = resolve_backend(backend_name)
    failures = 0
    for case, (request, output, grads) in seed_cases().items():
        result = backend.run(request)
        got = {"output": _flat(result.output)}
        got.update({k: _flat(v) for k, v in (result.grads or {}).items()})
        want = {"output": output, **grads}
        for key, expected in want.items():
            ok = got.get(key) == expected
            failures += not ok
            shown = " ".join(str(float(v)) for v in got.get(key, ()))
            print(f"{case}.{key}=[{shown}] {'ok' if ok else 'FAIL'}")
    print(f"backend={backend.name} failures={failures}")
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            try:
                text = args.request.read_text()
            except OSError as exc:
                raise ResverifyError(f"cannot read {args.request}: {exc.strerror}") from None
            print(dumps(resolve_backend(args.backend).run(loads_request(text))))
            return 0
        return _check(getattr(args, "backend", "numpy"))
    except ResverifyError as exc:
        print(f"resverify: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
