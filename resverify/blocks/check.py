"""Checking a block: Hypothesis draws the examples, each law judges them, records come back.

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

import contextlib
import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from torch import nn

from resverify.blocks.laws import LAWS, Law
from resverify.blocks.laws_paths import PATHS
from resverify.blocks.recipe import Recipe, validate
from resverify.blocks.trace import TORCH_DTYPES, BlockFailure, Case, Inputs, Unjudged
from resverify.properties.assertions import PropertyFailure
from resverify.properties.profiles import PROFILES, active_profile
from resverify.properties.vectors import backend_for, replay_command, save_vector, vector_dir
from resverify.spec.errors import NotJudged, ResverifyError, UsageError

__all__ = ["Draw", "FailedDraw", "LawRecord", "build", "check_block", "draws", "examples_count",
           "examples_text", "judge_example", "judged_record", "make_case", "plan", "pytest_check",
           "run_law", "settled"]

NOISE = 0.05
WEIGHT_EXPONENTS = (-12, -4, 0, 1)
INPUT_EXPONENTS = (-2, 0, 3)


@dataclass(frozen=True)
class Draw:
    """One example's choices."""

    batch: int
    seq: int
    seed: int
    weight_exp: int
    input_exp: int


def draws() -> st.SearchStrategy[Draw]:
    """Batch 1-3, sequence 1-4, a seed, the branch ends' and the inputs' scales."""
    return st.builds(Draw, st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**31 - 1),
                     st.sampled_from(WEIGHT_EXPONENTS), st.sampled_from(INPUT_EXPONENTS))


@dataclass(frozen=True)
class LawRecord:
    """One law on one block in one dtype and mode."""

    block: str
    law: str
    dtype: str
    mode: str
    verdict: str
    examples: int  # judged (pass), run until the failure and its shrinking (fail)
    figures: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    failure: PropertyFailure | None = None
    asked: int = 0
    """The examples the law was asked to judge (0: not known)."""
    draw: Draw | None = None
    """A failure's example, as shrunk: the block, law, dtype, mode and this replay it
    (:mod:`resverify.blocks.replay`); None for a pass, or where it is not known."""

    def line(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return (f"{self.block} {self.law} [{self.dtype}, {self.mode}] {self.verdict} "
                f"({examples_text(self)}){tail}")


def examples_count(verdict: str, examples: int, asked: int) -> str:
    """``25``, or ``4 of 25`` for a pass on fewer examples than asked (``asked`` 0: not
    known). The command, the pages and a record's line all say it so."""
    short = verdict == "pass" and asked > 0 and examples < asked
    return f"{examples} of {asked}" if short else str(examples)


def examples_text(record: LawRecord) -> str:
    """``25 examples``, or ``4 of 25 examples`` for a pass that judged fewer than asked."""
    return f"{examples_count(record.verdict, record.examples, record.asked)} examples"


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


def build(recipe: Recipe, dtype: str, seed: int) -> nn.Module:
    """The factory's module for ``dtype`` with torch's generator seeded, validated."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = recipe.factory(TORCH_DTYPES[dtype])
    validate(recipe, module)
    return module


def _perturbed(recipe: Recipe, pristine: nn.Module, draw: Draw) -> nn.Module:
    module = copy.deepcopy(pristine)
    gen = torch.Generator().manual_seed(draw.seed + 1)
    ends = {p for site in recipe.sites for p in site.zero}
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64) * NOISE
            param.add_(noise.to(param.dtype))
            if name in ends:
                param.mul_(2.0**draw.weight_exp)
    return module


def make_case(recipe: Recipe, dtype: str, mode: str, draw: Draw,
              paths: tuple[str, ...] = ()) -> Case:
    """The law's question for one drawn example; ``paths``: the paths law's paths."""
    pristine = build(recipe, dtype, draw.seed).train(mode == "train")
    module = _perturbed(recipe, pristine, draw).train(mode == "train")
    stream = TORCH_DTYPES[recipe.stream_dtype or dtype]
    inputs = Inputs.draw(recipe, stream, draw.batch, draw.seq, draw.seed, 2.0**draw.input_exp)
    extra: dict[str, object] = {"paths": paths} if paths else {}
    if recipe.zero_init is not None:  # as the library builds it: not perturbed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(draw.seed)
            extra["zero_init"] = recipe.zero_init(TORCH_DTYPES[dtype]).train(mode == "train")
    return Case(recipe, dtype, mode, module, pristine, inputs, extra)


def _settings(examples: int, shrink: bool) -> settings:
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])]
    return settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                    phases=phases, suppress_health_check=list(HealthCheck))


def _judge(law: Law, case: Case) -> dict[str, float]:
    __tracebackhide__ = True
    try:
        return law.check(case)
    except ResverifyError:  # a failure, an unjudged example, a recipe's one-line mistake
        raise
    except (RuntimeError, ValueError, TypeError) as exc:  # the block itself raised
        first = (str(exc).strip().splitlines() or [""])[0]
        case.fail(law.name, f"the block raised {type(exc).__name__}: {first}, expected a "
                  f"result (input x {list(case.inputs.x.shape)}, {case.mode} mode; if the "
                  "block cannot take sizes this small, fix them in the recipe's shape)")


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
    (a UsageError, one line, otherwise)."""
    if law not in LAWS:
        raise UsageError(f"unknown law {law!r}; known: {list(LAWS)}")
    asked = _paths(law, paths)
    if dtype not in recipe.dtypes or mode not in recipe.modes:
        raise UsageError(f"recipe {recipe.name!r} claims dtypes {list(recipe.dtypes)} and modes "
                         f"{list(recipe.modes)}, not {dtype} {mode}")
    return asked


def judge_example(recipe: Recipe, law: str, dtype: str, mode: str, draw: Draw,
                  paths: Iterable[str] = ()) -> dict[str, float]:
    """One example of one law, on one thread: its figures, or the law's
    :class:`PropertyFailure`, or :class:`~.trace.Unjudged` with the reason."""
    __tracebackhide__ = True
    asked = _asked(recipe, law, dtype, mode, paths)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _judge(LAWS[law], make_case(recipe, dtype, mode, draw, asked))
    finally:
        torch.set_num_threads(threads)


def run_law(recipe: Recipe, law: str, dtype: str, mode: str, *, max_examples: int | None = None,
            seed: int = 0, shrink: bool = True, paths: Iterable[str] = ()) -> LawRecord:
    """Judge one law on ``recipe``'s block in ``dtype`` and ``mode`` over drawn examples;
    ``paths`` (``"compile"``, ``"fastpath"``) are the paths the ``paths`` law judges. A
    failure's record keeps its shrunk example (``draw``), which replays it."""
    asked = _asked(recipe, law, dtype, mode, paths)
    entry = LAWS[law]
    build(recipe, dtype, seed)  # a recipe's mistake is its one-line error, before any example
    examples = max_examples or PROFILES.get(active_profile(), PROFILES["ci"]).max_examples
    judged: list[dict[str, float]] = []
    reasons: list[str] = []
    ran = [0]
    last = FailedDraw()

    @hypothesis_seed(seed)
    @_settings(examples, shrink)
    @given(draws())
    def prop(draw: Draw) -> None:
        ran[0] += 1
        try:
            with last.kept(draw):
                judged.append(_judge(entry, make_case(recipe, dtype, mode, draw, asked)))
        except Unjudged as exc:
            reasons.append(str(exc))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        prop()
    except PropertyFailure as exc:
        return LawRecord(recipe.name, law, dtype, mode, "fail", ran[0],
                         message=str(exc).splitlines()[0], failure=exc, asked=examples,
                         draw=last.of(exc))
    finally:
        torch.set_num_threads(threads)
    return judged_record((recipe.name, law, dtype, mode), examples, ran[0], judged, reasons)


class FailedDraw:
    """The example whose failure Hypothesis raised at the end: the draw of the last
    failing call, kept only when it is that very failure (Hypothesis reruns the shrunk
    example last), else unknown."""

    def __init__(self) -> None:
        self._last: tuple[PropertyFailure, Draw] | None = None

    @contextlib.contextmanager
    def kept(self, draw: Draw) -> Iterator[None]:
        try:
            yield
        except PropertyFailure as exc:
            self._last = (exc, draw)
            raise

    def of(self, failure: PropertyFailure) -> Draw | None:
        return self._last[1] if self._last is not None and self._last[0] is failure else None


def plan(recipe: Recipe, dtypes: Iterable[str] | None = None,
         laws: Iterable[str] | None = None, paths: Iterable[str] = ()
         ) -> list[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every record a check makes, law by law in table order (a
    law whose failure explains others first, :data:`~.laws.LAWS`), then dtype, then mode:
    ``laws`` (default: those its adapter's :meth:`~.adapter.BlockAdapter.laws` gives, the
    paths law when ``paths`` names some, as the command judges) in ``dtypes`` (default:
    every one claimed)."""
    chosen = set(recipe.adapter.laws(recipe, paths) if laws is None else laws)
    unknown = sorted(chosen - set(LAWS))
    if unknown:
        raise UsageError(f"unknown law {unknown[0]!r}; known: {list(LAWS)}")
    return [(name, dtype, mode) for name in LAWS if name in chosen
            for dtype in (recipe.dtypes if dtypes is None else dtypes)
            for mode in LAWS[name].modes if mode in recipe.modes]


def check_block(recipe: Recipe, dtypes: Iterable[str] | None = None,
                laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                seed: int = 0, shrink: bool = True, paths: Iterable[str] = ()) -> list[LawRecord]:
    """The laws applicable to ``recipe``'s block (or ``laws``), in each claimed dtype (or
    ``dtypes``) and each mode the law and the recipe share, in :func:`plan`'s order.
    ``paths`` (``"compile"``, ``"fastpath"``) adds the ``paths`` law, judged on those paths;
    without them it is not run. A pass whose presumed law failed alike is ``unjudged``
    (:func:`settled`).

    >>> records = check_block(recipe, ["float32"])  # doctest: +SKIP
    >>> [r.line() for r in records if r.verdict == "fail"]  # doctest: +SKIP
    """
    asked = tuple(paths)
    records: list[LawRecord] = []
    for name, dtype, mode in plan(recipe, list(dtypes or ()) or None, laws, asked):
        record = recipe.adapter.run_law(recipe, name, dtype, mode, max_examples=max_examples,
                                        seed=seed, shrink=shrink, paths=asked)
        records.append(settled(record, records))
    return records


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
    from resverify.blocks.replay import command, python_call, recipe_ref

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
