"""A backend in another process, in any language, spoken to over JSON lines (``cmd:...``).

Protocol (version 1, see docs/external-protocol.md): the adapter starts the command once
and writes one JSON document per line to its stdin; the engine answers each with exactly
one JSON line on stdout. The first document is a hello, answered with the engine's
capabilities; every later one is a request (``spec.codec``), answered with a result.
Floats travel as ``float.hex`` text both ways, so nothing is lost in transit. A crash, a
timeout or an unreadable answer becomes a ``backend_error`` result, and the engine is
started afresh for the next request.
"""

from __future__ import annotations

import json
import os
import selectors
import shlex
import subprocess
from typing import Any

from impl.backend import Capabilities
from spec.codec import FORMAT_VERSION, request_to_dict, result_from_dict
from spec.errors import InvalidProgram, ResverifyError, UsageError
from spec.request import Request, Result

DEFAULT_TIMEOUT_SECONDS = 60.0


class EngineFailure(ResverifyError, RuntimeError):
    """The external engine died, hung, or answered something that is not a document."""


class ExternalBackend:
    """``cmd:<command line>``: run requests through an engine that speaks the protocol."""

    def __init__(self, command: str, timeout: float | None = None) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.argv = shlex.split(command)
        if not self.argv:
            raise UsageError("cmd: needs a command line, e.g. cmd:'./my-engine --serve'")
        self.timeout = timeout or float(
            os.environ.get("RESVERIFY_CMD_TIMEOUT", DEFAULT_TIMEOUT_SECONDS))
        try:
            hello = self._exchange({"resverify": FORMAT_VERSION, "kind": "hello"}, True)
            if hello.get("kind") != "capabilities":
                raise UsageError(f"{command!r} did not answer the hello with its capabilities")
        except UsageError:
            self.close()
            raise
        self.name = str(hello.get("name", f"cmd:{command}"))
        self.capabilities = Capabilities(
            dtypes=tuple(hello.get("dtypes", ("float64",))),
            ops=tuple(hello.get("ops", Capabilities().ops)),
            device=str(hello.get("device", "external")),
        )

    def run(self, request: Request) -> Result:
        try:
            return result_from_dict(self._exchange(request_to_dict(request)), request.dtype)
        except (EngineFailure, InvalidProgram) as exc:
            self.close()
            return Result.failure("backend_error", f"external engine: {exc}")

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            self._proc = None

    def __del__(self) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        return self._proc

    def _exchange(self, doc: dict[str, Any], start_error: bool = False) -> dict[str, Any]:
        try:
            proc = self._start()
        except OSError as exc:
            raise UsageError(f"cannot start {shlex.join(self.argv)}: {exc.strerror}") from None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(doc) + "\n")
            proc.stdin.flush()
        except OSError as exc:
            raise self._failure(f"stdin closed ({exc.strerror})", start_error) from None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if not selector.select(self.timeout):
                self.close()
                raise self._failure(f"no answer within {self.timeout:g} s", start_error)
        line = proc.stdout.readline()
        if not line:
            raise self._failure(f"exited with status {proc.wait()}", start_error)
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            raise self._failure(f"answered a line that is not JSON: {line[:80]!r}",
                                start_error) from None
        if not isinstance(answer, dict):
            raise self._failure("answered JSON that is not an object", start_error)
        return answer

    def _failure(self, what: str, start_error: bool) -> ResverifyError:
        text = f"{shlex.join(self.argv)}: {what}"
        return UsageError(text) if start_error else EngineFailure(text)
