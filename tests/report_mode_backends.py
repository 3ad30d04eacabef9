"""Two reference backends for the report's mode tests: one claims reverse mode only, one
claims forward mode too (neither is asked for a tangent: the mode tests' properties do
not call their backend)."""

from __future__ import annotations

from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities

REVERSE_ONLY = "reverse-only"
BOTH = "both-modes"


class ReverseOnly(NumpyBackend):
    name = REVERSE_ONLY
    capabilities = Capabilities(dtypes=("float64", "float32"), modes=("vjp",))


class BothModes(NumpyBackend):
    name = BOTH
    capabilities = Capabilities(dtypes=("float64", "float32"), modes=("vjp", "jvp"))
