"""Backends for the report tests, importable from a child process: two reference backends
for the mode tests (one claims reverse mode only, one forward mode too; neither is asked
for a tangent: the mode tests' properties do not call their backend), one that refuses
every request (the plots' gap tests), and :func:`many_backends` for a report on ten."""

from __future__ import annotations

from resverify.impl import NumpyBackend
from resverify.impl.backend import Capabilities
from resverify.spec.ir import DTYPES
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


class _Named(NumpyBackend):
    """A reference backend with its own name and claims (never run: the report tests that
    use it read only its name and capabilities)."""

    def __init__(self, name: str, capabilities: Capabilities) -> None:
        self.name, self.capabilities = name, capabilities


def many_backends(count: int = 10) -> list[NumpyBackend]:
    """``count`` backends ``engine-0`` … claiming all four dtypes, the even ones forward mode
    too, the last one without bfloat16."""
    return [_Named(f"engine-{i}", Capabilities(
        dtypes=DTYPES[:3] if i == count - 1 else DTYPES,
        modes=("vjp", "jvp") if i % 2 == 0 else ("vjp",))) for i in range(count)]
