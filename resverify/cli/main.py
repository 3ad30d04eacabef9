"""The ``resverify`` command.

Each subcommand is a module of this package (``resverify/cli/check.py``, ...) with
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``, listed in
:data:`COMMANDS` in the order ``--help`` shows them. A command module imports its heavy
libraries inside ``run``, so ``resverify --help`` stays light.

Exit codes: 0 everything passed, 1 something failed, 2 a usage error (bad option,
unknown backend, unreadable file), always with a one-line message and no traceback.
Output piped into a reader that stops early (``resverify replay v.json | head``) ends
quietly with exit 1, as the Python documentation recommends for a broken pipe.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from resverify.spec.errors import ResverifyError

COMMANDS = ("check", "run", "replay", "claims", "backends", "vectors", "blocks", "model",
            "join")
"""The commands, each the module ``resverify.cli.<name>``, in the order ``--help`` lists them."""
DEFAULT_COMMAND = "check"


def commands() -> tuple[ModuleType, ...]:
    """The command modules, in :data:`COMMANDS` order."""
    return tuple(importlib.import_module(f"resverify.cli.{name}") for name in COMMANDS)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"resverify: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="resverify", description="Verify residual connections y = x + αF(x).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in commands():
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, DEFAULT_COMMAND)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse said its one line (or printed --help)
        return exc.code if isinstance(exc.code, int) else 2
    command = next(m for m in commands() if args.command == m.NAME)
    try:
        code = int(command.run(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the try, not at exit
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except ResverifyError as exc:
        print(f"resverify: error: {exc}", file=sys.stderr)
        return 2
    return code


def _silence_stdout() -> None:
    """Point stdout at devnull, so Python's flush at exit does not fail on the closed pipe
    again (the recipe of the Python docs, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
