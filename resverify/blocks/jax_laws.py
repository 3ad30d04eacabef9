"""The driver of the laws on a JAX block: examples drawn for a Haiku block, judged by the
same law objects as a torch block's.

The laws are :data:`~.laws.LAWS`', written once against the block adapter
(:mod:`resverify.blocks.adapter`); a Haiku block answers them through
:class:`~.haiku_adapter.HaikuAdapter` (its recipe, :class:`~.haiku_adapter.JaxRecipe`, and
how its examples are drawn are there). What stays here is the loop that draws the examples
inside :func:`~.haiku_adapter.precision` (float64 switched on for a float64 example only),
which :mod:`resverify.blocks.check` will run for every adapter.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from hypothesis import given
from hypothesis import seed as hypothesis_seed

from resverify.blocks.check import (
    Draw,
    FailedDraw,
    LawRecord,
    _settings,
    draws,
    judged_record,
    settled,
)
from resverify.blocks.haiku_adapter import (
    BLOCK,
    UNJUDGED,
    JaxRecipe,
    import_haiku,
    make_case,
    no_torch,
    precision,
    validate_jax,
)
from resverify.blocks.laws import LAWS
from resverify.blocks.trace import Case, Unjudged
from resverify.properties.assertions import PropertyFailure
from resverify.properties.profiles import PROFILES, active_profile
from resverify.spec.errors import UsageError

__all__ = ["BLOCK", "JUDGED", "UNJUDGED", "JaxRecipe", "check_jax_block", "import_haiku",
           "judge_jax_example", "make_case", "no_torch", "plan", "run_jax_law", "validate_jax"]

JUDGED = tuple(name for name in LAWS if name not in UNJUDGED)
"""The laws judged on a JAX block, in table order (:data:`~.laws.LAWS`), each in the modes
the table gives it."""


def plan(recipe: JaxRecipe, dtypes: Iterable[str] = ()) -> Iterator[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every judged record, in the order of the torch plan."""
    wanted = list(dtypes)
    for law in JUDGED:
        for dtype in (d for d in recipe.dtypes if not wanted or d in wanted):
            for mode in (m for m in LAWS[law].modes if m in recipe.modes):
                yield law, dtype, mode


def _judge(law: str, case: Case) -> dict[str, float]:
    __tracebackhide__ = True
    try:
        return LAWS[law].check(case)
    except (PropertyFailure, Unjudged):
        raise
    except (TypeError, ValueError) as exc:  # the block itself raised (a shape, a dtype)
        first = (str(exc).strip().splitlines() or [""])[0]
        case.fail(law, f"the block raised {type(exc).__name__}: {first}, expected a result")


def _claimed(recipe: JaxRecipe, law: str, dtype: str, mode: str) -> None:
    if law not in LAWS:
        raise UsageError(f"unknown law {law!r}; known: {list(LAWS)}")
    if dtype not in recipe.dtypes or mode not in recipe.modes:
        raise UsageError(f"recipe {recipe.name!r} claims dtypes {list(recipe.dtypes)} and modes "
                         f"{list(recipe.modes)}, not {dtype} {mode}")


def judge_jax_example(recipe: JaxRecipe, law: str, dtype: str, mode: str, draw: Draw
                      ) -> dict[str, float]:
    """One example of one law on a JAX block (:func:`~.check.judge_example`'s twin): its
    figures, the law's failure, or :class:`~.trace.Unjudged` (a law this driver does not
    judge, with why)."""
    __tracebackhide__ = True
    _claimed(recipe, law, dtype, mode)
    if law not in JUDGED:
        raise Unjudged(UNJUDGED.get(law, "a law of torch modules only; not defined for a JAX "
                                    "block"))
    with precision(dtype):
        return _judge(law, make_case(recipe, dtype, mode, draw))


def run_jax_law(recipe: JaxRecipe, law: str, dtype: str, mode: str, *,
                max_examples: int | None = None, seed: int = 0,
                shrink: bool = True) -> LawRecord:
    """Judge one law on a JAX block in ``dtype`` and ``mode``, as
    :func:`~.check.run_law` does for a torch block."""
    _claimed(recipe, law, dtype, mode)
    if law not in JUDGED:
        why = UNJUDGED.get(law, "a law of torch modules only; not defined for a JAX block")
        return LawRecord(recipe.name, law, dtype, mode, "unjudged", 0, message=why)
    validate_jax(recipe, dtype, seed)  # a recipe's mistake is its one line, before examples
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
        with precision(dtype):
            try:
                with last.kept(draw):
                    judged.append(_judge(law, make_case(recipe, dtype, mode, draw)))
            except Unjudged as exc:
                reasons.append(str(exc))

    try:
        prop()
    except PropertyFailure as exc:
        return LawRecord(recipe.name, law, dtype, mode, "fail", ran[0],
                         message=str(exc).splitlines()[0], failure=exc, asked=examples,
                         draw=last.of(exc))
    return judged_record((recipe.name, law, dtype, mode), examples, ran[0], judged, reasons)


def check_jax_block(recipe: JaxRecipe, dtypes: Iterable[str] | None = None,
                    laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                    seed: int = 0) -> list[LawRecord]:
    """Every law (or ``laws``) on a JAX block in each claimed dtype (or ``dtypes``) and mode,
    as :func:`~.check.check_block`: the laws of :data:`UNJUDGED` come back unjudged, with
    their reason (a law of :data:`~.laws.LAWS` that neither lists is run only when asked).

    >>> from resverify.blocks.catalog import recipe  # doctest: +SKIP
    >>> check_jax_block(recipe("haiku.BlockV1"), ["float32"], max_examples=5)  # doctest: +SKIP
    """
    chosen = set(laws or (n for n in LAWS if n in JUDGED or n in UNJUDGED))
    records: list[LawRecord] = []
    for name in (n for n in LAWS if n in chosen):
        for dtype in dtypes or recipe.dtypes:
            for mode in (m for m in LAWS[name].modes if m in recipe.modes):
                records.append(settled(run_jax_law(recipe, name, dtype, mode,
                                                   max_examples=max_examples, seed=seed),
                                       records))
    return records
