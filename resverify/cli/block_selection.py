"""Which recipes a ``resverify blocks`` command names: catalog names, or ``module:RECIPE``
for a user's own, and where each comes from. Both ``blocks check`` and ``blocks replay``
select with it (:func:`select`); it imports neither of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resverify.blocks.recipe import Recipe

__all__ = []

@dataclass(frozen=True)
class Selected:
    """A recipe to check and how the command line named it: ``source`` is the catalog's
    source (``hf``) or the ``module:RECIPE`` reference; ``selector`` and ``block`` name it
    again for its replay (``block``: its name, when the reference holds several)."""

    recipe: Recipe
    source: str
    selector: str
    block: str | None = None


def select(names: Sequence[str], every: bool) -> list[Selected]:
    """The recipes to check: catalog names, or ``module:attr`` naming a user's own recipe
    (or a sequence of them); a UsageError (one line, with the close names) for a name the
    catalog lacks. The catalog is imported only when a catalog name or ``every`` asks."""
    import difflib

    from resverify.blocks.library import source_of
    from resverify.spec.errors import UsageError

    if every == bool(names):
        raise UsageError("blocks check: give block names or --all (not both); "
                         "`resverify blocks` lists them")
    if every:
        from resverify.blocks.catalog import catalog

        return [Selected(r, source_of(r), r.name) for r in catalog().values()]
    chosen: dict[str, Selected] = {}
    for name in names:
        if ":" in name:
            found_here = user_recipes(name)
            chosen.update((r.name, Selected(r, name, name, r.name if len(found_here) > 1
                                            else None)) for r in found_here)
            continue
        from resverify.blocks.catalog import catalog, skipped

        found = catalog()
        if name not in found:
            close = difflib.get_close_matches(name, list(found), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            gone = f" (skipped: {', '.join(skipped())})" if skipped() else ""
            raise UsageError(f"no block {name!r}; {hint}`resverify blocks` lists the "
                             f"{len(found)} known, or name your own as module:RECIPE{gone}")
        chosen[name] = Selected(found[name], source_of(found[name]), name)
    return list(chosen.values())


def user_recipes(ref: str) -> list[Recipe]:
    """The recipe(s) ``module:attr`` names, the working folder importable (a Recipe, a
    sequence of them, or a mapping whose values are); anything else is one UsageError line,
    and a misspelt name is offered the module's recipes first, never the ``Recipe`` class."""
    from resverify.impl.registry import import_attribute
    from resverify.spec.errors import UsageError

    target = import_attribute(ref, "block recipe", "examples.custom_block:RECIPE",
                              fits=lambda value: bool(_recipes_in(value)))
    recipes = _recipes_in(target)
    if not recipes:
        raise UsageError(f"{ref} is a {type(target).__name__}, not a resverify.blocks.Recipe "
                         "(or a list or mapping of them)")
    return recipes


def _recipes_in(value: object) -> list[Recipe]:
    """``value`` as recipes: itself, a list or tuple of them, a mapping's values; [] when it
    is none of these."""
    from collections.abc import Mapping

    from resverify.blocks.recipe import Recipe

    items = [value] if isinstance(value, Recipe) else list(value.values()) if \
        isinstance(value, Mapping) else list(value) if isinstance(value, (list, tuple)) else []
    return items if items and all(isinstance(r, Recipe) for r in items) else []
