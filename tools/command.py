"""The command line of the tools that measure resverify itself (``tools/mutants.py``,
``tools/bench.py``): they are not ``resverify`` subcommands, since they are not installed,
but they answer as one does. A bad option is argparse's one line and exit 2, a resverify
error (an unknown mutant, a folder that does not exist) one line and exit 2, never a
traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from resverify.spec.errors import ResverifyError

__all__ = ["run_tool"]


def run_tool(prog: str, description: str,
             add_arguments: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace], int], argv: Sequence[str] | None) -> int:
    """Parse ``argv`` (``sys.argv[1:]`` when None) with the tool's options, then run it;
    the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse said its one line (or printed --help)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(run(args))
    except ResverifyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
