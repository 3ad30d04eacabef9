"""What a backend is: a name, declared capabilities, and ``run(request) -> result``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from spec.ir import DTYPES, OPS
from spec.request import Request, Result


@dataclass(frozen=True)
class Capabilities:
    """The dtypes and ops a backend claims, and the device it runs on."""

    dtypes: tuple[str, ...] = DTYPES
    ops: tuple[str, ...] = tuple(sorted(OPS))
    device: str = "cpu"

    def covers(self, request: Request) -> str | None:
        """None when the request is within the claims, else the reason it is not."""
        if request.dtype not in self.dtypes:
            return f"dtype {request.dtype} not claimed (claims {list(self.dtypes)})"
        missing = sorted({n.op for n in request.program.nodes} - set(self.ops))
        return f"op(s) {missing} not claimed" if missing else None


@runtime_checkable
class Backend(Protocol):
    """Anything with a name, capabilities and a ``run`` method is a backend."""

    name: str
    capabilities: Capabilities

    def run(self, request: Request) -> Result: ...
