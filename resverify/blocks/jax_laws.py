"""The block laws on a JAX block, by the names the Haiku tests and callers use.

A Haiku block is checked by the one driver (:mod:`resverify.blocks.check`), which asks its
adapter (:class:`~.haiku_adapter.HaikuAdapter`) for each example; what stays here is the
JAX-block view of it: :data:`JUDGED` (the laws judged on a JAX block), :func:`plan`, and
:func:`check_jax_block`. The laws with nothing to judge on a JAX block
(:data:`~.haiku_adapter.INAPPLICABLE`, and those of a LayerScale or a drop path, which a JAX
recipe never declares) never apply to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from resverify.blocks.check import check_block, judge_example, run_law
from resverify.blocks.haiku_adapter import INAPPLICABLE, JaxRecipe
from resverify.blocks.laws import LAWS
from resverify.blocks.records import LawRecord

__all__ = []

FEATURED = ("affine_in_gamma", "drop_path")
"""The laws of a feature a JAX recipe never declares (a LayerScale γ, a drop path)."""
JUDGED = tuple(name for name in LAWS if name not in INAPPLICABLE and name not in FEATURED)
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
    """Every law that applies (or ``laws``) on a JAX block in each claimed dtype (or
    ``dtypes``) and mode, as :func:`~.check.check_block`.

    >>> from resverify.blocks.catalog import recipe  # doctest: +SKIP
    >>> check_jax_block(recipe("haiku.BlockV1"), ["float32"], max_examples=5)  # doctest: +SKIP
    """
    return check_block(recipe, dtypes, laws, max_examples=max_examples, seed=seed)
