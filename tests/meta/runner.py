"""The shape every meta-test shares: run one property of the suite, as it is, against one
backend, and demand that it fails on a broken backend and passes on the bug-free bases.

A property is only as good as the bugs it catches, and a catch only counts if the same
property passes where the bug is absent. The catches are not listed here: every entry of
the catalog (:mod:`tests.mutants`) declares the laws that must kill it, and
:func:`catches` reads them, split by the laws of each meta-test module
(``test_meta_properties``, ``test_meta_norm``, ``test_meta_jvp``). Every entry is built on
the one :class:`~tests.mutants.base.Mutant`, the bug-free base
:func:`assert_passes_on_the_bases` runs.

Hypothesis binds a test's settings when ``@given`` runs, so :func:`run_property` swaps
the bound settings object for the duration of one call (``_hypothesis_internal_use_settings``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Collection, Iterable, Iterator
from functools import cache
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from hypothesis import Phase, settings

from resverify import properties
from resverify.impl.backend import Backend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import PROFILES, split_examples
from resverify.properties.strategies import claiming, drawing, leading
from tests import mutants as catalog

CATCH = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 phases=(Phase.explicit, Phase.generate))
"""Pinned examples, then 60 derandomized generated ones, no shrinking: a catch is quick."""
CONTROL = settings(CATCH, max_examples=6)
GENERATED_ONLY = settings(CATCH, phases=(Phase.generate,))
CI_GENERATED = settings(PROFILES["ci"], phases=(Phase.generate,))
"""The ci profile without its pinned examples: a bug found by drawn programs alone."""

BASES: tuple[type[Backend], ...] = (catalog.Mutant,)
"""The bug-free base every entry of the catalog is built on."""

Catch = tuple[str, str, type[Backend], str]
"""(property, dtype, broken backend the property must catch in that dtype, the failure kind
the catch must show)."""


@cache
def property_tests() -> dict[str, Callable[..., None]]:
    """Every property test of the suite by law name (``test_`` dropped)."""
    found: dict[str, Callable[..., None]] = {}
    for info in pkgutil.iter_modules(properties.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"resverify.properties.{info.name}")
            for name, fn in inspect.getmembers(module, inspect.isfunction):
                if name.startswith("test_") and fn.__module__ == module.__name__:
                    found[name.removeprefix("test_")] = fn
    return found


def needed_ops(test: Callable[..., None]) -> set[str]:
    """The ops a property's ``needs`` marker names (it is not run where one is unclaimed)."""
    marks = getattr(test, "pytestmark", [])
    return {op for mark in marks if mark.name == "needs" for op in mark.args}


def _failures(exc: BaseException) -> Iterator[PropertyFailure]:
    if isinstance(exc, PropertyFailure):
        yield exc
    for inner in getattr(exc, "exceptions", ()):
        yield from _failures(inner)


def split_families(test: Callable[..., None]) -> tuple[str, ...]:
    """The branch families a law is split by (its ``families`` marker), or none."""
    return tuple(f for mark in getattr(test, "pytestmark", []) if mark.name == "families"
                 for f in mark.args)


def run_property(name: str, backend: Backend, dtype: str, chosen: settings,
                 run: PropertyRun | None = None) -> PropertyFailure | None:
    """Run one property test against ``backend``, its examples counted in ``run`` as the
    plugin counts them; the PropertyFailure it raised, or None. A law split by family (the
    marker ``families``) runs as the suite runs it: one run per family, each beginning its
    stacks with that family and given its share of ``chosen``'s examples, until one fails."""
    test: Any = property_tests()[name]
    run = PropertyRun(name, backend.name, backend) if run is None else run
    families = split_families(test) or (None,)
    share = settings(chosen, max_examples=split_examples(chosen.max_examples, len(families)))
    for family in families:
        failure = _run_once(test, backend, dtype, share if family else chosen, run, family)
        if failure is not None:
            return failure
    return None


def _run_once(test: Any, backend: Backend, dtype: str, chosen: settings, run: PropertyRun,
              family: str | None) -> PropertyFailure | None:
    bound = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = chosen
    try:
        with (claiming(backend.capabilities.ops), drawing(dtype), leading(family),
              run.counting(test)):
            test(backend=backend, dtype=dtype, prop=run)
    except BaseException as exc:
        failure = next(_failures(exc), None)
        if failure is None:
            raise
        return failure
    finally:
        test._hypothesis_internal_use_settings = bound
    return None


def jvp_laws() -> set[str]:
    """The forward-mode laws (``properties/test_jvp.py``): ``test_meta_jvp`` runs their kills."""
    return {law for law, fn in property_tests().items() if fn.__module__.endswith(".test_jvp")}


def norm_laws() -> set[str]:
    """The normalization laws: every property of ``properties/test_norm.py``, and the
    variance and depth laws that run through a norm (``test_meta_norm`` runs their kills)."""
    return {law for law, fn in property_tests().items()
            if fn.__module__.endswith(".test_norm")
            or (fn.__module__.endswith((".test_variance", ".test_depth"))
                and needed_ops(fn) & {"layer_norm", "rms_norm"})}


def general_laws() -> set[str]:
    """Every other law (``test_meta_properties`` runs their kills)."""
    return set(property_tests()) - jvp_laws() - norm_laws()


def catches(laws: Collection[str], generated: bool = False,
            kills: Iterable[tuple[catalog.Kill, type[catalog.Mutant]]] = catalog.KILLS
            ) -> list[Catch]:
    """The kills the catalog declares (``kills``) for the laws in ``laws``: those checked
    on the pinned and derandomized examples, or with ``generated`` those checked on the ci
    profile's generated examples alone."""
    return [(kill.law, kill.dtype, entry, kill.kind) for kill, entry in kills
            if kill.law in laws and (kill.generated if generated else kill.pinned)]


def statistical(table: Iterable[Catch]) -> list[Catch]:
    """The catches of laws about a variance measured on samples of streams, whose power on
    freshly generated streams is checked too (the sample-variance identity is exact, so
    it is not one of them)."""
    return [c for c in table if "variance" in c[0] and "sample" not in c[0]]


def representatives(table: Iterable[Catch]) -> set[Catch]:
    """The catches of ``table`` the default run keeps: for each law, and for each foil,
    the first of its catches in catalog order (:data:`tests.mutants.KILLS`), so that every
    law and every foil still shows it can fail without the slow run."""
    kept: dict[object, Catch] = {}
    for catch in table:
        kept.setdefault(catch[0], catch)
        if catch[2] in catalog.FOILS:
            kept.setdefault(catch[2], catch)
    return set(kept.values())


def catch_params(table: Iterable[Catch]) -> list[ParameterSet]:
    """``table`` as pytest parameters ``(law, dtype, broken, kind)``, each with the id
    ``law-BrokenClass-dtype``; all but the :func:`representatives` are marked ``slow``
    (``make test-slow`` runs the rest of the kill matrix)."""
    rows = list(table)
    kept = representatives(rows)
    return [pytest.param(law, dtype, broken, kind, id=f"{law}-{broken.__name__}-{dtype}",
                         marks=() if (law, dtype, broken, kind) in kept else pytest.mark.slow)
            for law, dtype, broken, kind in rows]


def assert_caught(law: str, dtype: str, broken: type[Backend], chosen: settings,
                  kind: str | None = None) -> PropertyFailure:
    """Property ``law`` fails on ``broken`` in ``dtype`` under ``chosen``, naming the
    backend (and, given ``kind``, as a failure of that kind: ``law`` for a broken law)."""
    __tracebackhide__ = True
    failure = run_property(law, broken(), dtype, chosen)
    assert failure is not None, (
        f"property {law} passed {chosen.max_examples} examples against {broken.__name__} "
        f"[{dtype}, phases {[p.name for p in chosen.phases]}]: it no longer catches "
        f"'{' '.join((broken.__doc__ or '').split())}'")
    assert broken.name in str(failure), (
        f"failure does not name the backend {broken.name!r}: {failure}")
    assert kind is None or failure.kind == kind, (
        f"caught as {failure.kind}, not as {kind}: {failure} [{law} on {broken.__name__}]")
    return failure


def assert_passes_on_the_bases(law: str, dtype: str = "float64") -> None:
    """Property ``law`` passes on every bug-free base (:data:`BASES`), so a catch is due to
    the planted bug and not to the base."""
    __tracebackhide__ = True
    for base in BASES:
        failure = run_property(law, base(), dtype, CONTROL)
        assert failure is None, f"property {law} fails on the bug-free {base.__name__}: {failure}"
