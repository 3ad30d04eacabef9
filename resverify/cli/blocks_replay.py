"""``resverify blocks replay NAME --law L --dtype D --mode M --example ...``: one failure again.

A failing law record of ``resverify blocks check`` (its report, its line in
``pytest_check``'s message) prints this command: the block as the check named it (a
catalog name, or ``module:RECIPE`` with ``--block`` picking one of several recipes there),
the law, dtype and mode, and the failing example as shrunk (``--example``,
:func:`resverify.blocks.replay.example_text`). The command rebuilds that block, perturbs it
and draws its inputs from the example's seed, judges the law on that one example
(:func:`resverify.blocks.replay.replay_example`) and prints the record's line.

Exit status: 0 when the law holds on the example (the failure no longer happens), 1 when
it fails (the line is the failure's message) or judged nothing (``unjudged``: the reason,
one line; never 0 for a replay that checked nothing), 2 on a usage error (an unknown block,
law, dtype, mode or a malformed example), one line.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resverify.blocks.recipe import Recipe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME",
                        help="the block as `resverify blocks check` named it: a catalog name "
                        "or module:RECIPE")
    parser.add_argument("--block", default=None, metavar="RECIPE_NAME",
                        help="which recipe, when module:RECIPE holds several")
    parser.add_argument("--law", required=True, metavar="LAW", help="the law to judge")
    parser.add_argument("--dtype", required=True, metavar="DTYPE", help="the dtype")
    parser.add_argument("--mode", default="eval", metavar="MODE",
                        help="eval or train (default eval)")
    parser.add_argument("--example", required=True, metavar="SPEC",
                        help="the failing example as the failure printed it: "
                        "batch=N,seq=N,seed=N,weight_exp=N,input_exp=N")
    parser.add_argument("--paths", default="", metavar="LIST",
                        help="the paths law's paths, comma-separated (compile, fastpath)")


def _recipe(name: str, block: str | None) -> Recipe:
    """The one recipe ``name`` (and ``block``) select; a UsageError, one line, otherwise."""
    from resverify.cli.block_selection import select
    from resverify.spec.errors import UsageError

    chosen = [s.recipe for s in select([name], False)]
    if block is not None:
        chosen = [r for r in chosen if r.name == block]
        if not chosen:
            raise UsageError(f"{name} holds no recipe named {block!r}")
    if len(chosen) != 1:
        raise UsageError(f"{name} holds {len(chosen)} recipes "
                         f"({', '.join(r.name for r in chosen)}); pick one with --block NAME")
    return chosen[0]


def run(args: argparse.Namespace) -> int:
    from resverify.blocks.check import replay_example
    from resverify.blocks.replay import example_text, parse_example

    draw = parse_example(args.example)
    recipe = _recipe(args.name, args.block)
    paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    print(f"replaying {recipe.name} {args.law} [{args.dtype}, {args.mode}] on the example "
          f"{example_text(draw)}", flush=True)
    record = replay_example(recipe, args.law, args.dtype, args.mode, draw, paths)
    print(record.line())  # unjudged: the reason, and the exit is 1 (nothing checked)
    return 0 if record.verdict == "pass" else 1
