"""Where a block comes from: its catalog source, and the library (with its installed
version) a report names for it.

Why here and not in the command: a block's origin is read off its recipe (the factory's
module, a ``functools.partial`` unwrapped, or the block built's class) and the installed
distributions, which is the blocks' business; ``resverify blocks`` only prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resverify.blocks.recipe import Recipe

__all__ = ["LIBRARIES", "library_of", "source_of"]

CATALOG = "resverify.blocks.catalog."
LIBRARIES = {"torch_nn": "torch", "hf": "transformers", "timm": "timm",
             "torchvision": "torchvision", "haiku": "dm-haiku"}
"""Catalog source -> the distribution whose version a block of it reports."""


def source_of(recipe: Recipe) -> str:
    """Where a recipe comes from: a catalog recipe's source (``hf``, read off its factory's
    module, or a JAX recipe's block's); another's module, where its factory (a
    ``functools.partial`` unwrapped) was written. ``resverify blocks check`` says the
    ``module:RECIPE`` it was named by instead."""
    from resverify.blocks.recipe import maker

    module = getattr(maker(recipe), "__module__", "") or ""
    if module.startswith(CATALOG):
        return module.rsplit(".", 1)[-1]
    return module or "unknown"


def library_of(recipe: Recipe, block: object | None = None) -> tuple[str, str | None]:
    """The library a block belongs to and its installed version (None if unknown): the
    recipe's ``library``; a catalog source's (:data:`LIBRARIES`); else the installed
    distribution of the top-level package of the factory (a ``functools.partial``
    unwrapped) or, where that is not one (a lambda in the recipe's own module), of the
    ``block`` built's class; else that package's name, version unknown."""
    from resverify.blocks.recipe import maker

    if recipe.library:
        return _distribution(recipe.library)
    module = getattr(maker(recipe), "__module__", "") or ""
    if module.startswith(CATALOG):
        return _distribution(LIBRARIES.get(source_of(recipe), "torch"))
    modules = [m for m in (module, type(block).__module__ if block is not None else "") if m]
    for name in modules:
        found = _installed_from(name)
        if found is not None:
            return found
    return (modules[-1].split(".")[0] if modules else "unknown"), None


def _distribution(name: str) -> tuple[str, str | None]:
    """``(distribution, version)`` of an installed distribution named ``name`` or holding
    the top-level package ``name``; ``(name, None)`` when none is installed."""
    from importlib import metadata

    for dist in (name, *metadata.packages_distributions().get(name, ())):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return name, None


def _installed_from(module: str) -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed distribution whose files hold the
    imported ``module`` (or whose editable install's folder does); None when none does.
    A top-level name alone is not enough: distributions ship stray top-level ``examples``
    or ``docs`` packages, and a user's own ``examples`` is not theirs."""
    import json
    import sys
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    top = module.split(".")[0]
    file = getattr(sys.modules.get(module) or sys.modules.get(top), "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    for name in metadata.packages_distributions().get(top, ()):
        dist = metadata.distribution(name)
        if any(f.parts[:1] == (top,) and Path(str(dist.locate_file(f))).resolve() == path
               for f in dist.files or ()):
            return name, dist.version
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        if url.get("dir_info", {}).get("editable") and \
                path.is_relative_to(Path(unquote(urlparse(url["url"]).path)).resolve()):
            return name, dist.version
    return None
