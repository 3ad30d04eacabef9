"""What ``resverify check`` was asked to do, checked once before anything runs.

Every mistake on the command line (an unknown backend or profile, a report folder that
cannot be written, a known-failures file that does not parse) is found
here, before a claim is checked or a process is started, and is a one-line usage error;
so a refused run leaves no report behind. What comes out is a :class:`Request`, which
the rest of the command only reads.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from resverify.impl import Backend, resolve_backend
from resverify.properties import known_failures
from resverify.properties.profiles import PROFILES
from resverify.spec import UsageError

__all__ = []


@dataclass(frozen=True)
class Request:
    """The checked command line: every setting of the run, each in its final form."""

    named: dict[str, Backend]  # each backend as typed on the command line, resolved
    report_dir: Path
    seed: int
    profile: str
    pytest_args: tuple[str, ...]
    suite: str | None = None  # the pytest target of a suite of the user's own
    numprocesses: str | None = None
    junitxml: Path | None = None
    timeout: float = 0.0  # one property test's limit in seconds; 0 for none
    claims: bool = True
    plots: bool = True
    allow_nothing_checked: bool = False
    known_file: Path | None = None
    known: tuple[known_failures.KnownFailure, ...] = ()

    @property
    def backends(self) -> list[Backend]:
        return list(self.named.values())


def read_request(args: argparse.Namespace) -> Request:
    """The :class:`Request` of ``check``'s parsed command line, or a :class:`UsageError`."""
    profile = _check_profile(args.profile)  # the one check of the profile's name
    named = {name: resolve_backend(name) for name in dict.fromkeys(args.backends or ["numpy"])}
    known_file = known_failures.find_file(args.known_failures)
    known = tuple(known_failures.load(known_file)) if known_file is not None else ()
    extra = list(args.pytest_args)
    return Request(
        named=named, report_dir=_report_dir(args.report_dir), seed=args.seed, profile=profile,
        pytest_args=tuple(extra[1:] if extra[:1] == ["--"] else extra), suite=args.suite,
        numprocesses=args.numprocesses,
        junitxml=None if args.junitxml is None else args.junitxml.resolve(),
        timeout=args.timeout, claims=not args.no_claims, plots=not args.no_plots,
        allow_nothing_checked=args.allow_nothing_checked, known_file=known_file, known=known)


def _report_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to report folder {str(path)!r}: "
                         f"{exc.strerror or exc}") from None
    return path.resolve()


def _check_profile(name: str) -> str:
    known = tuple(PROFILES)
    if name not in known:
        raise UsageError(f"unknown profile {name!r}; use one of {list(known)}")
    return name

