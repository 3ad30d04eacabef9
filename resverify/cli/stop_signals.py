"""How a stop signal ends ``resverify check``: once, and never in the middle of a report.

A person presses Ctrl-C (SIGINT), a CI runner or ``timeout`` sends SIGTERM; either way
the run must stop soon and still leave the report of what finished. Python turns only
SIGINT into an exception, and a second one would cut the report's writing short, so
:class:`StopSignals` handles both signals the same way for the length of a run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from resverify.cli.runner import Interrupted

__all__ = []


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM (CI runners, ``timeout``) end a run the same way.

    The first one raises :class:`Interrupted` (a KeyboardInterrupt) while the run goes on;
    a later one, or one that comes while the reports are written, is recorded and changes
    nothing: the reports are always written whole. When a signal arrived, both are ignored
    from then on (the process is ending; Python restores the default handlers while it
    shuts down, so a late Ctrl-C would otherwise kill it); otherwise the previous handlers
    are restored.
    """

    STOP = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: str | None = None
        self.raising = True
        self.previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._handle) for sig in self.STOP}
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.raising = False
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if self.received is None else signal.SIG_IGN)

    def _handle(self, signum: int, frame: object) -> None:
        first = self.received is None
        self.received = self.received or signal.Signals(signum).name
        if first and self.raising:
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No signal interrupts what runs inside (it is still recorded)."""
        raising, self.raising = self.raising, False
        try:
            yield
        finally:
            self.raising = raising
