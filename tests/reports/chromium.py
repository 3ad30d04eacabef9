"""Headless Chromium for the report tests (no tests here): find it, load a page in it,
and read what it logged and which tags the page's DOM holds.

Without Chromium the calling test skips with the reason, except under CI (``CI`` set),
where missing Chromium is a failure: ``.ci/run`` installs it. ``RESVERIFY_CHROMIUM``
names another binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0")


def find_chromium() -> str:
    """The Chromium binary, or a skip (a failure under CI) when there is none."""
    found = os.environ.get("RESVERIFY_CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    reason = "chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run this test, .ci/run installs it")
    pytest.skip(reason)


def browse(chromium: str, page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    """Load ``page`` headless in a fresh ``profile`` folder, with ``extra`` flags
    (``--dump-dom``, ``--screenshot=...``)."""
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    """What the page logged to the console (Chromium's stderr lines of it)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def dom_tags(dom: str) -> list[tuple[str, dict[str, str | None]]]:
    """Every start tag of ``dom`` with its attributes, in order."""
    parser = _Tags()
    parser.feed(dom)
    return parser.tags
