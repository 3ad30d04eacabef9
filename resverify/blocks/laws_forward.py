"""The decomposition law of a residual block: each site's sum is the stream plus its update.

Why bitwise: a block that computes ``x + F(x)`` rounds that sum once, and F through its own
submodules on the same input runs the same kernels, so the module's sum and the one the
recipe predicts are the same float, not merely close. A site the recipe marks
``exact=False`` (its sum is fused, its parallel branches added in another order, its
post-scale applied term by term) is judged within the rounding of the declared computation
``(β·skip + alpha·(F_1 + ... + F_k)) / c`` instead: each rounding of an evaluation errs by at
most ``u`` times a partial sum, each at most ``Σ|terms| / |c|``, so two evaluations in any
order land at most twice the count of roundings times that apart (:func:`sum_budget`; a
product or quotient by a power of two does not round). Its exit is then the block's *own*
sum through the site's activation and post-norms, bitwise: the post part runs the same
kernels on the same float, so only the sum needs a budget.

Drop path is random; these laws lift its mask to data by running the block with every
drop probability at 0 (mask all ones), which :mod:`.laws_drop` checks on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from resverify.blocks.adapters import ask
from resverify.blocks.recipe import Site
from resverify.blocks.trace import (
    Case,
    Observed,
    Unobserved,
    first_difference,
    unit_roundoff,
)

__all__ = []


def inexact(scale: torch.Tensor | float) -> bool:
    """Whether a product or quotient by ``scale`` rounds: unless every value is a power of
    two (then it is exact, barring underflow, which the budgets' subnormal term covers)."""
    mantissa, _ = torch.frexp(torch.as_tensor(scale, dtype=torch.float64).detach())
    return not bool((mantissa.abs() == 0.5).all())


def sum_budget(dtype: torch.dtype, terms: Sequence[tuple[torch.Tensor, bool]],
               post_scale: float = 1.0, post_factor: float = 1.0) -> torch.Tensor:
    """How far two evaluations of ``(t_1 + ... + t_k) / c`` (or ``· m``) may land apart,
    element by element, each evaluation adding the k terms in any order and dividing by c
    (multiplying by m) before or after (``terms``: each term's value and whether computing
    it rounds, a product by a scale that is not a power of two).

    Each rounding errs by at most ``u`` times its result, and every partial sum (scaled or
    not yet) is at most ``M = Σ|t_i| · |m| / |c|``: so one evaluation lies within ``u ((k -
    1) M + P + 2 M [c or m inexact])`` of the exact value, P the sum of the rounded products'
    magnitudes scaled alike and the last term the scale's own rounding (to the dtype the
    block multiplies in) and the product's or quotient's. Two evaluations: twice that,
    inflated by ``(1 + 2 (r + 1) u)`` for the second order (r roundings) and one smallest
    subnormal per rounding for underflow. For k = 2 with the second term a product this is
    :func:`merge_budget`'s ``2 u (|s| + 2 |alpha F|)``."""
    u = unit_roundoff(dtype)
    tiny = torch.finfo(torch.float64).tiny if dtype == torch.float64 else \
        float(torch.finfo(dtype).smallest_normal) * u * 2
    mags = [t.detach().to(torch.float64).abs() for t, _ in terms]
    ratio = abs(post_factor) / abs(post_scale)
    m = sum(mags[1:], mags[0]) * ratio
    p = sum((a for a, (_, rounds) in zip(mags, terms, strict=True) if rounds),
            torch.zeros_like(m)) * ratio
    quotient = 2 if inexact(post_scale) or inexact(post_factor) else 0
    roundings = len(terms) - 1 + sum(r for _, r in terms) + quotient
    per = u * ((len(terms) - 1 + quotient) * m + p)
    return 2 * per * (1 + 2 * (roundings + 1) * u) + (roundings + 1) * tiny


def loose(beta: torch.Tensor | float, site: Site) -> bool:
    """Whether an inexact site (``exact=False``) scales its skip (by ``beta``, as the block
    holds it) or its sum by other than a power of two: then even its zero-branch map is only
    judged within those roundings."""
    return not site.exact and (inexact(beta) or inexact(site.post_scale)
                               or inexact(site.post_factor))


def merge_budget(dtype: str, s: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """How far two evaluations of ``s + update`` (each one product and one sum rounding)
    may land apart, element by element."""
    return sum_budget(s.dtype if dtype != "float64" else torch.float64,
                      [(s, False), (update, True)])


def site_budget(beta: torch.Tensor | float, site: Site, skip: torch.Tensor,
                terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """The budget of a site's sum ``(β·skip + alpha·(F_1 + ... + F_k)) / c`` from β as the
    block holds it, the shortcut's value and each branch's (:func:`sum_budget`)."""
    beta_abs = beta.detach().to(torch.float64).abs() if isinstance(beta, torch.Tensor) else \
        abs(beta)
    parts = [(skip.detach().to(torch.float64).abs() * beta_abs, inexact(beta))]
    parts += [(t.detach().to(torch.float64).abs() * abs(site.alpha), inexact(site.alpha))
              for t in terms]
    return sum_budget(skip.dtype, parts, site.post_scale, site.post_factor)


def formula(site: Site) -> str:
    """The site's sum as the messages write it."""
    skip = "shortcut(s)" if site.skip_scale == 1.0 else "β*shortcut(s)"
    update = "alpha*F(s)" if not site.parallel else \
        "alpha*(" + " + ".join(f"F{j}(s)" for j in range(1 + len(site.parallel))) + ")"
    body = f"{skip} + {update}"
    if site.post_factor != 1.0:
        return f"({body})*{site.post_factor!r}"
    return body if site.post_scale == 1.0 else f"({body})/{site.post_scale!r}"


def observed(case: Case) -> Observed:
    """The block's stream on the case's input, every drop path at probability 0."""
    return ask(case).observe(case)


def decomposition(case: Case) -> dict[str, float]:
    """At every site, the module's sum is ``(β·shortcut(s) + alpha F(s)) / c`` of the stream
    it carried (bitwise when ``exact``, else within :func:`site_budget`), and its exit that
    sum through the site's activation and post-norms (for an inexact site, the block's own
    sum through them; where an activation hides the sum, the exit within the budget, ReLU
    being 1-Lipschitz).

    The backward half, ``x̄ = ȳ + J_Fᵀȳ``, is :func:`~.laws_backward.gradient_skip`."""
    __tracebackhide__ = True
    adapter = ask(case)
    try:
        seen = adapter.observe(case)
    except Unobserved as exc:
        case.fail("decomposition", f"the block is not wired as its recipe says: {exc}")
    for i in range(len(case.recipe.sites)):
        _judge_site(case, i, seen)
    return {}


def _judge_site(case: Case, i: int, seen: Observed) -> None:
    __tracebackhide__ = True
    law, site, adapter = "decomposition", case.recipe.sites[i], ask(case)
    v = adapter.value
    skip, terms = adapter.parts(case, i, seen.entries[i])
    f = terms[0]
    for t in terms[1:]:
        f = f + t
    z, out = adapter.compose(case, i, skip, f)
    loose_budget = site_budget(adapter.beta(case, i), site, skip, terms)
    budget = None if site.exact else loose_budget
    z_seen = seen.sums[i]
    if z_seen is not None:
        diff = first_difference(v(z_seen), v(z), budget)
        if diff:
            hint = "" if budget is not None or \
                first_difference(v(z_seen), v(z), loose_budget) else \
                " (within the budget of exact=False: a block that computes this sum in " \
                "another order or fused says exact=False)"
            case.fail(law, f"sum z{diff}: z = {formula(site)} with F through the branch's "
                      f"own submodules{hint}", i, (skip, *terms))
        if budget is not None:  # the exit of the block's own sum, not of ours
            out = adapter.post(case, i, z_seen)
        diff = first_difference(v(seen.exits[i]), v(out))
    else:
        diff = first_difference(v(seen.exits[i]), v(out), budget)
    if diff:
        case.fail(law, f"exit{diff}: exit = post(act(z)) of the stream the site "
                  "received", i, (skip, *terms))
