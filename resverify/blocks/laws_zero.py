"""The zero-branch law: with every branch's end zeroed, a block is the map its skips make.

Why bitwise: with F ≡ 0 every sum is ``β·shortcut(s) + 0`` (over c, or times m), which a
block computes in the recipe's ops, so the block and the composition of its shortcuts,
scales, activations and post-norms are the same float, forward and backward.

Where an inexact site (``exact=False``) scales by other than a power of two, the block may
round that scaling another way (``s·(β/c)`` for ``β·s/c``), and the rounding passes into a
post-norm or a later projection, whose answer it moves by an amount no multiple of ``u``
bounds. There the law judges the block against its *own* sums, as
:func:`~.laws_forward.decomposition` does an inexact site: each site's sum, read off the
hooks, within :func:`~.laws_forward.site_budget` of its scaled shortcut, and its exit that
sum through the activation and post-norms, bitwise; ``x̄`` is the VJP of that map taken at the
block's own sums (so every norm's backward runs at the block's value), within the scales'
roundings (relative ``2 r u``, :func:`backward_budget`). A projection or post-norm that the
cotangent passes *after* such a rounding can widen it under cancellation beyond that
budget: the law then errs toward a false alarm, never toward a pass.

The figures (eval only, the report's zero-branch plot): per site, that site's branch alone
zeroed, the largest ``|exit - entry|`` (``max_from_identity[site]``: 0 for a pre-norm site,
not for a post-norm or post-activation one; absent where the site changes the shape) and the
largest ``|exit - post(act(β·shortcut(entry)/c))|`` (``max_from_law[site]``: 0 on a correct
block), over the judged examples. A failing record keeps those of its example
(:func:`~.trace.measured`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from resverify.blocks.adapters import ask
from resverify.blocks.laws_forward import inexact, loose, site_budget
from resverify.blocks.trace import (
    Case,
    Observed,
    first_difference,
    measured,
    unit_roundoff,
)

__all__ = []


def backward_budget(dtype: torch.dtype, e_bar: torch.Tensor, roundings: int
                    ) -> torch.Tensor | None:
    """``x̄`` of a chain of scalings, each of ``roundings`` products or quotients rounding
    once per evaluation in either: relative ``2 r u`` apart, second order and underflow as
    :func:`~.laws_forward.sum_budget`."""
    if not roundings:
        return None
    u = unit_roundoff(dtype)
    mag = e_bar.detach().to(torch.float64).abs()
    return 2 * roundings * u * (1 + 2 * (roundings + 1) * u) * mag + \
        (roundings + 1) * float(torch.finfo(dtype).smallest_normal) * 2 * u


def _roundings(case: Case, i: int) -> int:
    """The roundings an inexact site's scales add to each evaluation of ``x̄``."""
    site, beta = case.recipe.sites[i], ask(case).beta(case, i)
    if not loose(beta, site):
        return 0
    return int(inexact(beta)) + 2 * int(inexact(site.post_scale) or inexact(site.post_factor))


def _rule(case: Case) -> str:
    sites = case.recipe.sites
    plain = all(s.norm != "post" and s.activation is None and s.shortcut == "identity"
                and not s.scaled for s in sites)
    if plain:
        return "the identity"
    if any(s.scaled for s in sites):
        return "each site's post(act(β*shortcut(.) with its post-scale))"
    return "each site's post(act(shortcut(.)))"


def _own_sums(case: Case, what: str) -> Observed:
    """The zeroed block's stream, each site judged against its own entry: its sum within the
    budget of its scaled shortcut (bitwise where it scales exactly), its exit that sum
    through the activation and post-norms, bitwise."""
    __tracebackhide__ = True
    adapter = ask(case)
    seen = adapter.observe(case)
    for i, site in enumerate(case.recipe.sites):
        skip = adapter.shortcut(case, i, seen.entries[i])
        z, out = adapter.compose(case, i, skip, torch.zeros((), dtype=skip.dtype))
        beta = adapter.beta(case, i)
        budget = site_budget(beta, site, skip, []) if loose(beta, site) else None
        z_seen = seen.sums[i]
        if z_seen is not None:
            diff = first_difference(z_seen, z, budget)
            if diff:
                case.fail("zero_branch", f"{what}: sum z{diff}: with every branch 0, the "
                          "site's sum is β*shortcut(s)/c of the stream it received", i)
            diff = first_difference(seen.exits[i], adapter.post(case, i, z_seen))
        else:
            diff = first_difference(seen.exits[i], out, budget)
        if diff:
            case.fail("zero_branch", f"{what}: exit{diff}: with every branch 0, the site's "
                      "exit is post(act(β*shortcut(s)/c))", i)
    return seen


def _check_zero(case: Case, what: str) -> None:
    """``case``'s block, its branches zeroed, against the zero-branch map."""
    __tracebackhide__ = True
    adapter, n = ask(case), len(case.recipe.sites)
    inexact_sites = any(loose(adapter.beta(case, i), case.recipe.sites[i]) for i in range(n))
    seen = _own_sums(case, what) if inexact_sites else None
    run = adapter.vjp(case)
    e, e_bar = adapter.zero_map_vjp(case, seen, run.y_bar)
    if e.shape != run.y.shape:
        case.fail("zero_branch", f"{what}: y has shape {list(run.y.shape)}, the zero-branch "
                  f"map {list(e.shape)}")
    v, rule = adapter.value, _rule(case)
    diff = first_difference(v(run.y), v(e))
    if diff:
        case.fail("zero_branch", f"{what}: y{diff}: with every branch 0, the block is {rule}")
    if run.x_bar is None:
        case.fail("zero_branch", f"{what}: x̄ is None: the output does not depend on the input")
    roundings = sum(_roundings(case, i) for i in range(n))
    budget = backward_budget(run.x_bar.dtype, e_bar, roundings)
    diff = first_difference(v(run.x_bar), v(e_bar), budget)
    if diff:
        case.fail("zero_branch", f"{what}: x̄{diff}: with every branch 0, x̄ is the VJP of "
                  f"{rule} (ȳ for the identity)")


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """``max |a - b|`` in float64; None where the shapes differ."""
    if a.shape != b.shape:
        return None
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


def site_figures(case: Case) -> dict[str, float]:
    """Per site, its branch alone zeroed: how far its exit lies from its entry and from the
    exit the law predicts (see the module doc); eval only, none in train."""
    if case.mode != "eval":
        return {}
    adapter, figures = ask(case), {}
    for i, site in enumerate(case.recipe.sites):
        zeroed = adapter.zeroed(case, list(site.zero))
        seen = adapter.observe(zeroed)
        s, out = seen.entries[i], seen.exits[i]
        skip = adapter.shortcut(zeroed, i, s)
        expected = adapter.compose(zeroed, i, skip, torch.zeros((), dtype=skip.dtype))[1]
        for key, value in (("max_from_identity", _max_abs(out, s)),
                           ("max_from_law", _max_abs(out, expected))):
            if value is not None:
                figures[f"{key}[{site.label}]"] = value
    return figures


def zero_branch(case: Case) -> dict[str, float]:
    """Every branch's end zeroed: the block is exactly the map its shortcuts, scales,
    activations and post-norms make (the identity for pre-norm blocks), forward and
    backward; so is the block the library's own zero-init option builds. An inexact site
    that scales by other than a power of two is judged against the block's own sums (see
    the module doc)."""
    __tracebackhide__ = True
    names = [p for site in case.recipe.sites for p in site.zero]
    figures = site_figures(case)
    with measured(figures):
        _check_zero(ask(case).zeroed(case, names), f"zeroing {', '.join(names)}")
        zero_init = case.extra.get("zero_init")
        if zero_init is not None:
            _check_zero(replace(case, module=zero_init), "the library's zero-init option")
    return figures
