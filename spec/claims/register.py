"""Declaring claims: one decorator on the function that observes each claim.

Why: a claim is read as one block: its id, its section, its statement, the value it expects
and the function that observes it. The decorator sits on that function, registers the
:class:`~resverify.spec.claims.model.Claim` with its seed document's :class:`SeedClaims`
(in declaration order) and returns the function unchanged::

    ROLES = SEED.section("Не смешивайте роли …", "Do not mix up the roles …", "ru")

    @SEED.claim("S05", ROLES, "The merge neither concatenates nor normalizes.",
                expected={"output_shape": (2,), "output_mean": frac("-9/8"), …})
    def _s05(interp: Interpreter) -> dict[str, object]:
        run = interp(fixtures.linear_block_request())
        …

Three kinds, by what the decorated function observes:

* :meth:`SeedClaims.claim` — ``f(interp)``, one observation written against an
  :data:`~resverify.spec.claims.model.Interpreter` and made on both sides: exactly, and
  on each backend. Keys that only one side can observe are data on the same record:
  ``exact_also={key: f()}`` (a SymPy fact, the spec's own message) and
  ``backend_also={key: f(run)}`` (what a refusal leaves behind). ``expected`` lists every
  key, in the order the observation shows them; each side is judged on its own keys.
* :meth:`SeedClaims.exact_claim` — ``f()``, a law of the spec with no backend side.
* :meth:`SeedClaims.backend_claim` — ``f(run)``, a backend's raw answers (bit patterns,
  float32 values) that the exact interpreter has no counterpart of; ``exact=`` is the exact
  side's own observation and ``backend_expected`` the backend's expected value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from resverify.spec.claims.model import (
    Claim,
    Interpreter,
    Runner,
    Section,
    backend_interpreter,
    exact_run,
)

__all__ = []

Observe = Callable[[Interpreter], object]
Law = TypeVar("Law", bound=Callable[[], object])
Raw = TypeVar("Raw", bound=Callable[[Runner], object])


def _only(expected: object, keys: Mapping[str, object]) -> object:
    """``expected`` without ``keys`` (those another side observes)."""
    if not keys:
        return expected
    assert isinstance(expected, dict), "side-only keys need a dict of expected values"
    missing = set(keys) - set(expected)
    assert not missing, f"side-only keys {sorted(missing)} have no expected value"
    return {k: v for k, v in expected.items() if k not in keys}


def _joined(shared: object, extra: Mapping[str, object], order: tuple[str, ...]) -> object:
    """One side's observation: the shared one and that side's own keys, in ``order``."""
    if not extra:
        return shared
    assert isinstance(shared, dict), "side-only keys extend a dict observation"
    both = {**shared, **extra}
    return {**{k: both[k] for k in order if k in both}, **both}


class SeedClaims:
    """The claims of one seed document, registered by decorators in declaration order."""

    def __init__(self, file: str) -> None:
        self.file = file
        self._claims: list[Claim] = []

    @property
    def claims(self) -> tuple[Claim, ...]:
        return tuple(self._claims)

    def section(self, heading: str, english: str, language: str) -> Section:
        """A section of this document: its heading as written, our translation, its language."""
        return Section(self.file, heading, english, language)

    def _add(self, claim: Claim) -> None:
        assert claim.source.file == self.file, f"{claim.id} cites {claim.source.file}"
        assert all(c.id != claim.id for c in self._claims), f"{claim.id} declared twice"
        self._claims.append(claim)

    def claim(self, id_: str, source: Section, statement: str, *, expected: object,
              exact_also: Mapping[str, Callable[[], object]] | None = None,
              backend_also: Mapping[str, Callable[[Runner], object]] | None = None,
              note: str = "") -> Callable[[Observe], Observe]:
        """One observation ``f(interp)`` made exactly and on each backend."""
        exact_keys, backend_keys = dict(exact_also or {}), dict(backend_also or {})
        order = tuple(expected) if isinstance(expected, dict) else ()
        exact_expected = _only(expected, backend_keys)
        backend_expected = _only(expected, exact_keys)

        def register(observe: Observe) -> Observe:
            def check() -> object:
                return _joined(observe(exact_run),
                               {k: f() for k, f in exact_keys.items()}, order)

            def backend(run: Runner) -> object:
                return _joined(observe(backend_interpreter(run)),
                               {k: f(run) for k, f in backend_keys.items()}, order)

            self._add(Claim(id_, source, statement, exact_expected, check, backend,
                            None if backend_expected == exact_expected else backend_expected,
                            note, (observe, *exact_keys.values(), *backend_keys.values())))
            return observe

        return register

    def exact_claim(self, id_: str, source: Section, statement: str, *, expected: object,
                    note: str = "") -> Callable[[Law], Law]:
        """A law of the spec ``f()``, checked exactly; no backend side."""

        def register(observe: Law) -> Law:
            self._add(Claim(id_, source, statement, expected, observe, None, None, note,
                            (observe,)))
            return observe

        return register

    def backend_claim(self, id_: str, source: Section, statement: str, *, expected: object,
                      exact: Callable[[], object], backend_expected: object = None,
                      note: str = "") -> Callable[[Raw], Raw]:
        """A backend's raw answers ``f(run)``; ``exact()`` observes the exact side."""

        def register(observe: Raw) -> Raw:
            self._add(Claim(id_, source, statement, expected, exact, observe,
                            backend_expected, note, (observe, exact)))
            return observe

        return register
