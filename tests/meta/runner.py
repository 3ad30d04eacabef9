"""The shape every meta-test shares: run one property of the suite, as it is, against one
backend, and demand that it fails on a broken backend and passes on the bug-free bases.

A property is only as good as the bugs it catches, and a catch only counts if the same
property passes where the bug is absent. The meta-test modules (``test_meta_properties``,
``test_meta_norm``, ``test_meta_jvp``) list ``(property, dtype, broken backend)`` triples;
this module runs them. The broken backends come from the mutant catalog
(:mod:`tests.mutants`) where the catalog plants the bug, else from
``tests/broken_*backends.py``; so the bug-free bases are both :class:`Mutant` and
:class:`tests.broken_backends.Reference`, and :func:`assert_passes_on_the_bases` runs both.

Hypothesis binds a test's settings when ``@given`` runs, so :func:`run_property` swaps
the bound settings object for the duration of one call (``_hypothesis_internal_use_settings``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest
from _pytest.mark import ParameterSet
from hypothesis import Phase, settings

from resverify import properties
from resverify.impl.backend import Backend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import PROFILES
from resverify.properties.strategies import claiming, drawing
from tests import mutants as catalog
from tests.broken_backends import Reference

CATCH = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 phases=(Phase.explicit, Phase.generate))
"""Pinned examples, then 60 derandomized generated ones, no shrinking: a catch is quick."""
CONTROL = settings(CATCH, max_examples=6)
GENERATED_ONLY = settings(CATCH, phases=(Phase.generate,))
CI_GENERATED = settings(PROFILES["ci"], phases=(Phase.generate,))
"""The ci profile without its pinned examples: a bug found by drawn programs alone."""

BASES: tuple[type[Backend], ...] = (Reference, catalog.Mutant)
"""The bug-free bases the broken backends are built on (tests' and the catalog's)."""

Catch = tuple[str, str, type[Backend]]
"""(property, dtype, broken backend the property must catch in that dtype)."""


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


def run_property(name: str, backend: Backend, dtype: str, chosen: settings,
                 run: PropertyRun | None = None) -> PropertyFailure | None:
    """Run one property test against ``backend``, its examples counted in ``run`` as the
    plugin counts them; the PropertyFailure it raised, or None."""
    test: Any = property_tests()[name]
    run = PropertyRun(name, backend.name, backend) if run is None else run
    bound = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = chosen
    try:
        with (claiming(backend.capabilities.ops), drawing(dtype),
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


def catch_params(catches: Iterable[Catch]) -> list[ParameterSet]:
    """``catches`` as pytest parameters ``(law, dtype, broken)``, each with the id
    ``law-BrokenClass-dtype``."""
    return [pytest.param(law, dtype, broken, id=f"{law}-{broken.__name__}-{dtype}")
            for law, dtype, broken in catches]


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


def unplanted(pool: Sequence[type[Backend]], catches: Iterable[Catch]) -> list[str]:
    """The broken backends of ``pool`` that no entry of ``catches`` uses (sorted names)."""
    used = {broken for _, _, broken in catches}
    return sorted(b.__name__ for b in set(pool) - used)


def strays(catches: Iterable[Catch], *pools: Sequence[type[Backend]]) -> list[str]:
    """The broken backends ``catches`` uses that are in none of ``pools`` (sorted names)."""
    known = {b for pool in pools for b in pool}
    return sorted(b.__name__ for b in {broken for _, _, broken in catches} - known)
