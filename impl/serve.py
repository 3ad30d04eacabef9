"""Serve any in-process backend over the JSON-lines protocol: ``python -m impl.serve NAME``.

This is the engine side of :mod:`impl.external`, and a worked example for engines in other
languages: read a line, answer a line, flush.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from impl.backend import Backend
from impl.registry import resolve_backend
from spec.codec import FORMAT_VERSION, dumps, request_from_dict
from spec.errors import ResverifyError
from spec.request import Result


def answer(backend: Backend, line: str) -> str:
    """The one-line answer to one protocol line."""
    try:
        doc = json.loads(line)
        if isinstance(doc, dict) and doc.get("kind") == "hello":
            caps = backend.capabilities
            return json.dumps({"resverify": FORMAT_VERSION, "kind": "capabilities",
                               "name": backend.name, "dtypes": list(caps.dtypes),
                               "ops": list(caps.ops), "device": caps.device})
        return dumps(backend.run(request_from_dict(doc)))
    except (ResverifyError, json.JSONDecodeError) as exc:
        return dumps(Result.failure("backend_error", f"bad request: {exc}"))


def serve(backend: Backend, stdin: TextIO, stdout: TextIO) -> None:
    for line in stdin:
        if line.strip():
            stdout.write(answer(backend, line) + "\n")
            stdout.flush()


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "numpy"
    try:
        backend = resolve_backend(name)
    except ResverifyError as exc:
        print(f"resverify serve: error: {exc}", file=sys.stderr)
        return 2
    serve(backend, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
