"""Hypothesis profiles for the property suite, registered here and nowhere else.

``dev``       a quick local look: 5 examples a test (a fifth of ``ci``), shrinking capped
              at 10 examples, random seeds, the example database on (a failure found
              once is tried first next time). It finds gross bugs in seconds, not the
              rare ones ``ci`` is there for.
``ci``        seeded, no example database, no deadline, 25 examples a test, shrinking
              capped at 50 examples: the same run for the same seed. The seed is
              pytest's ``--hypothesis-seed N`` (which ``resverify check --seed N``
              passes), else :data:`CI_SEED`, set by the plugin
              (:func:`resverify.properties.plugin.pytest_configure`); the whole suite
              against the NumPy reference takes about 20 s on 2 cores.
``thorough``  many examples, for a nightly job or before a release; shrinking is not capped
              (Hypothesis stops by itself after 500 shrinks or five minutes).
``generated`` ``ci`` without the pinned examples (Hypothesis' explicit phase): the same seeded
              draws, so what generation alone reaches and catches can be measured
              (``tools/mutants.py --profile generated`` scores the mutants on it); not
              for verdicts, which the pinned examples are part of.
``extremes``  opt-in: random seeds and the database as under ``dev``, 100 examples a
              test, and the plugin has the strategies draw every element
              from huge, tiny, subnormal and signed-zero values of the dtype instead of
              the sensible default range (:data:`EXTREME_PROFILES`; the strategies take
              the range as a parameter and never read the profile). Shrinking capped
              at 50 examples, as under ``ci``.

Selection, first match wins: pytest's ``--hypothesis-profile NAME`` (Hypothesis' own
option), then the environment variable ``RESVERIFY_PROFILE``, then ``ci``. ``ci`` is the
default everywhere, not only on CI machines, so that ``make test`` is the same fast,
reproducible run for everyone; ``dev`` (random seeds) and ``thorough`` are opt-in.

Why shrinking is capped, and how: once a counterexample is found, Hypothesis shrinks it
until it stops getting smaller, one example after another; an example of this suite may
take a second (exact arithmetic), so one failure could shrink for Hypothesis' own limit of
five minutes, in silence. Hypothesis has no public setting that bounds shrinking other than
leaving out its ``shrink`` phase, so the cap is resverify's: :data:`SHRINK_LIMITS` is how
many examples a test may run after its first counterexample, and the plugin
(:class:`resverify.properties.plugin.PropertyRun`) stops running new ones past it, keeping
the smallest counterexample found so far. A cap in examples, not seconds, keeps the saved
vector the same for the same seed on a fast machine and a slow one. The capped profiles
also leave out Hypothesis' ``explain`` phase (hundreds of reruns of the shrunk example).

No profile is derandomized: Hypothesis ignores the seed of a derandomized test, and
``--hypothesis-seed`` must change the examples of every profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hypothesis import HealthCheck, Phase, settings

from resverify.spec.errors import UsageError

__all__ = ["CI_SEED", "PROFILES", "active_profile", "shrink_limit"]

# Health checks stay on, except this one, which fires on every property test by design:
# ``prop`` (and ``backend``) are function-scoped fixtures shared by all the examples of a
# test, on purpose, since ``prop`` counts those examples (properties/plugin.py). Tried
# without it under ci, dev, thorough and extremes: no other health check fires.
_QUIET_CHECKS = (HealthCheck.function_scoped_fixture,)

# Hypothesis' own defaults as the parent, whatever profile is loaded when this module is
# imported: with ``CI`` set, Hypothesis loads its derandomized ``ci`` profile, and settings
# made without a parent would inherit ``derandomize=True`` from it.
_BASE = settings(settings.get_profile("default"), deadline=None, derandomize=False,
                 suppress_health_check=_QUIET_CHECKS)

# Hypothesis' explain phase runs the shrunk counterexample again with each part of it
# varied, to say which parts do not matter: often hundreds of runs of an example that
# reads the same; the profiles that cap shrinking leave it out (the vector says enough).
_CAPPED = settings(_BASE, phases=tuple(p for p in Phase if p is not Phase.explain))

PROFILES: Mapping[str, settings] = {
    "dev": settings(_CAPPED, max_examples=5),
    "ci": settings(_CAPPED, max_examples=25, database=None, print_blob=True),
    "generated": settings(_CAPPED, max_examples=25, database=None, print_blob=True,
                          phases=tuple(p for p in _CAPPED.phases if p is not Phase.explicit)),
    "thorough": settings(_BASE, max_examples=400),
    "extremes": settings(_CAPPED, max_examples=100),
}
SHRINK_LIMITS: Mapping[str, int | None] = {"dev": 10, "ci": 50, "generated": 50,
                                           "thorough": None, "extremes": 50}
"""Examples a test may run after its first counterexample, per profile (None: no cap)."""
DEFAULT = "ci"
SEEDED = frozenset({"ci", "generated"})  # profiles that get CI_SEED when no seed is given
CI_SEED = 0
EXTREME_PROFILES = frozenset({"extremes"})  # profiles whose strategies draw extreme values

for _name, _profile in PROFILES.items():
    settings.register_profile(_name, _profile)


def default_profile(environ: Mapping[str, str] | None = None) -> str:
    """The profile used when pytest got no ``--hypothesis-profile``."""
    env = os.environ if environ is None else environ
    chosen = env.get("RESVERIFY_PROFILE") or DEFAULT
    if chosen not in PROFILES:
        raise UsageError(f"unknown Hypothesis profile {chosen!r} in RESVERIFY_PROFILE; "
                         f"use one of {sorted(PROFILES)}")
    return chosen


def load_profile(name: str) -> None:
    """Make ``name`` the active Hypothesis profile (UsageError for unknown names)."""
    if name not in PROFILES:
        raise UsageError(f"unknown Hypothesis profile {name!r}; use one of {sorted(PROFILES)}")
    settings.load_profile(name)


def active_profile() -> str:
    """The name of the resverify profile loaded now.

    Hypothesis' ``--hypothesis-verbosity`` and ``--hypothesis-explain`` load a copy named
    ``<profile>-with-...``; that copy is still the profile it was made from.
    """
    name = settings.get_current_profile_name()
    return next((p for p in PROFILES if name.startswith(f"{p}-with-")), name)



SPLIT_FACTOR = 2
"""A law split into several tests runs this many times the examples of an unsplit law."""


def share(parts: int) -> settings:
    """Settings for one of ``parts`` tests that split one law between them (a law split
    by family, the marker ``families``): :data:`SPLIT_FACTOR` times the active profile's
    examples, divided by ``parts`` and rounded up (under ``ci``, 25 examples a law become
    8 for each of 7 families). Read when the test module is imported, after the profile is
    loaded. Why more than an even share: each test's first example is Hypothesis' simplest,
    and a share of 4 leaves 3 drawn ones, too few to meet the shapes a family's bugs need
    (a linear layer over an input of rank 3)."""
    current = settings()
    return settings(current, max_examples=split_examples(current.max_examples, parts))


def split_examples(examples: int, parts: int) -> int:
    """The examples of one of ``parts`` tests splitting a law whose profile asks
    ``examples``: :data:`SPLIT_FACTOR` times them, divided by ``parts``, rounded up."""
    return max(1, -(-examples * SPLIT_FACTOR // parts))


def shrink_limit(name: str) -> int | None:
    """How many examples a test may run after its first counterexample under profile
    ``name`` (a copy ``<profile>-with-...`` counts as its profile; None: no cap)."""
    base = next((p for p in PROFILES if name == p or name.startswith(f"{p}-with-")), name)
    return SHRINK_LIMITS.get(base)
