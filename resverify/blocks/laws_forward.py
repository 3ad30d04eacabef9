"""The forward laws of a residual block: decomposition, zero branch, affine in γ.

Why bitwise: a block that computes ``x + F(x)`` rounds that sum once, and F through its own
submodules on the same input runs the same kernels, so the module's sum and the one the
recipe predicts are the same float, not merely close. A site the recipe marks
``exact=False`` (its sum is fused, or F is computed another way) is judged within the merge's
rounding instead: each of the two sums lies within ``u (|s| + 2 |alpha F|)`` of the exact
``s + alpha F`` (one rounding of the product, one of the sum, to first order), so they may
differ by twice that, inflated by ``(1 + 4u)`` and two smallest subnormals for the second
order and underflow (:func:`merge_budget`).

Drop path is random; these laws lift its mask to data by running the block with every
drop probability at 0 (mask all ones), which :mod:`.laws_drop` checks on its own.
"""

from __future__ import annotations

import torch

from resverify.blocks.trace import (
    UNIT_ROUNDOFF,
    Case,
    Observed,
    Unjudged,
    Unobserved,
    first_difference,
    no_drop,
    observe,
    shortcut,
    site_exit,
    with_parameter,
    zeroed,
)
from resverify.spec.errors import UsageError

__all__ = ["affine_in_gamma", "decomposition", "gamma_along", "merge_budget", "zero_branch"]


def merge_budget(dtype: str, s: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """How far two evaluations of ``s + update`` (each one product and one sum rounding)
    may land apart, element by element."""
    u = UNIT_ROUNDOFF[dtype]
    tiny = torch.finfo(torch.float64).tiny if dtype == "float64" else \
        float(torch.finfo(s.dtype).smallest_normal) * u * 2
    mag = s.detach().to(torch.float64).abs() + 2 * update.detach().to(torch.float64).abs()
    return 2 * u * (1 + 4 * u) * mag + 2 * tiny


def _observe(case: Case) -> Observed:
    x, ctx = case.inputs.x, case.inputs.context
    with no_drop(case.module, case.recipe):
        return observe(case.recipe, case.module, x.clone(), ctx)


def decomposition(case: Case) -> dict[str, float]:
    """At every site, the module's sum is ``shortcut(s) + alpha F(s)`` of the stream it
    carried, and its exit that sum through the site's activation and post-norms.

    The backward half, ``x̄ = ȳ + J_Fᵀȳ``, is :func:`~.laws_backward.gradient_skip`."""
    __tracebackhide__ = True
    try:
        seen = _observe(case)
    except Unobserved as exc:
        case.fail("decomposition", f"the block is not wired as its recipe says: {exc}")
    law = "decomposition"
    for i, site in enumerate(case.recipe.sites):
        s = seen.entries[i]
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            f = site.evaluate(case.module, s, case.inputs.context).detach()
            z, out = (t.detach() for t in site_exit(case.module, site, s, f))
            skip = shortcut(case.module, site, s).detach()
        budget = None if site.exact else merge_budget(
            case.dtype, shortcut(case.module, site, s).detach(), site.alpha * f)
        z_seen = seen.sums[i]
        if z_seen is not None:
            diff = first_difference(z_seen, z, budget)
            if diff:
                case.fail(law, f"sum z{diff}: z = shortcut(s) + alpha*F(s) with F through "
                          "the branch's own submodules", i, (skip, f))
        diff = first_difference(seen.exits[i], out, None if z_seen is not None else budget)
        if diff:
            case.fail(law, f"exit{diff}: exit = post(act(z)) of the stream the site "
                      "received", i, (skip, f))
    return {}


def _zero_map(case: Case, x: torch.Tensor) -> torch.Tensor:
    """The block with every branch 0: each site's exit of its own shortcut."""
    out = x
    for site in case.recipe.sites:
        out = site_exit(case.module, site, out, torch.zeros((), dtype=out.dtype))[1]
    return out


def _check_zero(case: Case, module: torch.nn.Module, what: str) -> None:
    __tracebackhide__ = True
    x = case.inputs.x.detach().clone().requires_grad_(True)
    with no_drop(module, case.recipe), torch.enable_grad():
        y = case.recipe.run(module, x, case.inputs.context)
        y_bar = case.inputs.cotangent(y)
        (x_bar,) = torch.autograd.grad(y, x, y_bar)
        x2 = case.inputs.x.detach().clone().requires_grad_(True)
        e = _zero_map(case, x2)
        if e.shape != y.shape:
            case.fail("zero_branch", f"{what}: y has shape {list(y.shape)}, the zero-branch map "
                      f"{list(e.shape)}")
        e_bar = y_bar if e is x2 else torch.autograd.grad(e, x2, y_bar)[0]
    plain = all(s.norm != "post" and s.activation is None and s.shortcut == "identity"
                for s in case.recipe.sites)
    rule = "the identity" if plain else "each site's post(act(shortcut(.)))"
    diff = first_difference(y.detach(), e.detach())
    if diff:
        case.fail("zero_branch", f"{what}: y{diff}: with every branch 0, the block is {rule}")
    diff = first_difference(x_bar, e_bar.detach())
    if diff:
        case.fail("zero_branch", f"{what}: x̄{diff}: with every branch 0, x̄ is the VJP of "
                  f"{rule} (ȳ for the identity)")


def zero_branch(case: Case) -> dict[str, float]:
    """Every branch's end zeroed: the block is exactly the map its shortcuts, activations and
    post-norms make (the identity for pre-norm blocks), forward and backward; so is the block
    the library's own zero-init option builds."""
    __tracebackhide__ = True
    names = [p for site in case.recipe.sites for p in site.zero]
    _check_zero(case, zeroed(case.module, names), f"zeroing {', '.join(names)}")
    zero_init = case.extra.get("zero_init")
    if zero_init is not None:
        _check_zero(case, zero_init, "the library's zero-init option")
    return {}


def _sum(case: Case, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seen = _observe(case)
    z = seen.sums[i]
    if z is None:
        raise Unjudged(f"site {i}'s sum is not visible (an activation follows it)")
    return seen.entries[i], z


def _gamma_budget(dtype: str, z_g: torch.Tensor, z_1: torch.Tensor, g: torch.Tensor,
                  d_1: torch.Tensor) -> torch.Tensor:
    """``|d(g) - g d(1)|``'s bound: the two sums' roundings, the product ``g G``'s, and the
    float64 arithmetic of the check itself."""
    u = UNIT_ROUNDOFF[dtype]
    a = [t.to(torch.float64).abs() for t in (z_g, z_1, g, d_1)]
    first = u * (a[0] + a[2] * a[1]) + u * (a[2] * a[3] + u * a[2] * a[1])
    check = 2.0**-52 * (a[0] + a[2] * a[1]) * 4
    return (1 + 4 * u) * first + check + 4 * float(torch.finfo(z_g.dtype).tiny)


def gamma_along(case: Case, i: int, g: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """γ as it multiplies site ``i``'s update ``like``, expanded to its shape: a
    one-dimensional γ along the site's ``scale_axis`` (the last dimension when None), any
    other shape broadcast as torch broadcasts it. The dimension is the recipe's word, never
    guessed from sizes: a γ that does not fit it is refused (:class:`UsageError`)."""
    site = case.recipe.sites[i]
    where = f"recipe {case.recipe.name!r}: site {i} ({site.label})'s γ {site.scale}"
    if g.dim() != 1:
        if site.scale_axis is not None:
            raise UsageError(f"{where} has shape {list(g.shape)}; scale_axis is for a "
                             "one-dimensional γ (leave it None to broadcast γ as torch does)")
        try:
            fits = torch.broadcast_shapes(g.shape, like.shape) == like.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise UsageError(f"{where} has shape {list(g.shape)}, which does not broadcast "
                             f"against the update's {list(like.shape)}")
        return g.expand_as(like)
    axis = -1 if site.scale_axis is None else site.scale_axis
    if not -like.dim() <= axis < like.dim() or like.shape[axis] != g.shape[0]:
        said = "the last dimension (scale_axis None)" if site.scale_axis is None else \
            f"dim {axis} (scale_axis)"
        raise UsageError(f"{where} has {g.shape[0]} entries, the update {list(like.shape)} "
                         f"does not have that many along {said}; say which dimension γ "
                         "scales with scale_axis=...")
    shape = [1] * like.dim()
    shape[axis] = g.shape[0]
    return g.reshape(shape).expand_as(like)


def _skip(case: Case, i: int, s: torch.Tensor) -> torch.Tensor:
    """The site's shortcut of its entry, as the block computes it (grad mode on)."""
    with torch.enable_grad(), no_drop(case.module, case.recipe):
        return shortcut(case.module, case.recipe.sites[i], s).detach()


def _check_gamma(case: Case, i: int, name: str) -> None:
    __tracebackhide__ = True
    law, site = "affine_in_gamma", case.recipe.sites[i]
    built = case.pristine.get_parameter(name)
    if site.scale_init is not None:
        diff = first_difference(built.detach(), torch.full_like(built, site.scale_init))
        if diff:
            case.fail(law, f"{name} as constructed{diff}: the constructor was given "
                      f"{site.scale_init!r}", i)
    g = case.module.get_parameter(name).detach().clone()
    base = "x" if site.shortcut == "identity" else f"{site.shortcut}(x)"
    with with_parameter(case.module, name, 0.0):
        s, z0 = _sum(case, i)
    skip = _skip(case, i, s)
    diff = first_difference(z0, skip)
    if diff:
        case.fail(law, f"z at {name} = 0{diff}: y(γ) - {base} is 0 at γ = 0", i)
    with with_parameter(case.module, name, 1.0):
        _, z1 = _sum(case, i)
    with with_parameter(case.module, name, g):
        _, zg = _sum(case, i)
    d1 = z1.to(torch.float64) - skip.to(torch.float64)
    dg = zg.to(torch.float64) - skip.to(torch.float64)
    gb = gamma_along(case, i, g.to(torch.float64), d1)
    budget = _gamma_budget(case.dtype, zg, z1, gb, d1)
    diff = first_difference(dg, gb * d1, budget)
    if diff:
        along = "" if site.scale_axis is None else f" along dim {site.scale_axis}"
        case.fail(law, f"y(γ) - {base} at the block's γ{diff}: y(γ) - {base} = "
                  f"γ (y(1) - {base}), linear in {name}{along}", i)


def affine_in_gamma(case: Case) -> dict[str, float]:
    """Per site with a LayerScale γ: the constructor's value is the value held, y(γ) -
    shortcut(x) is zero at γ = 0, and linear in γ (``γ (y(1) - shortcut(x))`` within its
    rounding), γ broadcast along the dimension the recipe names (:func:`gamma_along`)."""
    __tracebackhide__ = True
    scaled = [(i, s.scale) for i, s in enumerate(case.recipe.sites) if s.scale]
    if not scaled:
        raise Unjudged("no site declares a LayerScale γ")
    for i, name in scaled:
        assert name is not None
        _check_gamma(case, i, name)
    return {}
