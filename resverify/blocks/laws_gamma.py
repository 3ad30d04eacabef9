"""The affine-in-γ law: a LayerScale or gate multiplies its branch's update, and nothing else.

Why a law: a γ that the constructor does not hold, or that scales something besides the
update (the skip, the sum, the update twice), leaves the sum decomposable at the γ the block
holds and the zero branch exact, yet the block no longer interpolates between the identity
(γ = 0) and its branch. The law sets γ and reads the site's sum off the hooks: at γ = 0 the
sum is the site's sum with that branch 0, ``(β·shortcut(s) + alpha·(the other branches))/c``
(bitwise where the site is ``exact``, else within :func:`~.laws_forward.site_budget`), and
``z(γ) - z(0) = γ (z(1) - z(0))`` within the roundings of the three sums. For a plain site
(no parallel branch, no skip or post scale) ``z(0)`` is the shortcut itself and each sum one
rounding of at most ``u |z|``; where the site has parallel branches or scales, each sum
rounds as :func:`~.laws_forward.sum_budget` says, from the terms' own magnitudes (under
cancellation between branches ``|z|`` alone would not bound it).

The figures (the report's LayerScale plot): with every γ of the block set to each value of
:data:`GAMMAS`, the fraction of each LayerScale site's sum bitwise equal to the shortcut of
its entry (``swamped_at_gamma[γ][site]``, the mean over the judged examples: how much of the
update a small γ leaves swamped). A failing record keeps those of its example
(:func:`~.trace.measured`).
"""

from __future__ import annotations

import contextlib

import torch

from resverify.blocks.adapters import ask
from resverify.blocks.laws_forward import observed, site_budget
from resverify.blocks.laws_stream import swamped_fraction
from resverify.blocks.trace import (
    UNIT_ROUNDOFF,
    Case,
    Unjudged,
    first_difference,
    measured,
    no_drop,
    shortcut,
    site_sum,
    with_parameter,
)
from resverify.spec.errors import UsageError

__all__ = []

GAMMAS = (1e-6, 1e-4, 1e-2, 1.0)
"""The LayerScale values of the swamped-fraction figures."""

GATE_ONE = 20.0
"""Where ``tanh`` rounds to 1 in every dtype (``1 - tanh(20) < 2**-57``): a tanh gate set
there passes its branch's update whole, as γ = 1 does a LayerScale's."""


def _sum(case: Case, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seen = observed(case)
    z = seen.sums[i]
    if z is None:
        raise Unjudged(f"site {i}'s sum is not visible (an activation follows it)")
    return seen.entries[i], z


def _gamma_budget(dtype: str, z_g: torch.Tensor, z_1: torch.Tensor, g: torch.Tensor,
                  d_1: torch.Tensor) -> torch.Tensor:
    """``|d(g) - g d(1)|``'s bound for a plain site: the two sums' roundings, the product
    ``g G``'s, and the float64 arithmetic of the check itself."""
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


class _Site:
    """Site ``i`` of the case at its entry ``s``: its shortcut, and each branch's terms and
    the sum's rounding budget at a value of γ (grad mode on, as the block runs)."""

    def __init__(self, case: Case, i: int, s: torch.Tensor) -> None:
        self.case, self.i, self.s = case, i, s
        self.site = case.recipe.sites[i]
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            self.skip = shortcut(case.module, self.site, s).detach()

    @property
    def plain(self) -> bool:
        return not self.site.parallel and not self.site.scaled

    def terms(self) -> list[torch.Tensor]:
        with torch.enable_grad(), no_drop(self.case.module, self.case.recipe):
            return [t.detach() for t in self.site.terms(self.case.module, self.s,
                                                        self.case.inputs.context)]

    def base(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sum at γ = 0 as the recipe composes it from the branches' values there, and
        its budget (None: bitwise)."""
        if self.plain:
            return self.skip, None
        terms = self.terms()
        update = terms[0]
        for term in terms[1:]:
            update = update + term
        with torch.enable_grad():
            z = site_sum(self.case.module, self.site, self.skip, update).detach()
        return z, None if self.site.exact else self.budget(terms)

    def budget(self, terms: list[torch.Tensor]) -> torch.Tensor:
        """One evaluation's rounding of the site's sum (half of the two evaluations'
        :func:`~.laws_forward.site_budget`)."""
        return site_budget(ask(self.case).beta(self.case, self.i), self.site, self.skip,
                           terms) / 2


def _linearity_budget(at: _Site, name: str, values: tuple[torch.Tensor, torch.Tensor],
                      sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor], gb: torch.Tensor,
                      d1: torch.Tensor) -> torch.Tensor:
    """``|d(g) - g d(1)|``'s bound: :func:`_gamma_budget` for a plain site; else each of the
    three sums' rounding from its terms (``E(g) + E(0) + |g| (E(1) + E(0))``), the product
    ``g G``'s, and the float64 arithmetic of the check."""
    z0, z1, zg = sums
    if at.plain:
        return _gamma_budget(at.case.dtype, zg, z1, gb, d1)
    errors = []
    for value in (0.0, 1.0 if at.site.scale_fn is None else GATE_ONE, values[1]):
        with with_parameter(at.case.module, name, value):
            errors.append(at.budget(at.terms()))
    u = UNIT_ROUNDOFF[at.case.dtype]
    g = gb.abs()
    a = [t.to(torch.float64).abs() for t in (z0, z1, zg)]
    check = 2.0**-52 * 4 * (a[2] + a[0] + g * (a[1] + a[0]))
    return errors[2] + errors[0] + g * (errors[1] + errors[0]) + \
        u * g * d1.abs() * (1 + 2 * u) + check


def _check_built(case: Case, i: int, name: str) -> None:
    __tracebackhide__ = True
    site = case.recipe.sites[i]
    built = case.pristine.get_parameter(name)
    if site.scale_init is not None:
        diff = first_difference(built.detach(), torch.full_like(built, site.scale_init))
        if diff:
            case.fail("affine_in_gamma", f"{name} as constructed{diff}: the constructor was "
                      f"given {site.scale_init!r}", i)


def _check_gamma(case: Case, i: int, name: str) -> None:
    __tracebackhide__ = True
    law, site = "affine_in_gamma", case.recipe.sites[i]
    _check_built(case, i, name)
    g = case.module.get_parameter(name).detach().clone()
    base = "x" if site.shortcut == "identity" else f"{site.shortcut}(x)"
    if site.scaled or site.parallel:
        base = "z(0)"
    gamma, one = ("γ", 1.0) if site.scale_fn is None else (f"{site.scale_fn}(g)", GATE_ONE)
    with with_parameter(case.module, name, 0.0):
        s, z0 = _sum(case, i)
        at = _Site(case, i, s)
        expected, budget = at.base()
    diff = first_difference(z0, expected, budget)
    if diff:
        rest = f"y({gamma}) - {base} is 0" if at.plain else \
            "the sum is the site's sum without this branch"
        case.fail(law, f"z at {name} = 0{diff}: {rest} at {gamma} = 0", i)
    with with_parameter(case.module, name, one):
        _, z1 = _sum(case, i)
    with with_parameter(case.module, name, g):
        _, zg = _sum(case, i)
    d1 = z1.to(torch.float64) - z0.to(torch.float64)
    dg = zg.to(torch.float64) - z0.to(torch.float64)
    gb = gamma_along(case, i, _gate(site.scale_fn, g).to(torch.float64), d1)
    budget = _linearity_budget(at, name, (z0, g), (z0, z1, zg), gb, d1)
    diff = first_difference(dg, gb * d1, budget)
    if diff:
        along = "" if site.scale_axis is None else f" along dim {site.scale_axis}"
        of = name if site.scale_fn is None else f"{site.scale_fn}({name})"
        at_one = "y(1)" if site.scale_fn is None else f"y(g={GATE_ONE:g})"
        case.fail(law, f"y({gamma}) - {base} at the block's {gamma}{diff}: y({gamma}) - {base} "
                  f"= {gamma} ({at_one} - {base}), linear in {of}{along}", i)


def _gate(fn: str | None, g: torch.Tensor) -> torch.Tensor:
    """The multiplier a gate parameter makes, as the block computes it in its dtype."""
    if fn is None:
        return g
    assert float(torch.tanh(torch.tensor(GATE_ONE, dtype=g.dtype))) == 1.0
    return torch.tanh(g)


def swamped_by_gamma(case: Case, scaled: list[tuple[int, str]]) -> dict[str, float]:
    """Per value of :data:`GAMMAS` (every γ of the block set to it) and LayerScale site: the
    fraction of the site's sum (its exit where the sum is not visible) bitwise equal to its
    shortcut of the entry (:func:`~.laws_stream.swamped_fraction`)."""
    figures = {}
    for gamma in GAMMAS:
        with contextlib.ExitStack() as stack:
            for _, name in scaled:
                stack.enter_context(with_parameter(case.module, name, gamma))
            seen = observed(case)
        for i, _ in scaled:
            z = seen.exits[i] if seen.sums[i] is None else seen.sums[i]
            assert z is not None
            label = case.recipe.sites[i].label
            figures[f"swamped_at_gamma[{gamma!r}][{label}]"] = swamped_fraction(
                case, i, seen, z)
    return figures


def affine_in_gamma(case: Case) -> dict[str, float]:
    """Per site with a LayerScale γ or a gate: the constructor's value is the value held,
    y(γ) - shortcut(x) is zero at γ = 0, and linear in γ (``γ (y(1) - shortcut(x))`` within
    its rounding), γ broadcast along the dimension the recipe names (:func:`gamma_along`);
    for a tanh gate γ is ``tanh(g)``, and ``y(1)`` is read at g = :data:`GATE_ONE`. On a
    site with parallel branches or a skip or post scale, ``shortcut(x)`` reads ``z(0)``, the
    site's sum with this branch 0."""
    __tracebackhide__ = True
    scaled = [(i, s.scale) for i, s in enumerate(case.recipe.sites) if s.scale]
    if not scaled:
        raise Unjudged("no site declares a LayerScale γ")
    figures = swamped_by_gamma(case, scaled)
    with measured(figures):
        for i, name in scaled:
            _check_gamma(case, i, name)
    return figures
