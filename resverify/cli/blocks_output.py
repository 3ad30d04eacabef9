"""Where ``resverify blocks check`` writes: every output path shown writable before a law
runs (a UsageError, one line, otherwise), and the report's files written there.

Why apart from the command: these are file-system answers, not arguments or lines printed;
the command (:mod:`resverify.cli.blocks`) asks them once before checking and once after.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = []


def _writable(path: Path, what: str, folder: bool = False) -> Path:
    """``path`` (a file, or a ``folder``), once the folder exists and takes a file; a
    UsageError (one line) when it cannot be written."""
    import os
    import tempfile

    from resverify.spec.errors import UsageError

    where = path if folder else path.parent
    try:
        if not folder and path.is_dir():
            raise IsADirectoryError(21, "is a folder")
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=where, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"cannot write {what} {str(path)!r}: {exc.strerror or exc}") from None
    return path


def add_output_arguments(parser: argparse.ArgumentParser, default_dir: Path) -> None:
    """The arguments :func:`outputs` reads: ``--report-dir`` (default ``default_dir``),
    ``--json``, ``--md``, ``--html`` and ``--no-plots``."""
    parser.add_argument("--report-dir", type=Path, default=default_dir, metavar="DIR",
                        help=f"where report.json, .md, .html, the plots and the vectors go "
                        f"(default {default_dir})")
    for suffix in ("json", "md", "html"):
        parser.add_argument(f"--{suffix}", type=Path, default=None, metavar="PATH",
                            help=f"write report.{suffix} here instead (default: in "
                            "--report-dir)")
    parser.add_argument("--no-plots", action="store_true", help="leave the PNG plots out")


def outputs(args: argparse.Namespace) -> dict[str, Path]:
    """Where each file goes: ``json``, ``md``, ``html`` and the ``folder`` (the vectors,
    the plots), every one writable, checked before a law runs."""
    folder: Path = args.report_dir
    out = {"folder": _writable(folder, "to report folder", folder=True)}
    for suffix in ("json", "md", "html"):
        given = getattr(args, suffix)
        out[suffix] = _writable(given if given is not None else folder / f"report.{suffix}",
                                f"the --{suffix} report")
    return out


def write(doc: dict[str, Any], out: dict[str, Path], with_plots: bool) -> list[Path]:
    from resverify.reports.writer import PLOTS_DIR, write_files
    from resverify.spec.errors import UsageError

    try:
        return write_files(doc, json_path=out["json"], md_path=out["md"], html_path=out["html"],
                           plots_dir=out["folder"] / PLOTS_DIR if with_plots else None)
    except OSError as exc:
        raise UsageError(f"cannot write the report: {exc.strerror or exc} "
                         f"({exc.filename or out['folder']})") from None
