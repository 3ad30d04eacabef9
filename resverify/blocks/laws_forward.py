"""The forward laws of a residual block: decomposition, zero branch, affine in γ.

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
from dataclasses import replace

import torch

from resverify.blocks.recipe import Site
from resverify.blocks.trace import (
    TORCH_DTYPES,
    UNIT_ROUNDOFF,
    Case,
    Observed,
    Unjudged,
    Unobserved,
    first_difference,
    no_drop,
    observe,
    shortcut,
    site_post,
    site_sum,
    skip_scale,
    with_parameter,
    zeroed,
)
from resverify.spec.errors import UsageError

__all__ = ["affine_in_gamma", "decomposition", "formula", "gamma_along", "inexact",
           "merge_budget", "site_budget", "sum_budget", "zero_branch"]

_NAMES = {t: name for name, t in TORCH_DTYPES.items()}


def inexact(scale: torch.Tensor | float) -> bool:
    """Whether a product or quotient by ``scale`` rounds: unless every value is a power of
    two (then it is exact, barring underflow, which the budgets' subnormal term covers)."""
    mantissa, _ = torch.frexp(torch.as_tensor(scale, dtype=torch.float64).detach())
    return not bool((mantissa.abs() == 0.5).all())


def sum_budget(dtype: torch.dtype, terms: Sequence[tuple[torch.Tensor, bool]],
               post_scale: float = 1.0) -> torch.Tensor:
    """How far two evaluations of ``(t_1 + ... + t_k) / c`` may land apart, element by
    element, each evaluation adding the k terms in any order and dividing by c before or
    after (``terms``: each term's value and whether computing it rounds, a product by a
    scale that is not a power of two).

    Each rounding errs by at most ``u`` times its result, and every partial sum (divided by
    c or not yet) is at most ``M = Σ|t_i| / |c|``: so one evaluation lies within ``u ((k -
    1) M + P + 2 M [c inexact])`` of the exact value, P the sum of the rounded products'
    magnitudes over |c| and the last term c's own rounding and the quotient's. Two
    evaluations: twice that, inflated by ``(1 + 2 (r + 1) u)`` for the second order (r
    roundings) and one smallest subnormal per rounding for underflow. For k = 2 with the
    second term a product this is :func:`merge_budget`'s ``2 u (|s| + 2 |alpha F|)``."""
    u = UNIT_ROUNDOFF[_NAMES[dtype]]
    tiny = torch.finfo(torch.float64).tiny if dtype == torch.float64 else \
        float(torch.finfo(dtype).smallest_normal) * u * 2
    mags = [t.detach().to(torch.float64).abs() for t, _ in terms]
    c = abs(post_scale)
    m = sum(mags[1:], mags[0]) / c
    p = sum((a for a, (_, rounds) in zip(mags, terms, strict=True) if rounds),
            torch.zeros_like(m)) / c
    quotient = 2 if inexact(post_scale) else 0
    roundings = len(terms) - 1 + sum(r for _, r in terms) + quotient
    per = u * ((len(terms) - 1 + quotient) * m + p)
    return 2 * per * (1 + 2 * (roundings + 1) * u) + (roundings + 1) * tiny


def merge_budget(dtype: str, s: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """How far two evaluations of ``s + update`` (each one product and one sum rounding)
    may land apart, element by element."""
    return sum_budget(s.dtype if dtype != "float64" else torch.float64,
                      [(s, False), (update, True)])


def site_budget(module: torch.nn.Module, site: Site, skip: torch.Tensor,
                terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """The budget of a site's sum ``(β·skip + alpha·(F_1 + ... + F_k)) / c`` from the
    shortcut's value and each branch's (:func:`sum_budget`)."""
    beta = skip_scale(module, site)
    beta_abs = beta.detach().to(torch.float64).abs() if isinstance(beta, torch.Tensor) else \
        abs(beta)
    parts = [(skip.detach().to(torch.float64).abs() * beta_abs, inexact(beta))]
    parts += [(t.detach().to(torch.float64).abs() * abs(site.alpha), inexact(site.alpha))
              for t in terms]
    return sum_budget(skip.dtype, parts, site.post_scale)


def formula(site: Site) -> str:
    """The site's sum as the messages write it."""
    skip = "shortcut(s)" if site.skip_scale == 1.0 else "β*shortcut(s)"
    update = "alpha*F(s)" if not site.parallel else \
        "alpha*(" + " + ".join(f"F{j}(s)" for j in range(1 + len(site.parallel))) + ")"
    body = f"{skip} + {update}"
    return body if site.post_scale == 1.0 else f"({body})/{site.post_scale!r}"


def _observe(case: Case) -> Observed:
    x, ctx = case.inputs.x, case.inputs.context
    with no_drop(case.module, case.recipe):
        return observe(case.recipe, case.module, x.clone(), ctx)


def decomposition(case: Case) -> dict[str, float]:
    """At every site, the module's sum is ``(β·shortcut(s) + alpha F(s)) / c`` of the stream
    it carried (bitwise when ``exact``, else within :func:`site_budget`), and its exit that
    sum through the site's activation and post-norms (for an inexact site, the block's own
    sum through them; where an activation hides the sum, the exit within the budget, ReLU
    being 1-Lipschitz).

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
            terms = [t.detach() for t in site.terms(case.module, s, case.inputs.context)]
            f = terms[0]
            for t in terms[1:]:
                f = f + t
            skip = shortcut(case.module, site, s).detach()
            z = site_sum(case.module, site, skip, f).detach()
            out = site_post(case.module, site, z).detach()
            loose = site_budget(case.module, site, skip, terms)
        budget = None if site.exact else loose
        z_seen = seen.sums[i]
        if z_seen is not None:
            diff = first_difference(z_seen, z, budget)
            if diff:
                hint = "" if budget is not None or first_difference(z_seen, z, loose) else \
                    " (within the budget of exact=False: a block that computes this sum in " \
                    "another order or fused says exact=False)"
                case.fail(law, f"sum z{diff}: z = {formula(site)} with F through the branch's "
                          f"own submodules{hint}", i, (skip, f))
            if budget is not None:  # the exit of the block's own sum, not of ours
                with torch.enable_grad():
                    out = site_post(case.module, site, z_seen).detach()
            diff = first_difference(seen.exits[i], out)
        else:
            diff = first_difference(seen.exits[i], out, budget)
        if diff:
            case.fail(law, f"exit{diff}: exit = post(act(z)) of the stream the site "
                      "received", i, (skip, f))
    return {}


def _zero_map(case: Case, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """The block with every branch 0: each site's exit of its own (scaled) shortcut; with
    the budget of that map where an inexact site (``exact=False``) scales by other than a
    power of two (None: bitwise), and those sites' roundings of ``x̄``."""
    out, budget, roundings = x, None, 0
    for i, site in enumerate(case.recipe.sites):
        skip = shortcut(case.module, site, out)
        z = site_sum(case.module, site, skip, torch.zeros((), dtype=out.dtype))
        beta = skip_scale(case.module, site)
        loose = not site.exact and (inexact(beta) or inexact(site.post_scale))
        if loose or budget is not None:
            if (budget is not None and site.shortcut != "identity") or site.norm == "post":
                raise Unjudged(f"site {i} ({site.label}) projects or post-normalizes a sum "
                               "an inexact scale rounded: the zero-branch map's rounding is "
                               "not bounded there")
            ratio = (beta.detach().to(torch.float64).abs() if isinstance(beta, torch.Tensor)
                     else abs(beta)) / abs(site.post_scale)
            u = UNIT_ROUNDOFF[_NAMES[out.dtype]]
            carried = torch.zeros(()) if budget is None else budget * ratio * (1 + 4 * u)
            own = site_budget(case.module, site, skip, []) if loose else torch.zeros(())
            budget = carried + own
            roundings += loose * (inexact(beta) + 2 * inexact(site.post_scale))
        out = site_post(case.module, site, z)
    return out, budget, roundings


def _backward_budget(dtype: torch.dtype, e_bar: torch.Tensor, roundings: int
                     ) -> torch.Tensor | None:
    """``x̄`` of a chain of scalings, each of ``roundings`` products or quotients rounding
    once per evaluation in either: relative ``2 r u`` apart, second order and underflow as
    :func:`sum_budget`."""
    if not roundings:
        return None
    u = UNIT_ROUNDOFF[_NAMES[dtype]]
    mag = e_bar.detach().to(torch.float64).abs()
    return 2 * roundings * u * (1 + 2 * (roundings + 1) * u) * mag + \
        (roundings + 1) * float(torch.finfo(dtype).smallest_normal) * 2 * u


def _check_zero(case: Case, module: torch.nn.Module, what: str) -> None:
    __tracebackhide__ = True
    x = case.inputs.x.detach().clone().requires_grad_(True)
    with no_drop(module, case.recipe), torch.enable_grad():
        y = case.recipe.run(module, x, case.inputs.context)
        y_bar = case.inputs.cotangent(y)
        (x_bar,) = torch.autograd.grad(y, x, y_bar)
        x2 = case.inputs.x.detach().clone().requires_grad_(True)
        e, budget, roundings = _zero_map(replace(case, module=module), x2)
        if e.shape != y.shape:
            case.fail("zero_branch", f"{what}: y has shape {list(y.shape)}, the zero-branch map "
                      f"{list(e.shape)}")
        e_bar = y_bar if e is x2 else torch.autograd.grad(e, x2, y_bar)[0]
    sites = case.recipe.sites
    plain = all(s.norm != "post" and s.activation is None and s.shortcut == "identity"
                and s.skip_scale == 1.0 and s.post_scale == 1.0 for s in sites)
    scaled = any(s.skip_scale != 1.0 or s.post_scale != 1.0 for s in sites)
    rule = "the identity" if plain else "each site's post(act(shortcut(.)))" if not scaled \
        else "each site's post(act(β*shortcut(.)/c))"
    diff = first_difference(y.detach(), e.detach(), budget)
    if diff:
        case.fail("zero_branch", f"{what}: y{diff}: with every branch 0, the block is {rule}")
    diff = first_difference(x_bar, e_bar.detach(),
                            _backward_budget(x_bar.dtype, e_bar, roundings))
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
    if g.numel() == 1 and site.scale_axis is None:  # a scalar gate, one element or none
        return g.reshape(()).expand_as(like)
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
    if site.parallel or site.skip_scale != 1.0 or site.post_scale != 1.0:
        raise Unjudged(f"site {i} ({site.label}) has parallel branches or a skip or post "
                       "scale beside its LayerScale γ or gate, which this law does not judge "
                       "yet")
    built = case.pristine.get_parameter(name)
    if site.scale_init is not None:
        diff = first_difference(built.detach(), torch.full_like(built, site.scale_init))
        if diff:
            case.fail(law, f"{name} as constructed{diff}: the constructor was given "
                      f"{site.scale_init!r}", i)
    g = case.module.get_parameter(name).detach().clone()
    base = "x" if site.shortcut == "identity" else f"{site.shortcut}(x)"
    gamma, one = ("γ", 1.0) if site.scale_fn is None else (f"{site.scale_fn}(g)", GATE_ONE)
    with with_parameter(case.module, name, 0.0):
        s, z0 = _sum(case, i)
    skip = _skip(case, i, s)
    diff = first_difference(z0, skip)
    if diff:
        case.fail(law, f"z at {name} = 0{diff}: y({gamma}) - {base} is 0 at {gamma} = 0", i)
    with with_parameter(case.module, name, one):
        _, z1 = _sum(case, i)
    with with_parameter(case.module, name, g):
        _, zg = _sum(case, i)
    d1 = z1.to(torch.float64) - skip.to(torch.float64)
    dg = zg.to(torch.float64) - skip.to(torch.float64)
    gb = gamma_along(case, i, _gate(site.scale_fn, g).to(torch.float64), d1)
    budget = _gamma_budget(case.dtype, zg, z1, gb, d1)
    diff = first_difference(dg, gb * d1, budget)
    if diff:
        along = "" if site.scale_axis is None else f" along dim {site.scale_axis}"
        of = name if site.scale_fn is None else f"{site.scale_fn}({name})"
        at_one = "y(1)" if site.scale_fn is None else f"y(g={GATE_ONE:g})"
        case.fail(law, f"y({gamma}) - {base} at the block's {gamma}{diff}: y({gamma}) - {base} "
                  f"= {gamma} ({at_one} - {base}), linear in {of}{along}", i)


GATE_ONE = 20.0
"""Where ``tanh`` rounds to 1 in every dtype (``1 - tanh(20) < 2**-57``): a tanh gate set
there passes its branch's update whole, as γ = 1 does a LayerScale's."""


def _gate(fn: str | None, g: torch.Tensor) -> torch.Tensor:
    """The multiplier a gate parameter makes, as the block computes it in its dtype."""
    if fn is None:
        return g
    assert float(torch.tanh(torch.tensor(GATE_ONE, dtype=g.dtype))) == 1.0
    return torch.tanh(g)


def affine_in_gamma(case: Case) -> dict[str, float]:
    """Per site with a LayerScale γ or a gate: the constructor's value is the value held,
    y(γ) - shortcut(x) is zero at γ = 0, and linear in γ (``γ (y(1) - shortcut(x))`` within
    its rounding), γ broadcast along the dimension the recipe names (:func:`gamma_along`);
    for a tanh gate γ is ``tanh(g)``, and ``y(1)`` is read at g = :data:`GATE_ONE`."""
    __tracebackhide__ = True
    scaled = [(i, s.scale) for i, s in enumerate(case.recipe.sites) if s.scale]
    if not scaled:
        raise Unjudged("no site declares a LayerScale γ")
    for i, name in scaled:
        assert name is not None
        _check_gamma(case, i, name)
    return {}
