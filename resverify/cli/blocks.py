"""``resverify blocks``: the catalog of shipped residual blocks, and checking them.

``resverify blocks`` (or ``resverify blocks list``) lists every block of
:mod:`resverify.blocks.catalog`: what its recipe declares
(:func:`resverify.blocks.recipe.describe`: the input, the dtypes, stream dtype and modes,
per site the norm placement, zeroing parameters, LayerScale γ, drop path, shortcut and
activation), its library and version, and the laws that apply; a library that is missing
is one line with the reason its blocks are skipped.

``resverify blocks check NAME... | --all`` judges every applicable law of each block (a
NAME with a colon, ``module:RECIPE``, is a user's own :class:`~resverify.blocks.Recipe`
imported from the working folder or the environment, :func:`user_recipes`)
(:func:`resverify.blocks.runs.check_recipe`, each law by :func:`resverify.blocks.check.run_law`)
in each dtype it claims (``--dtype``, repeatable,
keeps only those) under a Hypothesis profile of the suite (``--profile``, default ``ci``:
its example count; ``--seed``, default the suite's CI seed; ``--paths compile,fastpath``
adds the paths law on those paths, :mod:`resverify.blocks.laws_paths`), printing one line per block,
law, dtype and mode as it goes (verdict, examples, seconds). The plots draw the figures the
zero_branch and affine_in_gamma laws return (figures, never verdicts), and the
report goes into ``--report-dir`` (default ``resverify-report/blocks``): the report
``resverify check`` writes, with a blocks section and no backend
(:func:`resverify.reports.json_report.blocks_report`): ``report.json``
(``reports/schema/report.schema.json``), ``report.md``, ``report.html`` (or the paths of
``--json``, ``--md``, ``--html``) and the PNGs under ``plots/`` (``--no-plots`` leaves them
out), each file written atomically (:func:`resverify.cli.blocks_output.write`). A failing
law's merge is saved as a vector under ``vectors/`` there, with its ``resverify replay``
command.

Every recipe names its block adapter (:attr:`resverify.blocks.recipe.Recipe.adapter`: a torch
module's, or a Haiku block's), through which the one driver (:mod:`resverify.blocks.check`)
says the laws that apply, validates and checks the block: the command never asks
which library a block comes from.

``resverify blocks check --exact NAME... | --all`` traces each torch block into the IR and
judges every element of its output and gradients against the exact oracle instead of the
laws (:mod:`resverify.cli.blocks_exact`): the same report files, their ``exact`` section
in place of the blocks section, each request judged saved as a vector; ``--paths`` with it
runs each path named on the same inputs and judges it against the same exact answer
(:mod:`resverify.blocks.exact_paths`).

A law that the block's recipe documents as failing (its ``findings``: a library's choice
written up in ``docs/findings/``) is reported ``expected`` when it fails as written up, and
``fixed`` when it passes (the finding no longer holds: remove it from the recipe); the
verdicts are :mod:`resverify.reports.verdicts`'.

Why subcommands: listing is the command's default (``resverify blocks`` alone answers "what
is there"), and ``check`` takes names that hold brackets and dots, so a name is never taken
for an action.

Ctrl-C (or SIGTERM) stops the check and still writes the report of the blocks that
finished, marked ``interrupted``. Exit codes follow the report's ``status``: 0 (``pass``)
every law passed or failed as a documented finding; 1 a law failed, a documented finding is
``fixed``, a law judged nothing (no verdict without evidence: the run is ``partly judged``
when other laws held, ``unjudged`` when none judged anything), or the run was
interrupted; 2
a usage error, one line: an unknown block name (with the close names), a dtype or profile
that does not exist, a recipe the module contradicts (the recipe's own line), a report path
that cannot be written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from resverify.cli.block_selection import Selected, select
from resverify.cli.blocks_output import add_output_arguments

if TYPE_CHECKING:
    from resverify.blocks.check import LawRecord
    from resverify.blocks.recipe import Recipe
    from resverify.blocks.runs import Options
    from resverify.reports.blocks import BlockRun

NAME = "blocks"
HELP = "list the catalog of shipped residual blocks, or check blocks against the residual laws"
DEFAULT_DIR = Path("resverify-report") / "blocks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="list the catalog and what each recipe declares (default)")
    check = actions.add_parser("check", help="check blocks against every applicable law")
    check.add_argument("names", nargs="*", metavar="NAME",
                       help="block names as listed (quote them: they hold brackets)")
    check.add_argument("--all", action="store_true", help="check every block of the catalog")
    check.add_argument("--dtype", action="append", default=[], metavar="DTYPE",
                       help="only this dtype (repeatable; default: every dtype the block "
                       "claims)")
    check.add_argument("--law", action="append", default=[], metavar="LAW",
                       help="only this law (repeatable; default: every law that applies)")
    check.add_argument("--profile", default="ci", metavar="NAME",
                       help="the suite's Hypothesis profile, for its example count and shrink cap "
                       "(dev 5, ci 25, extremes 100, thorough 400; default ci)")
    check.add_argument("--seed", type=int, default=None, metavar="N",
                       help="Hypothesis seed (default: the suite's CI seed, 0)")
    add_output_arguments(check, DEFAULT_DIR)
    check.add_argument("--exact", action="store_true",
                       help="instead of the laws, trace each block into the IR and judge its "
                       "output and every gradient against the exact oracle (pointwise: the "
                       "inputs drawn); a block the IR cannot express is listed with the ATen "
                       "ops it lacks")
    check.add_argument("--paths", default="", metavar="LIST",
                       help="also judge the paths law on these paths, comma-separated: "
                       "compile (torch.compile, inductor: a minute or more a block and dtype "
                       "the first time), fastpath (torch's fused inference kernels); with "
                       "--exact, each path is judged against the same exact answer, and "
                       "sdpa-math, sdpa-flash (scaled-dot-product attention's backends) and "
                       "hf-sdpa (Hugging Face's attn_implementation='sdpa') may be named too; "
                       "default none")
    from resverify.cli import blocks_replay

    blocks_replay.add_arguments(actions.add_parser(
        "replay", help="judge a law again on one failing example of a block (the command "
                       "a failure prints)"))


def run(args: argparse.Namespace) -> int:
    require_torch()
    if args.action == "check":
        return _check(args)
    if args.action == "replay":
        from resverify.cli import blocks_replay

        return blocks_replay.run(args)
    return _list()


def require_torch() -> None:
    """Every block check drives torch (a JAX block's recipe too), so without it the command
    stops with one line that says what to install."""
    from importlib.util import find_spec

    from resverify.spec.errors import UsageError

    if find_spec("torch") is None:
        raise UsageError("resverify blocks needs torch, which is not installed: make blocks "
                         "(torch, transformers, dm-haiku), or pip install -c constraints.txt "
                         "'resverify[torch]' from the checkout (the constraint keeps torch's "
                         "CPU build; docs/blocks-install.md)")


# -- the catalog ---------------------------------------------------------------------------

def _list() -> int:
    from resverify.blocks.catalog import catalog, skipped
    from resverify.blocks.check import laws_of
    from resverify.blocks.library import LIBRARIES, library_of
    from resverify.blocks.recipe import describe

    for recipe in catalog().values():
        library, version = library_of(recipe)
        stream = "" if recipe.stream_dtype else "; the stream in the dtype checked"
        print("\n".join(describe(recipe)))
        print(f"  {library} {version or 'version unknown'}{stream}; laws "
              f"{' '.join(laws_of(recipe))}")
    for source, reason in skipped().items():
        print(f"{source}: skipped ({LIBRARIES.get(source, source)} missing: {reason})")
    return 0


# -- checking ------------------------------------------------------------------------------

def _progress(record: LawRecord, seconds: float, recipe: Recipe) -> str:
    """A record's line: its verdict as the report decides it (a documented finding's failure
    ``expected``, its pass ``fixed``), examples, seconds and message or finding."""
    from resverify.blocks.check import examples_text
    from resverify.reports.verdicts import block_law_verdict

    found = recipe.findings.get(record.law)
    kind = record.failure.kind if record.failure is not None else None
    verdict = block_law_verdict(record.verdict, kind, None if found is None else found.kind)
    tail = f": {record.message}" if record.message else ""
    if found is not None and verdict == "expected":
        tail = f": documented finding, {found.doc}"
    elif found is not None and verdict == "fixed":
        tail = f": passes, but the recipe documents it as failing ({found.doc}); remove the " \
            "finding"
    return (f"{record.block}  {record.law:<15} {record.dtype:<8} {record.mode:<5} "
            f"{verdict:<8} {examples_text(record):>13} {seconds:7.2f} s{tail}")


def _say(line: str) -> None:
    print(line, flush=True)  # as it comes, into a pipe (a CI log) too


def check_one(recipe: Recipe, chosen: Options, vectors: Path, say: Callable[[str], None] = _say,
              named: Selected | None = None) -> BlockRun:
    """``recipe``'s check under ``chosen`` (:func:`resverify.blocks.runs.check_recipe`), each
    record said as it comes; a failure's example kept with the command that replays it
    (naming the recipe as ``named`` says, else by its name), and a failure at a merge saved
    as a vector under ``vectors``."""
    from resverify.blocks.library import source_of
    from resverify.blocks.runs import check_recipe
    from resverify.reports.blocks import BlockRun

    one = named or Selected(recipe, source_of(recipe), recipe.name)
    done = check_recipe(recipe, chosen, vectors, (one.selector, one.block),
                        lambda record, seconds: say(_progress(record, seconds, recipe)))
    return BlockRun(recipe, one.source, done.library, done.version, done.run.records,
                    done.run.seconds, done.run.saved, done.run.replays)


def _check(args: argparse.Namespace) -> int:
    from resverify.blocks.catalog import skipped
    from resverify.blocks.runs import options, steps, validate_all
    from resverify.cli.blocks_output import outputs, write
    from resverify.cli.runner import signal_name
    from resverify.cli.stop_signals import StopSignals
    from resverify.reports import blocks as report
    from resverify.reports.json_report import blocks_report

    chosen = select(args.names, args.all)
    asked = options(args.profile, args.seed, args.dtype, args.law,
                    "" if args.exact else args.paths)
    out = outputs(args)
    if args.exact:
        from resverify.cli.blocks_exact import check_exact, exact_paths

        return check_exact(chosen, asked.dtypes, asked.seed, out, not args.no_plots,
                           paths=exact_paths(args.paths))
    validate_all((c.recipe for c in chosen), asked.dtypes, asked.seed)
    runs: list[BlockRun] = []
    interrupted = None
    with StopSignals() as signals:
        try:
            for one in chosen:
                if not any(True for _ in steps(one.recipe, asked.dtypes, asked.paths,
                                               asked.laws)):
                    laws = f" or laws {asked.laws}" if asked.laws else ""
                    print(f"{one.recipe.name}: claims none of the dtypes {asked.dtypes}{laws}; "
                          "not checked")
                    continue
                runs.append(check_one(one.recipe, asked, out["folder"] / "vectors",
                                      named=one))
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: report what finished
            interrupted = signal_name(exc)
        with signals.held():
            section = report.section(runs, profile=asked.profile, seed=asked.seed,
                                     examples=asked.examples,
                                     skipped=skipped() if args.all else {},
                                     interrupted=interrupted)
            doc = blocks_report(section, seconds=sum(sum(r.seconds) for r in runs))
            written = write(doc, out, not args.no_plots)
    counts = section["counts"]
    stopped = f"interrupted ({interrupted}) after " if interrupted else ""
    print(f"{stopped}{report.count(len(runs), 'block')}, {sum(counts.values())} law records: "
          f"{counts['pass']} pass, {counts['fail']} fail, {counts['unjudged']} unjudged, "
          f"{counts['expected']} expected, {counts['fixed']} fixed; {doc['status']}; "
          f"report: {out['html']} ({len(written)} files)")
    return 0 if doc["status"] == "pass" else 1
