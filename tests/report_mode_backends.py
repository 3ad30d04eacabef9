"""Backends for the report tests, importable from a child process: two reference backends
for the mode tests (one claims reverse mode only, one forward mode too; neither is asked
for a tangent: the mode tests' properties do not call their backend), and one that
refuses every request (the plots' gap tests)."""

from __future__ import annotations

from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities
from resverify.spec.request import Request, Result, ResultError

REVERSE_ONLY = "reverse-only"
BOTH = "both-modes"


class ReverseOnly(NumpyBackend):
    name = REVERSE_ONLY
    capabilities = Capabilities(dtypes=("float64", "float32"), modes=("vjp",))


class BothModes(NumpyBackend):
    name = BOTH
    capabilities = Capabilities(dtypes=("float64", "float32"), modes=("vjp", "jvp"))


class Refusing(NumpyBackend):
    """Refuses every request, as an engine with an unsupported feature would (the plots'
    gap tests)."""

    name = "refusing"

    def run(self, request: Request) -> Result:
        return ResultError("unsupported", "refusing: not today")
