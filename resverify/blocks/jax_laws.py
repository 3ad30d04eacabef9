"""The block laws on a JAX block, by the names the Haiku tests and callers use.

A Haiku block is checked by the one driver (:mod:`resverify.blocks.check`), which asks its
adapter (:class:`~.haiku_adapter.HaikuAdapter`) for each example; what stays here is the
JAX-block view of it: :data:`JUDGED` (the laws judged on a JAX block), :func:`plan`, and
:func:`check_jax_block`, which also returns the laws that do not apply (:data:`UNJUDGED`)
as ``unjudged`` records with their reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from resverify.blocks.check import check_block, judge_example, run_law
from resverify.blocks.haiku_adapter import (
    UNJUDGED,
    JaxRecipe,
)
from resverify.blocks.laws import LAWS
from resverify.blocks.records import LawRecord

__all__ = []

JUDGED = tuple(name for name in LAWS if name not in UNJUDGED)
"""The laws judged on a JAX block, in table order (:data:`~.laws.LAWS`), each in the modes
the table gives it."""

judge_jax_example = judge_example
"""One example of one law on a JAX block: :func:`~.check.judge_example`."""


def plan(recipe: JaxRecipe, dtypes: Iterable[str] = ()) -> Iterator[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every judged record, in the order of the torch plan."""
    wanted = list(dtypes)
    for law in JUDGED:
        for dtype in (d for d in recipe.dtypes if not wanted or d in wanted):
            for mode in (m for m in LAWS[law].modes if m in recipe.modes):
                yield law, dtype, mode


def run_jax_law(recipe: JaxRecipe, law: str, dtype: str, mode: str, *,
                max_examples: int | None = None, seed: int = 0,
                shrink: bool = True) -> LawRecord:
    """Judge one law on a JAX block in ``dtype`` and ``mode``: :func:`~.check.run_law`."""
    return run_law(recipe, law, dtype, mode, max_examples=max_examples, seed=seed,
                   shrink=shrink)


def check_jax_block(recipe: JaxRecipe, dtypes: Iterable[str] | None = None,
                    laws: Iterable[str] | None = None, *, max_examples: int | None = None,
                    seed: int = 0) -> list[LawRecord]:
    """Every law (or ``laws``) on a JAX block in each claimed dtype (or ``dtypes``) and mode,
    as :func:`~.check.check_block`: the laws of :data:`UNJUDGED` come back unjudged, with
    their reason.

    >>> from resverify.blocks.catalog import recipe  # doctest: +SKIP
    >>> check_jax_block(recipe("haiku.BlockV1"), ["float32"], max_examples=5)  # doctest: +SKIP
    """
    return check_block(recipe, dtypes, list(LAWS) if laws is None else laws,
                       max_examples=max_examples, seed=seed)
