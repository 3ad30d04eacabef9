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
"""

from __future__ import annotations

import torch

from resverify.blocks.laws_forward import inexact, loose, site_budget
from resverify.blocks.recipe import Site
from resverify.blocks.trace import (
    TORCH_DTYPES,
    UNIT_ROUNDOFF,
    Case,
    Observed,
    first_difference,
    no_drop,
    observe,
    shortcut,
    site_post,
    site_sum,
    skip_scale,
    zeroed,
)

__all__ = ["backward_budget", "zero_branch"]

_NAMES = {t: name for name, t in TORCH_DTYPES.items()}


def backward_budget(dtype: torch.dtype, e_bar: torch.Tensor, roundings: int
                    ) -> torch.Tensor | None:
    """``x̄`` of a chain of scalings, each of ``roundings`` products or quotients rounding
    once per evaluation in either: relative ``2 r u`` apart, second order and underflow as
    :func:`~.laws_forward.sum_budget`."""
    if not roundings:
        return None
    u = UNIT_ROUNDOFF[_NAMES[dtype]]
    mag = e_bar.detach().to(torch.float64).abs()
    return 2 * roundings * u * (1 + 2 * (roundings + 1) * u) * mag + \
        (roundings + 1) * float(torch.finfo(dtype).smallest_normal) * 2 * u


def _roundings(module: torch.nn.Module, site: Site) -> int:
    """The roundings an inexact site's scales add to each evaluation of ``x̄``."""
    if not loose(module, site):
        return 0
    return int(inexact(skip_scale(module, site))) + \
        2 * int(inexact(site.post_scale) or inexact(site.post_factor))


def _zero_sum(module: torch.nn.Module, site: Site, s: torch.Tensor) -> torch.Tensor:
    """``β·shortcut(s)/c`` (or ``· m``): the site's sum with its branches 0."""
    return site_sum(module, site, shortcut(module, site, s), torch.zeros((), dtype=s.dtype))


def _composed(case: Case, module: torch.nn.Module, x: torch.Tensor,
              seen: Observed | None) -> torch.Tensor:
    """The zero-branch map of ``x``: each site's exit of its own scaled shortcut; with
    ``seen``, each site's sum and exit take the block's own values (their gradient the
    map's), so that every post part runs at the float the block ran it at."""
    out = x
    for i, site in enumerate(case.recipe.sites):
        z = _zero_sum(module, site, out)
        own = None if seen is None else seen.sums[i]
        if own is not None:
            z = z + (own - z).detach()
        out = site_post(module, site, z)
        if seen is not None:
            out = out + (seen.exits[i] - out).detach()
    return out


def _rule(case: Case) -> str:
    sites = case.recipe.sites
    plain = all(s.norm != "post" and s.activation is None and s.shortcut == "identity"
                and not s.scaled for s in sites)
    if plain:
        return "the identity"
    if any(s.scaled for s in sites):
        return "each site's post(act(β*shortcut(.) with its post-scale))"
    return "each site's post(act(shortcut(.)))"


def _own_sums(case: Case, module: torch.nn.Module, what: str) -> Observed:
    """The zeroed block's stream, each site judged against its own entry: its sum within the
    budget of its scaled shortcut (bitwise where it scales exactly), its exit that sum
    through the activation and post-norms, bitwise."""
    __tracebackhide__ = True
    with no_drop(module, case.recipe):
        seen = observe(case.recipe, module, case.inputs.x.clone(), case.inputs.context)
    for i, site in enumerate(case.recipe.sites):
        with torch.enable_grad():
            skip = shortcut(module, site, seen.entries[i]).detach()
            z = _zero_sum(module, site, seen.entries[i]).detach()
            budget = site_budget(module, site, skip, []) if loose(module, site) else None
            z_seen = seen.sums[i]
            if z_seen is not None:
                diff = first_difference(z_seen, z, budget)
                if diff:
                    case.fail("zero_branch", f"{what}: sum z{diff}: with every branch 0, the "
                              "site's sum is β*shortcut(s)/c of the stream it received", i)
                diff = first_difference(seen.exits[i], site_post(module, site, z_seen).detach())
            else:
                diff = first_difference(seen.exits[i], site_post(module, site, z).detach(),
                                        budget)
        if diff:
            case.fail("zero_branch", f"{what}: exit{diff}: with every branch 0, the site's "
                      "exit is post(act(β*shortcut(s)/c))", i)
    return seen


def _check_zero(case: Case, module: torch.nn.Module, what: str) -> None:
    __tracebackhide__ = True
    sites = case.recipe.sites
    seen = _own_sums(case, module, what) if any(loose(module, s) for s in sites) else None
    x = case.inputs.x.detach().clone().requires_grad_(True)
    with no_drop(module, case.recipe), torch.enable_grad():
        y = case.recipe.run(module, x, case.inputs.context)
        y_bar = case.inputs.cotangent(y)
        (x_bar,) = torch.autograd.grad(y, x, y_bar)
        x2 = case.inputs.x.detach().clone().requires_grad_(True)
        e = _composed(case, module, x2, seen)
        if e.shape != y.shape:
            case.fail("zero_branch", f"{what}: y has shape {list(y.shape)}, the zero-branch map "
                      f"{list(e.shape)}")
        e_bar = y_bar if e is x2 else torch.autograd.grad(e, x2, y_bar)[0]
    rule = _rule(case)
    diff = first_difference(y.detach(), e.detach())
    if diff:
        case.fail("zero_branch", f"{what}: y{diff}: with every branch 0, the block is {rule}")
    roundings = sum(_roundings(module, s) for s in sites)
    diff = first_difference(x_bar, e_bar.detach(), backward_budget(x_bar.dtype, e_bar,
                                                                   roundings))
    if diff:
        case.fail("zero_branch", f"{what}: x̄{diff}: with every branch 0, x̄ is the VJP of "
                  f"{rule} (ȳ for the identity)")


def zero_branch(case: Case) -> dict[str, float]:
    """Every branch's end zeroed: the block is exactly the map its shortcuts, scales,
    activations and post-norms make (the identity for pre-norm blocks), forward and
    backward; so is the block the library's own zero-init option builds. An inexact site
    that scales by other than a power of two is judged against the block's own sums (see
    the module doc)."""
    __tracebackhide__ = True
    names = [p for site in case.recipe.sites for p in site.zero]
    _check_zero(case, zeroed(case.module, names), f"zeroing {', '.join(names)}")
    zero_init = case.extra.get("zero_init")
    if zero_init is not None:
        _check_zero(case, zero_init, "the library's zero-init option")
    return {}
