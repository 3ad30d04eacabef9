"""Counterexamples as JSON test vectors on disk, and the command that replays one.

The folder is ``resverify-vectors/`` relative to the working directory, unless the pytest
option ``--vector-dir`` or the environment variable ``RESVERIFY_VECTOR_DIR`` names another.
A vector is the failing request in :func:`spec.codec.dumps` form; its file name carries
the property, the backend and a hash of the content, so a rerun overwrites rather than
piles up.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path

from spec.codec import dumps
from spec.request import Request

__all__ = ["DEFAULT_DIR", "replay_command", "save_vector", "vector_dir"]

DEFAULT_DIR = "resverify-vectors"


def vector_dir(option: str | None = None) -> Path:
    """The folder for vectors: the option, else RESVERIFY_VECTOR_DIR, else the default."""
    return Path(option or os.environ.get("RESVERIFY_VECTOR_DIR") or DEFAULT_DIR)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:60] or "backend"


def save_vector(request: Request, folder: Path, prop: str, backend: str) -> Path:
    """Write ``request`` as JSON into ``folder`` and return the path."""
    text = dumps(request)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(prop)}-{_slug(backend)}-{digest}.json"
    partial = path.with_suffix(".json.tmp")
    partial.write_text(text + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def replay_command(path: Path, backend: str) -> str:
    """The one-line command that runs a saved vector on ``backend`` and prints the diff."""
    return f"resverify replay {shlex.quote(str(path))} --backend {shlex.quote(backend)}"
