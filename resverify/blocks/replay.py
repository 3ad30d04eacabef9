"""Replaying a block's failure: the block, the law, the dtype, the mode and the one example.

Why the example and not only the merge: a block's failure is rarely in its merge. A saved
vector holds the merge ``shortcut(s) + alpha F(s)`` as the law predicted it, and replays on a
backend; but a γ as constructed, a stream's dtype, an input written into, or the zero map of
the whole block are no merge at all, and a stand-in vector of ``x + 0`` replays ``ok`` and
checks nothing. Everything an example depends on is its :class:`~.check.Draw` (the batch and
length, the seed that builds and perturbs the block and draws its inputs, and the two
scales), so the recipe, the law, the dtype, the mode and that draw rebuild the same block on
the same inputs and judge the law again on them: one command,
``resverify blocks replay NAME --law L --dtype D --mode M --example batch=1,seq=2,...``
(:func:`command`), or :func:`~.check.replay_example` from Python. A replay that judges
nothing (the law's precondition fails on the example) is ``unjudged``, which the command
exits 1 for.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from resverify.blocks.laws import LAWS
from resverify.blocks.recipe import Recipe, maker
from resverify.blocks.records import Draw, LawRecord
from resverify.spec.errors import UsageError

__all__ = ["example_text", "parse_example"]

FIELDS = tuple(f.name for f in fields(Draw))
"""The example's fields, in the order ``--example`` writes them."""


def example_text(draw: Draw) -> str:
    """``batch=1,seq=2,seed=7,weight_exp=-4,input_exp=0``: the draw as ``--example`` takes it."""
    return ",".join(f"{name}={getattr(draw, name)}" for name in FIELDS)


def parse_example(text: str) -> Draw:
    """The draw :func:`example_text` wrote; a UsageError, one line, for anything else."""
    want = f"write {','.join(f'{n}=N' for n in FIELDS)} (as a failure's replay prints it)"
    values: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        if not eq or key not in FIELDS or key in values:
            said = "repeated" if key in values else "unknown" if eq else "not key=value"
            raise UsageError(f"--example {text!r}: {part!r} is {said}; {want}")
        try:
            values[key] = int(value)
        except ValueError:
            raise UsageError(f"--example {text!r}: {key} is {value!r}, not an integer; "
                             f"{want}") from None
    missing = [n for n in FIELDS if n not in values]
    if missing:
        raise UsageError(f"--example {text!r} lacks {', '.join(missing)}; {want}")
    if values["batch"] < 1 or values["seq"] < 1 or values["seed"] < 0:
        raise UsageError(f"--example {text!r}: batch and seq are at least 1, seed at least 0")
    return Draw(**values)


def command(selector: str, record: LawRecord, paths: Iterable[str] = (),
            block: str | None = None) -> str | None:
    """The one command that replays ``record``'s failing example: ``selector`` names the
    recipe as ``resverify blocks check`` takes it (a catalog name, or ``module:attr``) and
    ``block`` picks one of several recipes there; ``paths`` for the paths law. None when the
    record keeps no example."""
    if record.draw is None:
        return None
    words = ["resverify", "blocks", "replay", selector, *(["--block", block] if block else []),
             "--law", record.law, "--dtype", record.dtype, "--mode", record.mode,
             "--example", example_text(record.draw)]
    asked = tuple(paths)
    if LAWS[record.law].needs_paths and asked:
        words += ["--paths", ",".join(asked)]
    return shlex.join(words)


def python_call(record: LawRecord) -> str | None:
    """The replay as a Python call on the recipe object, for a recipe no ``module:attr``
    reaches (built inside a function)."""
    if record.draw is None:
        return None
    return (f"resverify.blocks.replay_example(RECIPE, {record.law!r}, {record.dtype!r}, "
            f"{record.mode!r}, resverify.blocks.{record.draw!r})")


def recipe_ref(recipe: Recipe) -> tuple[str, str | None] | None:
    """``(selector, block)`` naming ``recipe`` on the command line: a catalog recipe by its
    name; another by the ``module:attr`` of the module its factory was written in that
    holds it (itself, or in a list, tuple or mapping: then ``block`` is its name); None when
    no module-level name holds it."""
    module = getattr(maker(recipe), "__module__", "") or ""
    if module.startswith("resverify.blocks.catalog"):
        return recipe.name, None
    found = sys.modules.get(module)
    for attr, value in sorted(vars(found).items()) if found is not None else ():
        if value is recipe:
            return f"{module}:{attr}", None
        if any(item is recipe for item in _items(value)):
            return f"{module}:{attr}", recipe.name
    return None


def _items(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.values())
    return list(value) if isinstance(value, (list, tuple)) else []
