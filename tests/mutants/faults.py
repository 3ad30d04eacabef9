"""Mutants of the answers and of the statistics: wrong error kinds and shapes, refusals of
valid requests, a crash, and updates that are not independent or not scaled.

Each class plants one bug, named in the first line of its docstring.
"""

from __future__ import annotations

import os

from resverify.impl.numpy_backend import apply
from resverify.impl.tensor import Tensor
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.request import Request, Result, ResultError
from tests.mutants.base import Kill, Mutant

__all__ = [
    "CrashOnWideLinear", "MismatchAsBackendError", "RaisesOnMismatch", "ScaleIgnoredPastDepth8",
    "StaleBranchPastDepth4", "SwappedMismatchShapes", "UnsupportedForEmpty",
]


class MismatchAsBackendError(Mutant):
    """A refused merge is reported as ``backend_error`` (a catch-all handler), not
    ``shape_mismatch``."""

    name = "mutant-mismatch-as-backend-error"
    bug_class = "errors"
    kills = (Kill("residual_add_rejects_every_shape_mismatch"),)

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        return ResultError("backend_error", str(exc))


class SwappedMismatchShapes(Mutant):
    """The shape_mismatch error names the two shapes in the wrong order."""

    name = "mutant-swapped-mismatch-shapes"
    bug_class = "errors"
    kills = (Kill("shape_mismatch_names_both_shapes_in_order"),)

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        return ResultError("shape_mismatch", str(exc), (exc.right, exc.left))


class RaisesOnMismatch(Mutant):
    """A refused merge raises ValueError out of run() instead of answering shape_mismatch."""

    name = "mutant-raises-on-mismatch"
    bug_class = "errors"
    kills = (Kill("residual_add_rejects_every_shape_mismatch", kind="raised"),)

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        raise ValueError(f"operands could not be broadcast together: {exc}")


class UnsupportedForEmpty(Mutant):
    """A request with an empty input array is answered ``unsupported`` (a kernel that
    cannot launch on zero elements): wrong only for empty arrays."""

    name = "mutant-unsupported-empty"
    bug_class = "errors"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth", kind="refused"),)

    def run(self, request: Request) -> Result:
        if any(v.size == 0 for v in request.inputs.values()):
            return ResultError("unsupported", f"{self.name}: empty arrays are not supported")
        return super().run(request)


class CrashOnWideLinear(Mutant):
    """The process dies (``os._exit``, as a segfaulting kernel) on a linear layer with
    d_in > 64: narrow layers are right."""

    name = "mutant-crash-wide-linear"
    bug_class = "errors"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "linear" and args[1].shape[0] > 64:
            os._exit(70)
        return apply(node, args)


class StaleBranchPastDepth4(Mutant):
    """Past the fourth merge, each merge reads the previous block's branch buffer (a loop
    that reuses a stale update): only deep stacks get correlated updates."""

    name = "mutant-stale-branch-depth"
    bug_class = "statistics"
    kills = (Kill("residual_stack_gradient_is_one_plus_a_to_the_depth"),)

    def run(self, request: Request) -> Result:
        self.merges: list[Tensor] = []
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "residual_add" and args[0].shape == args[1].shape:
            self.merges.append(args[1])
            if len(self.merges) > 4:
                return apply(node, [args[0], self.merges[-2]])
        return apply(node, args)


class ScaleIgnoredPastDepth8(Mutant):
    """Past the eighth scale node of a program, scale is skipped as a no-op (a 1/√L
    rescaling that never reaches deep stacks)."""

    name = "mutant-scale-ignored-depth"
    bug_class = "statistics"
    kills = (Kill("inverse_sqrt_depth_scaling_keeps_unit_variance"),)

    def run(self, request: Request) -> Result:
        self.scales = 0
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "scale":
            self.scales += 1
            if self.scales > 8:
                (a,) = args
                return Tensor(a.value.copy(), (a,), lambda g: (g,), "scale")
        return apply(node, args)
