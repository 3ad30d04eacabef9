"""The old import path of the forward-mode foils, kept so that existing imports and
``--backend tests.broken_jvp_backends:X`` keep working; they now live in the catalog's
:mod:`tests.mutants.foils_forward`. New code imports from :mod:`tests.mutants`.
"""

from __future__ import annotations

from tests.mutants.foils_forward import *  # noqa: F403
from tests.mutants.foils_forward import __all__ as __all__
