"""Serve any in-process backend over the JSON-lines protocol.

``python -m resverify.impl.serve NAME`` serves the backend NAME.

This is the engine side of :mod:`resverify.impl.external`, and a worked example for
engines in other languages: read a line, answer a line, flush. The hello is answered with
the backend's claims, its modes among them (a served backend that claims ``jvp`` answers
forward-mode requests), and with its library's version and numerics settings, so a report
on ``cmd:python -m resverify.impl.serve torch`` says which torch ran. Every line received
is checked against the protocol schema; a line that is not a valid hello or request, a
backend that raises, or one whose ``run`` returns something other than a Result, is
answered with a ``backend_error`` result, so the engine itself never dies of a bad line.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from resverify.impl.about import describe_backend
from resverify.impl.backend import Backend
from resverify.impl.registry import resolve_backend
from resverify.spec.codec import (
    FORMAT_VERSION,
    dumps,
    parse_json,
    request_from_dict,
    validate_message,
)
from resverify.spec.errors import ResverifyError
from resverify.spec.request import Result, ResultError


def capabilities_doc(backend: Backend) -> dict[str, object]:
    """The answer to a hello: the backend's name, capabilities (modes included), and what
    :func:`resverify.impl.about.describe_backend` says of it: its library's version as the
    engine's ``version``, the rest as ``about`` (so a report on ``cmd:`` names the library
    that really ran)."""
    caps = backend.capabilities
    about = describe_backend(backend)
    version = about.pop("version")
    for key in ("backend", "device"):  # already in the document as name and device
        about.pop(key)
    return {"resverify": FORMAT_VERSION, "kind": "capabilities", "name": backend.name,
            "dtypes": list(caps.dtypes), "ops": list(caps.ops), "device": caps.device,
            "modes": list(caps.modes), "version": version[:200],
            "about": {k: v[:200] for k, v in list(about.items())[:64]}}


def answer(backend: Backend, line: str) -> str:
    """The one-line answer to one protocol line."""
    try:
        doc = parse_json(line)
        if isinstance(doc, dict) and doc.get("kind") == "hello":
            validate_message(doc, "hello")
            return json.dumps(capabilities_doc(backend))
        request = request_from_dict(doc)
    except ResverifyError as exc:
        return dumps(ResultError("backend_error", f"bad request: {exc}"))
    try:
        result = backend.run(request)
    except Exception as exc:
        return dumps(ResultError("backend_error", f"{type(exc).__name__}: {exc}"))
    if not isinstance(result, Result):
        got = "None" if result is None else type(result).__name__
        return dumps(ResultError("backend_error", f"run() must return a Result, got {got}"))
    return dumps(result, request.dtype)


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
