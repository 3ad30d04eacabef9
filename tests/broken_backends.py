"""The old import path of the reverse-mode foils, kept so that existing imports and
``--backend tests.broken_backends:X`` keep working.

The foils now live in the one catalog (:mod:`tests.mutants`, module
:mod:`tests.mutants.foils`) on its one base; ``Reference`` is that base,
:class:`tests.mutants.base.Mutant`, under the name these imports knew. New code imports
from :mod:`tests.mutants`.
"""

from __future__ import annotations

from tests.mutants.base import Mutant as Reference
from tests.mutants.foils import *  # noqa: F403
from tests.mutants.foils import __all__ as _FOILS

__all__ = ["Reference", *_FOILS]
