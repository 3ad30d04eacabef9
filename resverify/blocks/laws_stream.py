"""What the block does to its stream as data: no aliasing, and the stream's dtype.

Why these are laws and not style: an in-place op in a branch that writes into the tensor the
caller passed changes the identity the block adds (and the caller's copy of it) while every
output still looks plausible; a stream declared float32 that travels between sites in
bfloat16 loses the small updates a wide stream exists to keep. The dtype is pass or fail;
how much of the update the stream loses is a figure, not a verdict: the fraction of each
site's sum bitwise equal to what the update was added to (*swamped*: the update rounded
away; not reported where an activation hides the sum) and the overflow headroom,
``log2(largest finite / largest |stream|)`` over every site.
"""

from __future__ import annotations

import math

import torch

from resverify.blocks.adapters import ask
from resverify.blocks.trace import Case, Observed, first_difference, no_drop

__all__ = []


def no_aliasing(case: Case) -> dict[str, float]:
    """The input tensor (and every extra input) holds the same values after the call, with
    and without ``requires_grad``: nothing in the block writes into what it was given."""
    __tracebackhide__ = True
    for grad in (False, True):
        x = case.inputs.x.detach().clone().requires_grad_(grad)
        ctx = {k: v.clone() for k, v in case.inputs.context.items()}
        with no_drop(case.module, case.recipe), torch.enable_grad():
            case.recipe.run(case.module, x, ctx)
        for name, before, after in [("x", case.inputs.x, x),
                                    *((k, case.inputs.context[k], ctx[k]) for k in ctx)]:
            diff = first_difference(after.detach(), before)
            if diff:
                case.fail("no_aliasing", f"input {name} after the call{diff} (its value "
                          f"before; requires_grad={grad}): the block wrote into its input")
    return {}


def swamped_fraction(case: Case, i: int, seen: Observed, z: torch.Tensor) -> float:
    """The fraction of ``z`` (site ``i``'s sum, or what stands for it) bitwise equal to what
    the site's update was added to: the shortcut of its entry, NaN where that has another
    shape than ``z``."""
    base = ask(case).shortcut(case, i, seen.entries[i])
    if z.shape != base.shape:
        return math.nan
    return float((z.to(torch.float64) == base.to(torch.float64)).to(torch.float64).mean())


def _swamped(case: Case, i: int, seen: Observed) -> float | None:
    """The swamped fraction of site ``i``'s sum; None where an activation hides the sum
    (after a ReLU, equal zeros would count as swamped)."""
    z = seen.sums[i]
    return None if z is None else swamped_fraction(case, i, seen, z)


def _turned(got: torch.dtype, want: torch.dtype) -> str:
    """``: downcast ...`` where the stream went narrower than declared, else nothing."""
    if torch.finfo(got).bits < torch.finfo(want).bits:
        return (f": the stream is downcast to {got} on the way, losing the updates a "
                f"{want} stream keeps")
    return ""


def stream_dtype(case: Case) -> dict[str, float]:
    """Every site's entry and exit, and the output, carry the recipe's stream dtype; the
    figures: swamped fraction per site and the overflow headroom (log2)."""
    __tracebackhide__ = True
    seen = ask(case).observe(case)
    want = case.stream_dtype
    figures: dict[str, float] = {}
    peak = 0.0
    for i, site in enumerate(case.recipe.sites):
        for what, t in (("entry", seen.entries[i]), ("exit", seen.exits[i])):
            if t.dtype != want:
                case.fail("stream_dtype", f"the stream at the {what} is {t.dtype}, expected "
                          f"the declared {want}{_turned(t.dtype, want)}", i)
            peak = max(peak, float(t.detach().abs().to(torch.float64).max()))
        swamped = _swamped(case, i, seen)
        if swamped is not None:
            figures[f"swamped[{site.label}]"] = swamped
    if seen.y.dtype != want:
        case.fail("stream_dtype", f"the output is {seen.y.dtype}, expected the declared {want}")
    largest = float(torch.finfo(want).max)
    figures["headroom_log2"] = math.inf if peak == 0 else math.log2(largest / peak)
    return figures
