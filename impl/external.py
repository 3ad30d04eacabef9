"""A backend in another process, in any language, spoken to over JSON lines (``cmd:...``).

Protocol (version 1, see docs/external-protocol.md and spec/schema/protocol.schema.json):
the adapter starts the command once and writes one JSON document per line to its stdin;
the engine answers each with exactly one JSON line on stdout. The first document is a
hello, answered with the engine's capabilities; every later one is a request
(``resverify.spec.codec``), answered with a result. Both answers are checked against the schema.

The capabilities may claim forward mode (``"modes": ["vjp", "jvp"]``); without it the
engine is never sent a request with tangents (:meth:`Capabilities.unclaimed` answers it
``unsupported`` here), which keeps every engine written before forward mode working
unchanged. They may also carry the engine's ``version`` and an ``about`` map of numerics
settings, which the report records (:func:`resverify.impl.about.cmd_about`). An answer
whose output tangent is missing for a forward-mode request, or present for another, is a
:class:`~resverify.spec.errors.BadResult`.

The timeout bounds the whole exchange: writing the request and reading a *complete*
answer line, with non-blocking pipes and ``select``, so an engine that hangs, writes half
a line or trickles bytes ends in :class:`~resverify.spec.errors.BackendTimeout` on time. An engine
that exits or closes its output is a :class:`~resverify.spec.errors.BackendCrash`; an answer that
is not a valid result for the request is :class:`~resverify.spec.errors.BadResult`. After any of
them the engine and every process it started (its process group) are killed and reaped,
and the next request starts it afresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shlex
import signal
import subprocess
import time
from typing import Any

from resverify.impl.backend import Capabilities
from resverify.spec.codec import (
    FORMAT_VERSION,
    parse_json,
    request_to_dict,
    result_from_dict,
    validate_message,
)
from resverify.spec.errors import (
    BackendCrash,
    BackendFault,
    BackendTimeout,
    BadResult,
    InvalidInput,
    UsageError,
)
from resverify.spec.request import Request, Result, Value

DEFAULT_TIMEOUT_SECONDS = 60.0
START_SECONDS = 30.0
"""The hello (at start and after every restart) may take this long even when the request
timeout is shorter: an engine may load libraries or devices before it answers."""
MAX_LINE_BYTES = 1 << 30
HELLO = {"resverify": FORMAT_VERSION, "kind": "hello"}


class ExternalBackend:
    """``cmd:<command line>``: run requests through an engine that speaks the protocol."""

    def __init__(self, command: str, timeout: float | None = None) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self.argv = shlex.split(command)
        if not self.argv:
            raise UsageError("cmd: needs a command line, e.g. cmd:'./my-engine --serve'")
        self.timeout = timeout or float(
            os.environ.get("RESVERIFY_CMD_TIMEOUT", DEFAULT_TIMEOUT_SECONDS))
        try:
            hello = self._exchange(HELLO)
            validate_message(hello, "capabilities")
            self.capabilities = _claims(hello)
        except BackendFault as exc:
            self.close()
            raise UsageError(f"{exc} (answering the hello)") from None
        except InvalidInput as exc:
            self.close()
            raise UsageError(f"{self._who()}: bad answer to the hello: {exc}") from None
        except UsageError:
            self.close()
            raise
        self.name = str(hello.get("name", f"cmd:{command}"))
        self.version: str | None = hello.get("version")
        """The engine's version as its hello gave it (None when it gave none)."""
        self.told: dict[str, str] = dict(hello.get("about", {}))
        """The numerics settings the hello's ``about`` gave (empty when it gave none)."""

    @property
    def pid(self) -> int | None:
        """The engine's process id while it runs (None before start and after close)."""
        return None if self._proc is None else self._proc.pid

    def run(self, request: Request) -> Result:
        """The engine's result; raises BackendTimeout, BackendCrash or BadResult."""
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        try:
            doc = self._exchange(request_to_dict(request))
            said = doc.get("dtype", request.dtype) if isinstance(doc, dict) else None
            if said is not None and said != request.dtype:
                raise BadResult(f"{self._who()}: answered {said} for a {request.dtype} request")
            result = result_from_dict(doc, request.dtype)
            if isinstance(result, Value) and (result.tangent is None) == request.forward_mode:
                raise BadResult(f"{self._who()}: {_tangent_mismatch(request)}")
            return result
        except InvalidInput as exc:
            self.close()
            raise BadResult(f"{self._who()}: {exc}") from None
        except BackendFault:
            self.close()
            raise
        except BaseException:  # a time limit or Ctrl-C struck mid-exchange: the engine is
            self.close()  # in an unknown state, and nothing may be left running
            raise

    def close(self) -> None:
        """Kill the engine and everything it started; reap it. Safe to call twice."""
        proc, self._proc, self._pending = self._proc, None, b""
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def __del__(self) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is not None:
            self.close()
        if self._proc is None:
            try:
                self._proc = subprocess.Popen(
                    self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                    start_new_session=True)
            except OSError as exc:
                raise UsageError(
                    f"cannot start {shlex.join(self.argv)}: {exc.strerror}") from None
            for stream in (self._proc.stdin, self._proc.stdout):
                assert stream is not None
                os.set_blocking(stream.fileno(), False)
        return self._proc

    def _exchange(self, doc: dict[str, Any]) -> Any:
        """Send one document, return the parsed answer line (BadResult if not JSON).

        A restarted engine is greeted again before it gets the request, and must claim
        what it claimed at the start (else a request it no longer claims, one with tangents
        say, would be sent to it).
        """
        restarted = self._proc is None or self._proc.poll() is not None
        if restarted and hasattr(self, "capabilities"):
            try:
                hello = self._talk(self._start(), HELLO)
                validate_message(hello, "capabilities")
            except InvalidInput as exc:
                raise BadResult(f"{self._who()}: bad answer to the hello: {exc}") from None
            claims = _claims(hello)
            if claims != self.capabilities:
                raise BadResult(f"{self._who()}: restarted with other capabilities: {claims}, "
                                f"first {self.capabilities}")
        return self._talk(self._start(), doc)

    def _talk(self, proc: subprocess.Popen[bytes], doc: dict[str, Any]) -> Any:
        assert proc.stdin is not None and proc.stdout is not None
        limit = max(self.timeout, START_SECONDS) if doc is HELLO else self.timeout
        deadline = time.monotonic() + limit
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            if self._pending:
                raise BadResult(f"{self._who()}: answered more than one line")
            if selector.select(0) and self._unasked(proc):
                raise BadResult(f"{self._who()}: wrote before it was asked (the protocol "
                                "allows one line a request, sent after the request)")
            self._write(proc, (json.dumps(doc) + "\n").encode(), deadline, limit)
            line = self._read_line(proc, selector, deadline, limit)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise BadResult(f"{self._who()}: answered a line that is not UTF-8") from None
        if self._pending:
            raise BadResult(f"{self._who()}: answered more than one line")
        try:
            return parse_json(text)
        except InvalidInput:
            raise BadResult(
                f"{self._who()}: answered a line that is not JSON: {text[:80]!r}") from None

    def _unasked(self, proc: subprocess.Popen[bytes]) -> bool:
        """True when the engine wrote before it was asked; a crash when it closed its output."""
        assert proc.stdout is not None
        try:
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return False
        if not chunk:
            raise self._crash(proc, "closed its output")
        return True

    def _write(self, proc: subprocess.Popen[bytes], data: bytes, deadline: float,
               limit: float) -> None:
        assert proc.stdin is not None
        view = memoryview(data)
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdin, selectors.EVENT_WRITE)
            while view:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    raise BackendTimeout(
                        f"{self._who()}: did not read its request within {limit:g} s")
                try:
                    view = view[os.write(proc.stdin.fileno(), view):]
                except BlockingIOError:
                    continue
                except OSError as exc:
                    raise self._crash(proc, f"stopped reading ({exc.strerror})") from None

    def _read_line(self, proc: subprocess.Popen[bytes], selector: selectors.BaseSelector,
                   deadline: float, limit: float) -> bytes:
        assert proc.stdout is not None
        buffer = b""
        while b"\n" not in buffer:
            if len(buffer) > MAX_LINE_BYTES:
                raise BadResult(f"{self._who()}: answered a line over {MAX_LINE_BYTES} bytes")
            if not selector.select(max(0.0, deadline - time.monotonic())):
                got = f" ({len(buffer)} bytes of a line)" if buffer else ""
                raise BackendTimeout(
                    f"{self._who()}: no complete answer within {limit:g} s{got}")
            try:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise self._crash(proc, "closed its output")
            buffer += chunk
        line, _, self._pending = buffer.partition(b"\n")
        return line

    def _crash(self, proc: subprocess.Popen[bytes], what: str) -> BackendCrash:
        try:
            status = proc.wait(0.2)
        except subprocess.TimeoutExpired:
            return BackendCrash(f"{self._who()}: {what} and kept running")
        return BackendCrash(f"{self._who()}: exited with status {status}")

    def _who(self) -> str:
        return shlex.join(self.argv)


def _claims(hello: dict[str, Any]) -> Capabilities:
    """The capabilities a valid hello answer claims (modes default to reverse only)."""
    return Capabilities(dtypes=tuple(hello["dtypes"]), ops=tuple(hello["ops"]),
                        device=hello.get("device", "external"),
                        modes=tuple(hello.get("modes", ("vjp",))))


def _tangent_mismatch(request: Request) -> str:
    if request.forward_mode:
        return "answered no output tangent for a request with tangents (forward mode)"
    return "answered an output tangent for a request without tangents"
