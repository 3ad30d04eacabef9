"""Where a budget stops bounding: the nodes at which a value's bound first turns infinite.

Why: a real layer judged in a narrow dtype may get an infinite bound on most elements
("partly judged"), and the reason is one node's rule far upstream (a norm whose variance's
lower bound reached 0, a sum whose magnitude reached the dtype's largest value), not the
element that shows it. :func:`origins` runs the budget's forward and reverse passes
(:mod:`resverify.spec.budget`) and names every node whose own bound is infinite somewhere
while all it was given is finite, in the order the passes meet them, with the first node
whose bound became at least as large as its value (where the analysis stopped carrying
information, often long before the bound is infinite).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resverify.spec.budget import _accumulate, _leaf, _site, contexts
from resverify.spec.exact import ExactResult, Trace, evaluate
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request
from resverify.spec.rounding import LARGEST, Bound, Ctx

__all__: list[str] = []  # read by tools/exact_unbounded.py only


@dataclass(frozen=True)
class Origin:
    """One node whose bound is infinite on ``count`` of its ``size`` elements while its
    arguments' (and, in reverse, its cotangent's) are finite everywhere."""

    where: str
    """``forward`` (the node's value), ``reverse`` (the gradient of the argument ``into``
    through the node), ``parts`` (the node's gradient parts summed) or ``loose`` (the
    first node whose error bound reaches its magnitude: not infinite, but no information)."""
    node: str
    op: str
    dtype: str
    count: int
    size: int
    reason: str
    into: str = ""

    def __str__(self) -> str:
        into = f" -> {self.into}" if self.into else ""
        return (f"{self.where}: {self.node}{into} ({self.op}, {self.dtype}): {self.count} of "
                f"{self.size} elements; {self.reason}")


def _infinite(b: Bound) -> int:
    return int(np.sum(~np.isfinite(b.err)))


def _reason(b: Bound, dtype: str) -> str:
    """Overflow (the magnitude may reach the dtype's largest value) or the rule itself."""
    bad = ~np.isfinite(b.err)
    if bool(np.any(b.mag[bad] >= LARGEST[dtype])):
        return f"its magnitude reaches {dtype}'s largest finite value"
    return "its rule gives no finite bound (largest magnitude " \
        f"{float(np.max(b.mag[bad], initial=0.0)):.3g})"


@np.errstate(over="ignore", invalid="ignore")
def origins(request: Request, dtype: str | None = None, *,
            exact: ExactResult | None = None) -> list[Origin]:
    """The nodes where ``request``'s budget in ``dtype`` first turns infinite, forward then
    reverse (empty when every bound is finite), and the first node whose error bound reaches
    its magnitude somewhere (``loose``), if any. Only requests without a narrower ``dtype``
    than their own (the judged case)."""
    dtype = request.dtype if dtype is None else dtype
    exact = evaluate(request) if exact is None or exact.trace is None else exact
    assert exact.trace is not None and request.cotangent is not None
    ctx, trace = contexts(request, dtype), exact.trace
    bounds = {n: _leaf(ctx[n], v, False) for n, v in request.inputs.items()}
    found: list[Origin] = []
    loose: Origin | None = None
    for node in request.program.order:
        args = [bounds[a] for a in node.args]
        b = bounds[node.name] = OP_TABLE[node.op].budget(ctx[node.name], _site(trace, node),
                                                         args)
        own = ctx[node.name].dtype
        if _infinite(b) and not any(_infinite(a) for a in args):
            found.append(Origin("forward", node.name, node.op, own, _infinite(b), b.err.size,
                                _reason(b, own)))
        wide = int(np.sum(b.err >= np.maximum(b.mag, 0.0) * (b.mag > 0)))
        if loose is None and wide and not _infinite(b):
            loose = Origin("loose", node.name, node.op, own, wide, b.err.size,
                           "error bound at least the magnitude")
    found += _reverse(request, ctx, trace, bounds)
    return found + ([loose] if loose is not None else [])


def _reverse(request: Request, ctx: dict[str, Ctx], trace: Trace, bounds: dict[str, Bound]
             ) -> list[Origin]:
    assert request.cotangent is not None
    out = ctx[request.program.output]
    parts: dict[str, list[Bound]] = {
        request.program.output: [_leaf(out, request.cotangent, False)]}
    found: list[Origin] = []
    for node in reversed(request.program.order):
        if node.name not in parts:
            continue
        own, given = ctx[node.name], parts.pop(node.name)
        g = _accumulate(own, given)
        if _infinite(g) and not any(_infinite(p) for p in given):
            found.append(Origin("parts", node.name, node.op, own.dtype, _infinite(g),
                                g.err.size, f"{len(given)} gradient parts summed"))
        args = [bounds[a] for a in node.args]
        got = OP_TABLE[node.op].budget_vjp(own, _site(trace, node), args, bounds[node.name], g)
        fed = _infinite(g) or _infinite(bounds[node.name]) or any(_infinite(a) for a in args)
        for arg, part in zip(node.args, got, strict=True):
            if _infinite(part) and not fed:
                found.append(Origin("reverse", node.name, node.op, own.dtype, _infinite(part),
                                    part.err.size, _reason(part, own.dtype), arg))
            parts.setdefault(arg, []).append(part)
    return found
