"""The catalog: every shipped block resverify knows, by name, each library optional.

Why a table of sources and not imports: each library is an optional extra, and one that is
missing (or, like torchvision's CUDA build beside the CPU torch wheel, fails to import) must
cost its own entries only, reported as a skip reason, never the catalog. A source is a
module ``resverify.blocks.catalog.<name>`` defining ``RECIPES``, a tuple of
:class:`~resverify.blocks.recipe.Recipe`; it is imported only when the catalog is first
read. To add a library, write its module and add its name to :data:`_SOURCES`. The
``haiku`` source's recipes are :class:`~resverify.blocks.haiku_adapter.JaxRecipe` s (JAX
blocks, checked by :func:`~resverify.blocks.check.check_block` through the Haiku adapter).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping

from resverify.blocks.recipe import Recipe
from resverify.spec.errors import UsageError

__all__ = ["catalog", "recipe", "skipped"]

_SOURCES = ("torch_nn", "hf", "timm", "torchvision", "haiku", "xtransformers", "diffusers",
            "torchtune", "litgpt")
"""The catalog's source modules, in the order they are listed."""


@functools.cache
def _load() -> tuple[Mapping[str, Recipe], Mapping[str, str]]:
    found: dict[str, Recipe] = {}
    missing: dict[str, str] = {}
    for source in _SOURCES:
        try:
            module = importlib.import_module(f"{__name__}.{source}")
        except (ImportError, OSError, RuntimeError) as exc:  # a library absent or broken
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            missing[source] = f"{type(exc).__name__}: {first}"
            continue
        for entry in module.RECIPES:
            if entry.name in found:
                raise UsageError(f"catalog: recipe name {entry.name!r} appears twice "
                                 f"(second in {source})")
            found[entry.name] = entry
    return found, missing


def catalog() -> Mapping[str, Recipe]:
    """Every recipe whose library imports, by name."""
    return _load()[0]


def skipped() -> Mapping[str, str]:
    """Source -> why its recipes are missing (its library did not import)."""
    return _load()[1]


def recipe(name: str) -> Recipe:
    """The recipe called ``name``; a UsageError names the known ones (and the skipped)."""
    found, missing = _load()
    if name not in found:
        why = "".join(f"; {s} skipped: {r}" for s, r in missing.items())
        raise UsageError(f"no block recipe {name!r}; known: {sorted(found)}{why}")
    return found[name]
