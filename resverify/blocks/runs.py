"""A blocks check as ``resverify blocks check`` asks for it: its options, its steps, its runs.

Why a module of the blocks package: what the command decides (which profile, dtypes, laws
and paths exist, which ``(law, dtype, mode)`` a block is checked in, whether each recipe is
one its block agrees with) and what it runs (a block's laws, through
:func:`~.check.run_laws`, and the library that built it) are the blocks package's; the
command line (:mod:`resverify.cli.blocks`) only parses its arguments into :func:`options`
and prints what comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from resverify.blocks import check
from resverify.blocks.laws import LAWS
from resverify.blocks.laws_paths import PATHS
from resverify.blocks.library import library_of
from resverify.blocks.recipe import DTYPES, Recipe
from resverify.blocks.records import LawRecord
from resverify.properties.profiles import CI_SEED, PROFILES
from resverify.spec.errors import UsageError

__all__ = ["Options", "check_recipe", "options", "steps", "validate_all"]


@dataclass(frozen=True)
class Options:
    """A check's choices, each known to exist: the profile and its examples a law, the
    seed, and the dtypes, laws and paths asked for (none: every one that applies)."""

    profile: str
    examples: int
    seed: int
    dtypes: list[str]
    laws: list[str]
    paths: tuple[str, ...]


def options(profile: str, seed: int | None, dtypes: Sequence[str], laws: Sequence[str],
            paths: str) -> Options:
    """The options of a check, ``paths`` comma-separated; a one-line UsageError for an
    unknown profile, dtype, law or path."""
    if profile not in PROFILES:
        raise UsageError(f"unknown Hypothesis profile {profile!r}; use one of "
                         f"{sorted(PROFILES)}")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise UsageError(f"unknown dtype {bad[0]!r}; use one of {list(DTYPES)}")
    bad = [law for law in laws if law not in LAWS]
    if bad:
        raise UsageError(f"unknown law {bad[0]!r}; use some of {list(LAWS)}")
    asked = tuple(dict.fromkeys(p.strip() for p in paths.split(",") if p.strip()))
    unknown = [p for p in asked if p not in PATHS]
    if unknown:
        raise UsageError(f"unknown path {unknown[0]!r} in --paths; use some of {list(PATHS)}")
    return Options(profile, int(PROFILES[profile].max_examples),
                   CI_SEED if seed is None else seed, list(dtypes), list(laws), asked)


def steps(recipe: Recipe, dtypes: Sequence[str], paths: Sequence[str] = (),
          laws: Sequence[str] = ()) -> Iterator[tuple[str, str, str]]:
    """``(law, dtype, mode)`` of every record a check of ``recipe`` makes, in order, law by
    law, root causes first (:func:`~.check.plan`; the paths law only when ``paths`` names
    some), in the claimed dtypes among ``dtypes`` (none: every one claimed); only ``laws``
    when it names some."""
    planned = check.plan(recipe, [d for d in recipe.dtypes if not dtypes or d in dtypes], None,
                         paths)
    yield from (step for step in planned if not laws or step[0] in laws)


def validate_all(recipes: Iterable[Recipe], dtypes: Sequence[str], seed: int) -> None:
    """Build each recipe's block once, in its first dtype asked for (else its first), so a
    recipe's mistake is its one line before anything runs."""
    for recipe in recipes:
        first = next(iter(d for d in recipe.dtypes if not dtypes or d in dtypes),
                     recipe.dtypes[0])
        check.validate_block(recipe, first, seed)


@dataclass(frozen=True)
class BlockCheck:
    """One block's check: its law run (:class:`~.check.LawRun`) and the library (with its
    version, None where unknown) that built the block."""

    run: check.LawRun
    library: str
    version: str | None


def check_recipe(recipe: Recipe, chosen: Options, vectors: Path,
                 named: tuple[str, str | None] | None = None,
                 said: Callable[[LawRecord, float], None] | None = None) -> BlockCheck:
    """Every step of ``recipe`` (:func:`steps`) judged under ``chosen``, each record
    ``said`` with its seconds as it comes, a failure at a merge saved under ``vectors``
    (:func:`~.check.run_laws`); then the library of the block built in the first dtype
    checked."""
    run = check.run_laws(recipe, steps(recipe, chosen.dtypes, chosen.paths, chosen.laws),
                         examples=chosen.examples, seed=chosen.seed, vectors=vectors,
                         paths=chosen.paths, profile=chosen.profile, named=named, said=said)
    checked = list(dict.fromkeys(r.dtype for r in run.records))
    built = check.validate_block(recipe, checked[0], chosen.seed) if checked else None
    library, version = library_of(recipe, built)
    return BlockCheck(run, library, version)
