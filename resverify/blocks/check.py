"""Checking a block: Hypothesis draws the examples, each law judges them, records come back.

Why one driver: a torch block and a Haiku block differ only in how an example is built and
asked, which their adapter answers (:mod:`resverify.blocks.adapter`, found by
:func:`~.adapters.adapter_of`); the example loop is the same for both, and it is the IR
laws' own (:mod:`resverify.properties.driver`: the examples counted, the shrinking capped at
the profile's limit, the failing example kept, so the shrunk failure keeps its draw); here
only the unjudged examples' reasons are gathered.

Why the parameters are perturbed: a factory's initial weights are special (LayerNorm's
weight all ones and bias all zeros, so ``norm1`` and ``norm2`` are the same function and a
block that reuses one for the other is invisible). Every example therefore adds
``N(0, 0.05²)`` noise to every parameter, and multiplies each branch's zeroing parameters
by a drawn power of two (``2**-12`` to ``2``, exact in every dtype), which also sweeps the
update from swamped to dominant. The inputs are normal values times a drawn power of two,
the batch and sequence sizes are drawn, and every random draw comes from one generator
seeded by the example, so an example is replayed by its seed.

Verdicts are ``pass`` (every judged example held, at least one judged), ``fail`` (the
law's one-line message, from the shrunk example) and ``unjudged`` (no example met the
law's precondition, with the reason). Nothing depends on machine speed: no deadline, and
Hypothesis' timing health checks are off. Torch runs on one thread while a law is judged:
at these sizes more threads only wait on each other (a 16-wide LayerNorm took 2.6 ms on
two busy cores, 0.01 ms on one), and one thread makes every reduction's order the same
whatever the machine's core count.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import given

from resverify.blocks.adapter import BlockAdapter
from resverify.blocks.adapters import adapter_of
from resverify.blocks.laws import LAWS, Law, applicable
from resverify.blocks.laws_paths import PATHS
from resverify.blocks.recipe import Recipe
from resverify.blocks.records import (
    Draw,
    LawRecord,
    draws,
    examples_count,
    examples_text,
)
from resverify.blocks.replay import command, python_call, recipe_ref
from resverify.blocks.trace import BlockFailure, Case, Unjudged
from resverify.properties.assertions import PropertyFailure
from resverify.properties.driver import ExampleRun, drive
from resverify.properties.profiles import PROFILES, active_profile, shrink_limit
from resverify.properties.vectors import backend_for, replay_command, save_vector, vector_dir
from resverify.spec.errors import NotJudged, UsageError

__all__ = ["LawRecord", "check_block", "examples_count", "examples_text", "laws_of",
           "pytest_check", "replay_example"]


def judged_record(names: tuple[str, str, str, str], asked: int, ran: int,
                  judged: list[dict[str, float]], reasons: list[str]) -> LawRecord:
    """The record of a law run that raised no failure, over ``(block, law, dtype, mode)``:
    ``unjudged`` with the first reason when no example was judged; else ``pass``, and when
    fewer examples were judged than ``asked`` the message says how many and why (the first
    unjudged example's reason): no pass on part of the examples without saying so."""
    if not judged:
        return LawRecord(*names, "unjudged", 0, message=reasons[0] if reasons else
                         "no example drawn", asked=asked)
    message = ""
    if len(judged) < asked:
        why = f"{ran - len(judged)} unjudged, the first: {reasons[0]}" if reasons else \
            f"Hypothesis drew {ran} distinct examples, no more"
        message = f"judged {len(judged)} of {asked} examples; {why}"
    return LawRecord(*names, "pass", len(judged), _combine(judged), message, asked=asked)


def settled(record: LawRecord, earlier: Iterable[LawRecord]) -> LawRecord:
    """``record`` once the law it presumes (:attr:`~.laws.Law.presumes`) is known: a pass
    whose presumed law failed on the same block, dtype and mode is ``unjudged`` with that
    failure named (its examples were judged only where the presumption held, so the pass
    says nothing of the rest). Every driver applies this one rule, as the records come."""
    presumed = LAWS[record.law].presumes if record.law in LAWS else None
    if record.verdict != "pass" or presumed is None:
        return record
    failed = next((r for r in earlier if (r.block, r.law, r.dtype, r.mode) ==
                   (record.block, presumed, record.dtype, record.mode)
                   and r.verdict == "fail"), None)
    if failed is None:
        return record
    return replace(record, verdict="unjudged", figures={},
                   message=f"{presumed} fails in {record.dtype} {record.mode}, which this law "
                   f"presumes (it judged {record.examples} of "
                   f"{record.asked or record.examples} examples, where that held): "
                   f"{failed.message}")


def _judge(adapter: BlockAdapter, law: Law, case: Case) -> dict[str, float]:
    """The law's figures on ``case``; an exception the block itself raised (the adapter
    says which) fails the example with its first line."""
    __tracebackhide__ = True
    try:
        return law.check(case)
    except Exception as exc:
        said = adapter.raised(case, exc)
        if said is None:  # a failure, an unjudged example, a recipe's one-line mistake
            raise
        case.fail(law.name, said)


def _combine(figures: list[dict[str, float]]) -> dict[str, float]:
    """Figures over the judged examples: the least headroom, the largest ``max_``, the mean
    of the rest."""
    keys = sorted({k for f in figures for k in f})
    out = {}
    for key in keys:
        values = [f[key] for f in figures if key in f]
        out[key] = min(values) if key.startswith("headroom") else max(values) if \
            key.startswith("max_") else sum(values) / len(values)
    return out


def _paths(law: str, paths: Iterable[str]) -> tuple[str, ...]:
    """The paths asked for, refused when unknown, or missing for a law that needs them."""
    asked = tuple(paths)
    bad = [p for p in asked if p not in PATHS]
    if bad:
        raise UsageError(f"unknown path {bad[0]!r}; known: {list(PATHS)}")
    if LAWS[law].needs_paths and not asked:
        raise UsageError(f"law {law!r} judges the paths asked for; give paths=..., some of "
                         f"{list(PATHS)}")
    return asked


def _asked(recipe: Recipe, law: str, dtype: str, mode: str, paths: Iterable[str]
           ) -> tuple[str, ...]:
    """The paths asked for, once the law, dtype and mode are shown to be the recipe's
    and the law one with something to judge on the recipe's library (a UsageError, one
    line, otherwise)."""
    if law not in LAWS:
        raise UsageError(f"unknown law {law!r}; known: {list(LAWS)}")
    adapter = adapter_of(recipe)
    if law in adapter.inapplicable:
        raise UsageError(f"law {law!r} does not apply to {recipe.name!r}, a {adapter.library} "
                         f"block: {adapter.inapplicable[law]}")
    asked = _paths(law, paths)
    if dtype not in recipe.dtypes or mode not in recipe.modes:
        raise UsageError(f"recipe {recipe.name!r} claims dtypes {list(recipe.dtypes)} and modes "
                         f"{list(recipe.modes)}, not {dtype} {mode}")
    return asked


def laws_of(recipe: Recipe, paths: Iterable[str] = ()) -> list[str]:
    """The laws with something to judge on ``recipe``'s block, in table order
    (:func:`~.laws.applicable`)."""
    return applicable(recipe, paths)


def validate_block(recipe: Recipe, dtype: str, seed: int) -> object:
    """Build ``recipe``'s block once through its adapter, refusing a recipe the block
    contradicts with one line; the block built (None where it is no Python object)."""
    return adapter_of(recipe).validate(recipe, dtype, seed)


def judge_example(recipe: Recipe, law: str, dtype: str, mode: str, draw: Draw,
                  paths: Iterable[str] = ()) -> dict[str, float]:
    """One example of one law, as the adapter judges it (one torch thread, JAX's float64
    for a float64 example): its figures, or the law's :class:`PropertyFailure`, or
    :class:`~.trace.Unjudged` with the reason."""
    __tracebackhide__ = True
    asked = _asked(recipe, law, dtype, mode, paths)
    adapter = adapter_of(recipe)
    with adapter.judging(dtype):
        return _judge(adapter, LAWS[law], adapter.case(recipe, dtype, mode, draw, asked))


def run_law(recipe: Recipe, law: str, dtype: str, mode: str, *, max_examples: int | None = None,
            seed: int = 0, shrink: bool = True, paths: Iterable[str] = (),
            profile: str | None = None) -> LawRecord:
    """Judge one law on ``recipe``'s block in ``dtype`` and ``mode`` over drawn examples,
    whichever library built it (its adapter builds each example); ``paths``
    (``"compile"``, ``"fastpath"``) are the paths the ``paths`` law judges. The examples are
    ``max_examples``, else ``profile``'s (default: the active one, ``ci`` where the active
    profile is none of the suite's, as outside pytest), and they are run by the
    suite's driver (:func:`resverify.properties.driver.drive`): counted as an IR law's are,
    shrinking capped at ``profile``'s limit (:func:`~resverify.properties.profiles.
    shrink_limit`). A failure's record keeps its shrunk example (``draw``), which replays
    it; a law with nothing to judge on the block's library is a UsageError that says why."""
    asked = _asked(recipe, law, dtype, mode, paths)
    adapter, names = adapter_of(recipe), (recipe.name, law, dtype, mode)
    adapter.validate(recipe, dtype, seed)  # a recipe's mistake is its one line, first
    chosen = profile or active_profile()
    chosen = chosen if chosen in PROFILES else "ci"  # outside pytest: Hypothesis' default
    examples = max_examples or PROFILES[chosen].max_examples
    run = ExampleRun(shrink_limit=shrink_limit(chosen), max_examples=examples)
    judged: list[dict[str, float]] = []
    reasons: list[str] = []

    @given(draws())
    def prop(draw: Draw) -> None:
        try:
            case = adapter.case(recipe, dtype, mode, draw, asked)
            judged.append(_judge(adapter, LAWS[law], case))
        except Unjudged as exc:
            reasons.append(str(exc))

    try:
        with adapter.judging(dtype):
            drive(prop, run, seed=seed, shrink=shrink)
    except PropertyFailure as exc:
        example = run.failing_example(exc)
        return LawRecord(*names, "fail", run.examples, _failed_figures(exc),
                         message=str(exc).splitlines()[0], failure=exc, asked=examples,
                         draw=None if example is None else _draw_of(example))
    return judged_record(names, examples, run.examples, judged, reasons)


def _failed_figures(exc: PropertyFailure) -> dict[str, float]:
    """What the law measured on its failing example before it failed (none for a failure
    that is not the block's, :func:`~.trace.measured`)."""
    return dict(exc.figures) if isinstance(exc, BlockFailure) else {}


def _draw_of(example: tuple[Any, Any]) -> Draw | None:
    """The draw among a failing example's arguments (the one :func:`run_law` draws)."""
    args, kwargs = example
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, Draw)), None)


def replay_example(recipe: Recipe, law: str, dtype: str, mode: str, draw: Draw,
                   paths: Iterable[str] = ()) -> LawRecord:
    """``law`` judged on the one example ``draw`` of ``recipe``'s block in ``dtype`` and
    ``mode`` (:mod:`resverify.blocks.replay`): a record of one example, ``fail`` (the
    failure again, with its message), ``pass``, or ``unjudged`` with the reason.

    >>> again = replay_example(RECIPE, "zero_branch", "float32", "eval", r.draw)  # doctest: +SKIP
    >>> again.verdict, again.message  # doctest: +SKIP
    """
    names = (recipe.name, law, dtype, mode)
    try:
        figures = judge_example(recipe, law, dtype, mode, draw, paths)
    except Unjudged as exc:
        return LawRecord(*names, "unjudged", 0, message=str(exc), asked=1, draw=draw)
    except PropertyFailure as exc:
        return LawRecord(*names, "fail", 1, _failed_figures(exc),
                         message=str(exc).splitlines()[0], failure=exc, asked=1, draw=draw)
    return LawRecord(*names, "pass", 1, figures, asked=1, draw=draw)


def plan(recipe: Recipe, dtypes: Iterable[str] | None = None,
         laws: Iterable[str] | None = None, paths: Iterable[str] = ()
         ) -> list[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every record a check makes, law by law in table order (a
    law whose failure explains others first, :data:`~.laws.LAWS`), then dtype, then mode:
    ``laws`` (default: :func:`laws_of`, the
    paths law when ``paths`` names some, as the command judges) in ``dtypes`` (default:
    every one claimed)."""
    chosen = set(laws_of(recipe, paths) if laws is None else laws)
    unknown = sorted(chosen - set(LAWS))
    if unknown:
        raise UsageError(f"unknown law {unknown[0]!r}; known: {list(LAWS)}")
    return [(name, dtype, mode) for name in LAWS if name in chosen
            for dtype in (recipe.dtypes if dtypes is None else dtypes)
            for mode in LAWS[name].modes if mode in recipe.modes]


def check_block(recipe: Recipe, dtypes: Iterable[str] | None = None,
                laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                seed: int = 0, shrink: bool = True, paths: Iterable[str] = (),
                profile: str | None = None) -> list[LawRecord]:
    """The laws applicable to ``recipe``'s block (or ``laws``), in each claimed dtype (or
    ``dtypes``) and each mode the law and the recipe share, in :func:`plan`'s order.
    ``paths`` (``"compile"``, ``"fastpath"``) adds the ``paths`` law, judged on those paths;
    without them it is not run. ``profile`` (default: the active one) gives the examples,
    unless ``max_examples`` does, and the shrink cap. A pass whose presumed law failed alike
    is ``unjudged`` (:func:`settled`).

    >>> records = check_block(recipe, ["float32"])  # doctest: +SKIP
    >>> [r.line() for r in records if r.verdict == "fail"]  # doctest: +SKIP
    """
    asked = tuple(paths)
    records: list[LawRecord] = []
    for name, dtype, mode in plan(recipe, list(dtypes or ()) or None, laws, asked):
        record = run_law(recipe, name, dtype, mode, max_examples=max_examples, seed=seed,
                         shrink=shrink, paths=asked, profile=profile)
        records.append(settled(record, records))
    return records


@dataclass(frozen=True)
class LawRun:
    """One block's records in order, each one's seconds, and by record index the vector
    saved for a failure at a merge and the command that replays a failure's example."""

    records: list[LawRecord] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    saved: dict[int, str] = field(default_factory=dict)
    replays: dict[int, str] = field(default_factory=dict)


def run_laws(recipe: Recipe, steps: Iterable[tuple[str, str, str]], *, examples: int,
             seed: int, vectors: Path, paths: Iterable[str] = (), profile: str | None = None,
             named: tuple[str, str | None] | None = None,
             said: Callable[[LawRecord, float], None] | None = None) -> LawRun:
    """Each ``(law, dtype, mode)`` of ``steps`` on ``recipe``'s block, as :func:`run_law`
    judges it (``examples`` each, shrinking capped at ``profile``'s limit) and
    :func:`settled` settles it, ``said`` with its seconds as it comes; a failure at a merge
    saved as a vector under ``vectors``, a failure's example kept with
    the command that replays it (naming the recipe as ``named``, ``(selector, block)``,
    says; else by its name)."""
    asked = tuple(paths)
    selector, block = named or (recipe.name, None)
    run = LawRun()
    for law, dtype, mode in steps:
        began = time.perf_counter()
        record = settled(run_law(recipe, law, dtype, mode, max_examples=examples, seed=seed,
                                 paths=asked if LAWS[law].needs_paths else (),
                                 profile=profile), run.records)
        run.seconds.append(time.perf_counter() - began)
        failure = record.failure
        if isinstance(failure, BlockFailure) and failure.merged:
            run.saved[len(run.records)] = str(save_vector(
                failure.request, vectors, f"{law}[{dtype},{mode}]", recipe.name,
                record.message, failure.kind))
        again = command(selector, record, asked, block)
        if again is not None:
            run.replays[len(run.records)] = again
        run.records.append(record)
        if said is not None:
            said(record, run.seconds[-1])
    return run


def pytest_check(recipe: Recipe, dtypes: Iterable[str] | None = None,
                 laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                 seed: int = 0, paths: Iterable[str] = (),
                 vectors: str | Path | None = None, allow_unjudged: bool = False
                 ) -> list[LawRecord]:
    """:func:`check_block` inside a user's own test: raises the first failing law's
    :class:`PropertyFailure` (its message names every failing law, root causes first, each
    with the command that replays its example and, for a failure at a merge, the vector of
    that merge and the command that replays it), returns the
    records. A law that judged nothing fails the test too (:class:`NotJudged`, naming each
    such law and why), as ``resverify blocks check`` exits 1 for it, unless
    ``allow_unjudged=True``.

    The vectors go into ``vectors``, else ``RESVERIFY_VECTOR_DIR``, else
    ``resverify-vectors/`` (as the suite's own failures do,
    :func:`resverify.properties.vectors.vector_dir`).

    >>> def test_my_block():  # doctest: +SKIP
    ...     resverify.blocks.pytest_check(my_recipe, ["float32"])

    Call it from a plain test, not from inside a Hypothesis ``@given`` test: it draws its
    own examples.
    """
    __tracebackhide__ = True
    records = check_block(recipe, dtypes, laws, max_examples=max_examples, seed=seed,
                          paths=paths)
    failed = [r for r in records if r.verdict == "fail"]
    if failed:
        first = failed[0].failure
        assert first is not None
        folder = vector_dir(None if vectors is None else str(vectors))
        lines = "\n".join(_saved(recipe, r, folder, tuple(paths)) for r in failed)
        raise PropertyFailure(f"{len(failed)} residual law(s) fail:\n{lines}", first.request)
    unjudged = [r for r in records if r.verdict == "unjudged"]
    if unjudged and not allow_unjudged:
        lines = "\n".join(r.line() for r in unjudged)
        raise NotJudged(f"{len(unjudged)} of {len(records)} law record(s) judged nothing, "
                        "expected a verdict (resverify blocks check exits 1 alike; pass "
                        f"allow_unjudged=True to accept):\n{lines}")
    return records


def _saved(recipe: Recipe, record: LawRecord, folder: Path, paths: tuple[str, ...]) -> str:
    """The record's line, the command that replays its example (or the Python call, for
    a recipe no ``module:attr`` reaches), and for a failure at a merge its vector, saved
    under ``folder``, with the command that replays it on a backend that claims its dtype."""
    ref = recipe_ref(recipe)
    again = command(ref[0], record, paths, ref[1]) if ref else python_call(record)
    lines = [record.line(), *([f"  replay: {again}"] if again else [])]
    failure = record.failure
    if isinstance(failure, BlockFailure) and failure.merged:
        path = save_vector(failure.request, folder,
                           f"{record.law}[{record.dtype},{record.mode}]", record.block,
                           record.message, failure.kind)
        backend = backend_for(failure.request)
        lines.append(f"  vector {path} (the merge)" + (
            f"; replay it: {replay_command(path, backend)}" if backend else ""))
    return "\n".join(lines)
