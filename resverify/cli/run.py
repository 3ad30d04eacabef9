"""``resverify run REQUEST.json``: run one request on a backend and print the JSON result.

The result is printed as the wire format writes it, every number as ``float.hex`` text
(lossless: signed zeros, subnormals and the last bit survive). ``--decimal`` prints the
same document for people, each number as the shortest decimal that reads back to the same
value in its array's dtype (``"0.1"`` for float32's 0.1), so it is lossless too when read
back as a result of that dtype.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from resverify.impl import resolve_backend
from resverify.spec import UsageError, dumps, loads_request
from resverify.spec.codec import result_to_dict

NAME = "run"
HELP = "run one JSON request on a backend, print the result"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", type=Path, help="a request document (JSON)")
    parser.add_argument(
        "--backend", default="numpy",
        help="numpy (default), any name `resverify backends` lists, module:attr or cmd:COMMAND")
    parser.add_argument(
        "--decimal", action="store_true",
        help="write each number as the shortest decimal that reads back to the same value in "
             "its dtype (\"0.1\", \"-0.0\", \"nan\") instead of the default float.hex text")


def decimal_array(array: np.ndarray) -> dict[str, Any]:
    """``{"shape", "data"}`` with every element as its shortest round-trip decimal string."""
    values = np.asarray(array)
    if values.dtype.kind != "f":
        values = values.astype(np.float64)
    return {"shape": list(values.shape), "data": [str(v) for v in values.ravel()]}


def run(args: argparse.Namespace) -> int:
    try:
        text = args.request.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {args.request}: {exc.strerror}") from None
    request = loads_request(text)
    result = resolve_backend(args.backend).run(request)
    if args.decimal:
        print(json.dumps(result_to_dict(result, request.dtype, decimal_array), sort_keys=True))
    else:
        print(dumps(result, request.dtype))
    return 0
