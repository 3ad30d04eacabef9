"""The one exception root of resverify and the typed errors every layer shares.

User-facing errors also inherit the matching builtin, so callers that only know
``ValueError`` or ``TypeError`` still catch them.
"""

from __future__ import annotations

Shape = tuple[int, ...]


class ResverifyError(Exception):
    """Root of every error resverify raises on purpose."""


class InvalidProgram(ResverifyError, ValueError):
    """A program, request or result that is malformed: refused at construction or load time."""


class ShapeMismatch(ResverifyError, ValueError):
    """``residual_add`` (or a broadcasting op) was given shapes it does not accept."""

    def __init__(self, op: str, left: Shape, right: Shape) -> None:
        self.op = op
        self.left = tuple(left)
        self.right = tuple(right)
        super().__init__(
            f"{op}: shape mismatch {list(self.left)} vs {list(self.right)}"
            + (" (residual_add needs equal shapes; add an explicit projection)"
               if op == "residual_add" else "")
        )


class Unsupported(ResverifyError, NotImplementedError):
    """A backend does not implement an op or dtype it was asked for."""


class UsageError(ResverifyError, ValueError):
    """A user's mistake on the command line or in an option: bad name, bad path."""


class BackendFault(ResverifyError, RuntimeError):
    """A backend misbehaved while running one request, beyond giving wrong numbers.

    ``kind`` classifies the failure for reports: ``timeout`` (no answer in time),
    ``crash`` (the engine's process died), ``bad_result`` (an answer that is not a
    well-formed result: wrong type, shape, dtype, unreadable line). Raised by adapters
    such as :mod:`resverify.impl.external` and caught by the property suite, which turns it into a
    classified failure of that one example; the run goes on.
    """

    kind = "bad_result"


class BackendTimeout(BackendFault):
    """The backend gave no complete answer within its time limit."""

    kind = "timeout"


class BackendCrash(BackendFault):
    """The backend's process died (exited, was killed, or closed its output)."""

    kind = "crash"


class BadResult(BackendFault):
    """The backend answered something that is not a well-formed result for the request."""

    kind = "bad_result"
