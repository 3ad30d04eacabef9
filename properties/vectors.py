"""Counterexamples as JSON test vectors on disk, and the command that replays one.

The folder is ``resverify-vectors/`` relative to the working directory, unless the pytest
option ``--vector-dir`` or the environment variable ``RESVERIFY_VECTOR_DIR`` names another.
A vector is the failing request as it was sent (the request document of
:func:`resverify.spec.codec.request_to_dict`) plus an optional top-level ``"vector"`` object that
says which property failed on which backend, with its message and failure kind; its file
name carries the property, the backend and a hash of the request, so a rerun overwrites
rather than piles up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from resverify.spec.codec import dumps, request_to_dict
from resverify.spec.request import Request

__all__ = ["backend_for", "replay_command", "save_vector", "vector_dir"]

DEFAULT_DIR = "resverify-vectors"
REPLAY_BACKENDS = ("numpy", "torch")
"""The built-in backends a saved vector's replay may name, in the order tried: numpy, always
installed, then torch, which claims bfloat16 (numpy does not)."""


def vector_dir(option: str | None = None) -> Path:
    """The folder for vectors: the option, else RESVERIFY_VECTOR_DIR, else the default."""
    return Path(option or os.environ.get("RESVERIFY_VECTOR_DIR") or DEFAULT_DIR)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:60] or "backend"


def save_vector(request: Request, folder: Path, prop: str, backend: str,
                message: str | None = None, kind: str = "law",
                extra: Mapping[str, str] | None = None) -> Path:
    """Write ``request`` as JSON into ``folder`` and return the path; with ``message``, the
    file also records the property, the backend, the message and the failure ``kind``, and
    ``extra`` (an exact path's ``path`` and its ``path_replay`` command)."""
    digest = hashlib.sha256(dumps(request).encode()).hexdigest()[:12]
    doc = request_to_dict(request)
    if message is not None:
        doc["vector"] = {"property": prop, "backend": backend, "message": message, "kind": kind,
                         **(extra or {})}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(prop)}-{_slug(backend)}-{digest}.json"
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def backend_for(request: Request) -> str | None:
    """The first of :data:`REPLAY_BACKENDS` whose claims cover ``request`` (its dtype, mode
    and ops) and that is installed here, so its replay judges the request rather than
    answering ``unsupported``; None when none does."""
    from resverify.impl.registry import BUILTINS

    return next((name for name in REPLAY_BACKENDS
                 if BUILTINS[name].capabilities.covers(request) is None
                 and BUILTINS[name].missing() is None), None)


def replay_command(path: Path, backend: str, runs: int | None = None) -> str:
    """The one-line command that runs a saved vector on ``backend`` and prints the diff;
    with ``runs``, that many runs of it (a difference between runs that took that many to
    show: ``resverify replay`` runs 3 by default)."""
    more = "" if runs is None else f" --runs {int(runs)}"
    return f"resverify replay {shlex.quote(str(path))} --backend {shlex.quote(backend)}{more}"
