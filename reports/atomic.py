"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Each write goes to a temporary file in the destination folder (same filesystem), is
flushed to disk, then renamed over the target with :func:`os.replace`, which is atomic
on POSIX and Windows. An interrupted run therefore never leaves a truncated report.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_text"]


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, _mode(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mode(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets what the umask allows."""
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step."""
    write_bytes(path, text.encode("utf-8"))
