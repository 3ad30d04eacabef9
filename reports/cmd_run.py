"""``resverify run REQUEST.json``: run one request on a backend and print the JSON result."""

from __future__ import annotations

import argparse
from pathlib import Path

from resverify.impl import resolve_backend
from resverify.spec import UsageError, dumps, loads_request

NAME = "run"
HELP = "run one JSON request on a backend, print the result"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", type=Path, help="a request document (JSON)")
    parser.add_argument(
        "--backend", default="numpy",
        help="numpy (default), any name `resverify backends` lists, module:attr or cmd:COMMAND")


def run(args: argparse.Namespace) -> int:
    try:
        text = args.request.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {args.request}: {exc.strerror}") from None
    request = loads_request(text)
    print(dumps(resolve_backend(args.backend).run(request), request.dtype))
    return 0
