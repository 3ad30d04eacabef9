"""What a backend is: a name, declared capabilities, and ``run(request) -> result``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

from resverify.spec.errors import InvalidProgram, ShapeMismatch, UsageError
from resverify.spec.ir import DTYPES, OPS, Node, infer_shapes
from resverify.spec.request import Request, Result, ResultError

DEVICE_PATTERN = re.compile(r"cpu|mps|external|(?:cuda|tpu|xpu)(?::[0-9]+)?")
"""Known device names: ``cpu``, ``cuda``, ``cuda:N``, ``tpu``, ``tpu:N``, ``xpu``, ``xpu:N``,
``mps``, and ``external`` (a ``cmd:`` engine that does not say). The protocol schema's
``device`` pattern is the same set."""


MODES: tuple[str, ...] = ("vjp", "jvp")
"""Differentiation modes a backend may claim: reverse (``vjp``: the gradients of a
cotangent, every backend) and forward (``jvp``: the output tangent of input tangents)."""


@dataclass(frozen=True)
class Capabilities:
    """The dtypes, ops and differentiation modes a backend claims, and its device.

    Every name is checked when the capabilities are made: a dtype outside
    ``resverify.spec.ir.DTYPES``, an op outside ``resverify.spec.ir.OPS``, a mode outside
    :data:`MODES` or an unknown device is a UsageError, so a typo cannot silently claim
    nothing. Every backend answers reverse mode, so ``modes`` must include ``vjp``.
    """

    dtypes: tuple[str, ...] = DTYPES
    ops: tuple[str, ...] = tuple(sorted(OPS))
    device: str = "cpu"
    modes: tuple[str, ...] = ("vjp",)

    def __post_init__(self) -> None:
        for field, names, known in (("dtype", self.dtypes, DTYPES), ("op", self.ops, OPS),
                                    ("mode", self.modes, MODES)):
            if isinstance(names, str) or not names:
                raise UsageError(f"capabilities need a non-empty list of {field}s, got {names!r}")
            unknown = [n for n in names if n not in known]
            if unknown:
                raise UsageError(
                    f"unknown {field} name(s) {unknown} in capabilities; known: {sorted(known)}")
        if not isinstance(self.device, str) or not DEVICE_PATTERN.fullmatch(self.device):
            raise UsageError(
                f"unknown device {self.device!r} in capabilities; known: cpu, cuda, cuda:N, "
                "tpu, tpu:N, xpu, xpu:N, mps, external")
        if "vjp" not in self.modes:
            raise UsageError(f"capabilities must claim mode 'vjp' (got {list(self.modes)}): "
                             "every backend answers reverse mode")
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "modes", tuple(self.modes))

    def covers(self, request: Request) -> str | None:
        """None when the request is within the claims, else the reason it is not."""
        if request.dtype not in self.dtypes:
            return f"dtype {request.dtype} not claimed (claims {list(self.dtypes)})"
        if request.forward_mode and "jvp" not in self.modes:
            return f"mode jvp not claimed (claims {list(self.modes)})"
        missing = sorted({n.op for n in request.program.nodes} - set(self.ops))
        return f"op(s) {missing} not claimed" if missing else None

    def unclaimed(self, request: Request, backend: str) -> ResultError | None:
        """The ``unsupported`` answer for a request outside the claims, else None."""
        reason = self.covers(request)
        return None if reason is None else ResultError("unsupported", f"{backend}: {reason}")

    def refusal(self, request: Request, backend: str) -> ResultError | None:
        """:meth:`unclaimed`, else the ``shape_mismatch`` answer for a shape-invalid program,
        else None: for adapters that build a whole program before running it, so no
        interpreter meets the bad shapes and raises on its own."""
        refused = self.unclaimed(request, backend)
        if refused is not None:
            return refused
        try:
            infer_shapes(request.program)
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        return None


def scale_alpha(node: Node) -> Fraction:
    """The exact α of a ``scale`` node; a missing one is an error, never a silent 0."""
    if node.alpha is None:
        raise InvalidProgram(f"node {node.name!r}: scale needs an alpha")
    return node.alpha


@runtime_checkable
class Backend(Protocol):
    """Anything with a name, capabilities and a ``run`` method is a backend."""

    name: str
    capabilities: Capabilities

    def run(self, request: Request) -> Result: ...
