"""``resverify blocks check --exact NAME... | --all``: each block traced into the IR and judged
against the exact oracle (:func:`resverify.blocks.exact.judge_recipe`).

For each block and each dtype it claims (``--dtype`` keeps only those), one line: the
verdict on every element of the output and of every gradient (the input's, each
parameter's), the tightness of the budgets (median, 99th percentile and maximum of
``|error| / bound``) and the seconds; the verdict is pointwise (the inputs drawn from
``--seed``). Under it, the local verdict (:mod:`resverify.blocks.local`): how many ops of
the traced graph were judged alone on the module's own intermediate values, the tightness of
their one-step budgets, the first op out of its budget (``first op out of budget: addmm
(aten.addmm.default), 53 of 128 elements, |error|/bound max 29.6``), and whether the graph's
run matched the eager one bitwise. A block fails when either verdict fails. A block the IR
cannot express yet is one line listing the ATen ops that stop it
(:class:`~resverify.blocks.lower.NotInIR`); its other dtypes are still judged (what the
trace records can differ by dtype: T5's float64 layer adds a float32 constant that is not
exact in float32, its float32 and bfloat16 layers trace).

Each request judged (the traced program, the module's parameters, the drawn input and
cotangent) is saved as a vector under ``<report-dir>/vectors/exact/``, so an engine in any
language can be judged on the same real layer (``resverify replay PATH --backend NAME``, or
``resverify vectors run`` style through the external protocol); a failing block's line is
followed by its vector and that command. Its ``vector`` record names the block, the dtype
and the verdict line.

The report: the judgements go into the report ``resverify blocks check`` writes, as its
``exact`` section (:func:`resverify.reports.exact.section`, in ``--report-dir`` or the paths
of ``--json``, ``--md``, ``--html``; the plot of the distribution of ``|error| / bound``
under ``plots/`` unless ``--no-plots``), written by the one writer of every report. Per
block and dtype it holds the verdict, elements judged of the total, the tightness, the
local judgement, graph vs eager, the seconds, the vector and its replay command; a block
not traced is ``unjudged`` with the ops that stopped it. Ctrl-C (or SIGTERM) stops the
judging and still writes the report of what finished, marked interrupted.

Exit status: 0 when every block judged passed (blocks that cannot be traced do not fail the
run: they were not judged; the report's status says ``partly judged`` then), 1 when an
element of some block is outside its budget or an op outside its own, or the run was
interrupted, 2 on a usage error.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from resverify.blocks.exact import Judgement
    from resverify.blocks.exact_paths import PathJudgement
    from resverify.blocks.recipe import Recipe
    from resverify.cli.block_selection import Selected
    from resverify.reports.exact import ExactRun

__all__: list[str] = []

EAGER = "eager"
"""The path every exact judgement runs; ``--paths`` may name it."""


def _judged(recipe: Recipe, dtype: str, seed: int, folder: Path, say: Callable[[str], None],
            paths: Sequence[str] = ()) -> dict[str, Any]:
    """One judgement, said as its lines, saved as a vector under ``folder``; as the report
    holds it (with its ``vector`` and ``replay`` command, and each of ``paths`` judged
    against the same exact answer). Raises NotInIR."""
    from resverify.blocks.exact import judge_recipe
    from resverify.blocks.exact_paths import judge_recipe_paths

    found = judge_recipe_paths(recipe, paths, dtype, seed) if paths else None
    judgement = judge_recipe(recipe, dtype, seed) if found is None else found.eager
    lines = [f"{recipe.name}  {judgement} [{sum(judgement.seconds.values()):.2f} s]"]
    lines += [f"  {path}" for path in (() if found is None else found.paths)]
    doc = saved_doc(recipe.name, judgement, judgement.as_doc(), lines, folder, say)
    if found is not None:
        doc["paths"] = [_path_doc(recipe.name, judgement, p, seed, folder, say)
                        for p in found.paths]
    return doc


def saved_doc(name: str, judgement: Judgement, doc: dict[str, Any], lines: Sequence[str],
              folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """``judgement`` of ``name`` said as ``lines`` and saved as a vector under ``folder`` (a
    failure's line followed by its vector and the command that replays it); ``doc`` (its
    report entry) with the ``vector`` and ``replay`` command added."""
    from resverify.blocks.exact_check import replayed, save_judgement
    from resverify.properties.vectors import backend_for, replay_command

    for line in lines:
        say(line)
    saved = save_judgement(name, judgement, folder)
    if not judgement.passed:
        say(f"  vector {saved}{replayed(saved, judgement)}")
    assert judgement.request is not None
    backend = backend_for(judgement.request)
    return {**doc, "vector": str(saved),
            "replay": replay_command(saved, backend) if backend else None}


def _path_doc(name: str, judgement: Judgement, path: PathJudgement, seed: int, folder: Path,
              say: Callable[[str], None]) -> dict[str, Any]:
    """A path as the report holds it; a failing one's request saved as a vector naming the
    path, with the command that judges the block on that path again (said under its line)."""
    from resverify.blocks.exact_check import save_path

    doc = path.as_doc()
    if path.verdict == "fail":
        replay = path_replay(name, judgement.dtype, seed, path.path)
        saved = save_path(name, judgement, path.path, doc["line"], replay, folder)
        say(f"    vector {saved}; replay the path: {replay}")
        doc |= {"vector": str(saved), "replay": replay}
    return doc


def path_replay(name: str, dtype: str, seed: int, path: str) -> str:
    """The command that judges ``name`` on ``path`` again, on the same draw."""
    return (f"resverify blocks check --exact {shlex.quote(name)} --dtype {dtype} --seed {seed} "
            f"--paths {path}")


def judge_block(one: Selected, dtypes: Sequence[str], seed: int, folder: Path,
                say: Callable[[str], None] = print, paths: Sequence[str] = ()) -> ExactRun:
    """``one``'s block judged in each of its (chosen) dtypes, each line said as it comes;
    a dtype the IR cannot express is one line and ``not_traced`` (the first such; the
    block's other dtypes are still tried), a block that is not a torch module one line. On
    Ctrl-C the dtypes judged so far go with the KeyboardInterrupt (``finished``), for
    :func:`run_exact` to report."""
    from resverify.blocks.library import library_of
    from resverify.blocks.lower import NotInIR
    from resverify.reports.exact import ExactRun

    recipe = one.recipe
    library, version = library_of(recipe)
    chosen = [d for d in recipe.dtypes if not dtypes or d in dtypes]
    judged: list[dict[str, Any]] = []
    refused: dict[str, Any] | None = None
    if recipe.adapter != "torch":
        refused = {"dtype": None, "ops": [], "nodes": 0,
                   "reason": "the exact judgement traces torch modules only"}
        say(f"{recipe.name}: not traced, {refused['reason']}")
    for dtype in chosen if refused is None else ():
        try:
            judged.append(_judged(recipe, dtype, seed, folder, say, paths))
        except NotInIR as exc:
            refused = refused or {"dtype": dtype, "ops": exc.ops, "nodes": len(exc.refused),
                                  "reason": str(exc)}
            say(f"{recipe.name} {dtype}: not traced, the IR lacks {', '.join(exc.ops)} "
                f"({len(exc.refused)} nodes)")
        except KeyboardInterrupt as exc:  # the dtypes judged before it are kept
            if judged:
                exc.finished = ExactRun(  # type: ignore[attr-defined]
                    recipe.name, one.source, library, version, judged, refused)
            raise
    return ExactRun(recipe.name, one.source, library, version, judged, refused)


def exact_paths(listed: str) -> list[str]:
    """``--paths`` under ``--exact``: the comma-separated paths, each one
    :mod:`resverify.blocks.exact_paths` runs (a UsageError names an unknown one); ``eager``
    is accepted and dropped, the eager path being the judgement itself, always made."""
    from resverify.blocks.exact_paths import PATHS
    from resverify.spec.errors import UsageError

    paths = [p.strip() for p in listed.split(",") if p.strip() and p.strip() != EAGER]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise UsageError(f"--paths: unknown path(s) {', '.join(unknown)} under --exact; "
                         f"choose from {EAGER}, {', '.join(PATHS)}")
    return paths


def summary(runs: Sequence[ExactRun], folder: Path) -> str:
    """The run's last line: judgements, failures, partial ones, blocks not traced, and the
    paths judged and failed (``--paths``)."""
    rows = [j["verdict"] for r in runs for j in r.judged]
    paths = [p["verdict"] for r in runs for j in r.judged for p in j.get("paths", ())]
    refused = sum(r.not_traced is not None for r in runs)
    saved = f"; requests saved under {folder}" if rows else ""
    on_paths = (f"; {len(paths) - paths.count('unjudged')} paths judged "
                f"({paths.count('fail')} fail, {paths.count('unjudged')} not run)"
                if paths else "")
    return (f"exact: {len(rows)} judged ({rows.count('fail')} fail, "
            f"{rows.count('partly judged')} partly judged), {refused} blocks not traced"
            f"{on_paths}; pointwise verdicts (the inputs drawn){saved}")


def check_exact(chosen: Sequence[Selected], dtypes: Sequence[str], seed: int,
                out: dict[str, Path], with_plots: bool, say: Callable[[str], None] = print,
                paths: Sequence[str] = ()) -> int:
    """Judge each chosen block in each of its (chosen) dtypes, saving each request judged
    under ``<folder>/vectors/exact``, and write the report (its ``exact`` section) where
    ``out`` says (:func:`resverify.cli.blocks_output.outputs`); the exit status."""
    folder = out["folder"] / "vectors" / "exact"
    jobs = [lambda one=one: judge_block(one, dtypes, seed, folder, say, paths)
            for one in chosen]
    return run_exact(jobs, seed, out, with_plots, say)


def run_exact(jobs: Sequence[Callable[[], ExactRun]], seed: int, out: dict[str, Path],
              with_plots: bool, say: Callable[[str], None] = print) -> int:
    """Run each job (one block or model, judged in its dtypes, its requests saved under
    ``<folder>/vectors/exact``) and write the report of what finished (its ``exact``
    section) where ``out`` says, Ctrl-C or SIGTERM stopping the judging (a job stopped
    midway may hand what it finished as the KeyboardInterrupt's ``finished``); the exit
    status:
    1 when a judgement failed or the run was interrupted, else 0."""
    from resverify.cli.blocks_output import write
    from resverify.cli.runner import signal_name
    from resverify.cli.stop_signals import StopSignals
    from resverify.reports import exact as report
    from resverify.reports.json_report import exact_report

    runs: list[ExactRun] = []
    interrupted = None
    began = time.perf_counter()
    with StopSignals() as signals:
        try:
            for job in jobs:
                runs.append(job())
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: report what finished
            interrupted = signal_name(exc)
            finished = getattr(exc, "finished", None)
            runs += [finished] if finished is not None else []
        with signals.held():
            section = report.section(runs, seed=seed, interrupted=interrupted)
            doc = exact_report(section, seconds=time.perf_counter() - began)
            written = write(doc, out, with_plots)
    stopped = f"interrupted ({interrupted}) after " if interrupted else ""
    say(f"{stopped}{summary(runs, out['folder'] / 'vectors' / 'exact')}; {doc['status']}; "
        f"report: {out['html']} ({len(written)} files)")
    failed = any(v == "fail" for r in runs for j in r.judged for v in report.verdicts(j))
    return 1 if failed or interrupted else 0
