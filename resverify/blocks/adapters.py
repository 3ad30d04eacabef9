"""Which adapter answers for a block: the one its recipe names (:attr:`~.recipe.Recipe.adapter`).

Why a registry of its own: a recipe is data and names its adapter by the library
(``"torch"``, ``"haiku"``); the laws (:func:`ask`) and the driver
(:mod:`resverify.blocks.check`, :func:`adapter_of`) look the adapter up here, so neither an
adapter nor a recipe imports the laws or the driver back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from resverify.blocks.haiku_adapter import HAIKU
from resverify.blocks.torch_adapter import TORCH
from resverify.spec.errors import UsageError

if TYPE_CHECKING:
    from resverify.blocks.adapter import BlockAdapter
    from resverify.blocks.recipe import Recipe
    from resverify.blocks.trace import Case

__all__ = []

ADAPTERS: Mapping[str, BlockAdapter] = {a.library: a for a in (TORCH, HAIKU)}
"""Every block adapter by the library it answers for."""


def adapter_of(recipe: Recipe) -> BlockAdapter:
    """The adapter that answers for ``recipe``'s block: the one it names."""
    found = ADAPTERS.get(recipe.adapter)
    if found is None:
        raise UsageError(f"recipe {recipe.name!r} names adapter {recipe.adapter!r}; known: "
                         f"{list(ADAPTERS)}")
    return found


def ask(case: Case) -> BlockAdapter:
    """The adapter that answers for ``case``'s block: the one its recipe names."""
    return adapter_of(case.recipe)
