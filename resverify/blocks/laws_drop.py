"""The drop-path law: stochastic depth does what it says, row by row and on average.

Why the mask is read off the output: the realised mask is data (a traced block takes it as
an input), and for inverted drop path each row of a site's exit can only be one of two
floats, the exit with the update dropped (``s``, through the site's post part) or kept and
divided by the keep rate (``s + F * fl(1/keep)``, with ``fl(1/keep)`` the keep rate's
reciprocal rounded once in the block's dtype, as the libraries compute it). A row that is
neither is a failure, whatever the randomness; which of the two it is gives that row's mask.
A row where both are the same float tells nothing and is left out of the counts.

The statistics, with the false alarm of each test at most :data:`FALSE_ALARM`: the number of
kept rows out of ``n`` must not lie in either tail of Binomial(n, keep) beyond
``FALSE_ALARM / 2``, and two sites' masks must not agree on more rows than Binomial(n,
k1 k2 + (1 - k1)(1 - k2)) allows at ``FALSE_ALARM`` (a mask reused for both branches agrees
everywhere). The tails are exact sums of Fractions, no scipy needed. The probability used is
the block's own if it lies strictly between 0 and 1, else :data:`MIDDLE`, and a site whose
rate an earlier site already has gets one of :data:`APART` instead (rates set apart: at equal
rates, as timm builds them, a module applied to the wrong site draws the right-looking rows).
In eval mode drop path is the identity; at probability 0 train mode keeps every row unscaled,
at 1 it drops every row (the zero-branch map).

Why each site is moved alone: a block may build one drop-path module per site and apply the
first to both branches (DINOv2-derived blocks). Every row of every site is then still one of
its two floats, each branch draws its own mask, and the rates agree, so nothing above sees it.
Before the statistics, each site's modules are set to 1 with the other sites' at 0, and to 0
with the others at 1: every site's rows must then all be dropped or all kept as its *own*
module's probability says, and a site that disobeys is failed naming its module.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from fractions import Fraction

import torch

from resverify.blocks.trace import (
    TORCH_DTYPES,
    Case,
    Inputs,
    Observed,
    Unjudged,
    drop_prob,
    first_difference,
    observe,
    site_exit,
)

__all__ = []

FALSE_ALARM = Fraction(1, 10**9)
MIDDLE = 0.25
APART = (0.25, 0.5, 0.375, 0.125, 0.625, 0.75)
"""Probabilities that set sites' rates apart in the statistics (:func:`_apart`)."""
ROWS, CALLS = 64, 8
"""Rows per call and calls per example of the statistical part: n = 512 rows a site."""


def binomial_pmf(n: int, p: Fraction) -> list[Fraction]:
    """``P(K = j)`` for j = 0..n, K ~ Binomial(n, p), exactly (each term from the last)."""
    if p in (0, 1):
        return [Fraction(int(j == (n if p == 1 else 0))) for j in range(n + 1)]
    terms = [(1 - p) ** n]
    for j in range(n):
        terms.append(terms[-1] * (n - j) / (j + 1) * p / (1 - p))
    return terms


def binomial_tail(n: int, p: Fraction, k: int, upper: bool) -> Fraction:
    """``P(K >= k)`` (``upper``) or ``P(K <= k)`` for K ~ Binomial(n, p), exactly."""
    pmf = binomial_pmf(n, p)
    return sum(pmf[max(k, 0):] if upper else pmf[:max(k + 1, 0)], Fraction(0))


def _alternatives(case: Case, i: int, s: torch.Tensor, keep: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The site's exit with every row dropped, and with every row kept and rescaled."""
    site, module = case.recipe.sites[i], case.module
    with torch.enable_grad():
        f = site.evaluate(module, s, case.inputs.context).detach()
        inv = torch.ones((), dtype=f.dtype).div(keep) if keep > 0 else torch.ones((), dtype=f.dtype)
        dropped = site_exit(module, site, s, f * 0)[1].detach()
        kept = site_exit(module, site, s, f * inv)[1].detach()
    return dropped, kept


def _same_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row (first dimension): every element equal as values (or both NaN)."""
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    return same.reshape(a.shape[0], -1).all(dim=1)


def _rows(case: Case, i: int, seen: Observed, keep: float, label: str = ""
          ) -> list[bool | None]:
    """Each row's mask (True kept), None where the two alternatives coincide."""
    __tracebackhide__ = True
    s, out = seen.entries[i], seen.exits[i]
    dropped, kept = _alternatives(case, i, s, keep)
    if out.dtype != kept.dtype:
        case.fail("drop_path", f"the exit is {out.dtype}, expected {kept.dtype}", i)
    is_dropped, is_kept = _same_rows(out, dropped), _same_rows(out, kept)
    neither = ~(is_dropped | is_kept)
    if bool(neither.any()):
        b = int(neither.nonzero()[0])
        case.fail("drop_path", f"{label}row {b}{first_difference(out[b], kept[b])}: each row "
                  f"is s or s + F*fl(1/keep), keep {keep!r} of site {i}'s {_modules(case, i)} "
                  f"(the dropped row differs too: {first_difference(out[b], dropped[b])})", i)
    return [None if d and k else bool(k) for d, k in zip(is_dropped.tolist(), is_kept.tolist(),
                                                           strict=True)]


def _keep_rate(case: Case, i: int, masks: list[bool | None], keep: float) -> None:
    __tracebackhide__ = True
    known = [m for m in masks if m is not None]
    n, k = len(known), sum(known)
    p = Fraction(keep)
    low, high = binomial_tail(n, p, k, False), binomial_tail(n, p, k, True)
    if min(low, high) <= FALSE_ALARM / 2:
        case.fail("drop_path", f"kept rows = {k} of {n}, expected about {float(p) * n:.1f} "
                  f"(keep {keep!r}; tail {float(min(low, high)):.3g} <= "
                  f"{float(FALSE_ALARM / 2):.3g})", i)


def _independent(case: Case, pair: tuple[int, int], masks: dict[int, list[bool | None]],
                 keeps: dict[int, float]) -> None:
    __tracebackhide__ = True
    i, j = pair
    both = [(a, b) for a, b in zip(masks[i], masks[j], strict=True)
            if a is not None and b is not None]
    n, agree = len(both), sum(a == b for a, b in both)
    ki, kj = Fraction(keeps[i]), Fraction(keeps[j])
    tail = binomial_tail(n, ki * kj + (1 - ki) * (1 - kj), agree, True)
    if n and tail <= FALSE_ALARM:
        case.fail("drop_path", f"sites {i} and {j}: masks agree on {agree} of {n} rows, "
                  f"expected independent masks (upper tail {float(tail):.3g} <= "
                  f"{float(FALSE_ALARM):.3g}): one mask reused for both branches?", j)


def _probability(case: Case, i: int) -> float:
    site = case.recipe.sites[i]
    p = float(getattr(case.module.get_submodule(site.drop_path[0]), site.drop_prob_attr))
    return p if 0.0 < p < 1.0 else MIDDLE


def _apart(case: Case, sites: list[int]) -> dict[int, float]:
    """Each site's probability for the statistics: its module's own (:func:`_probability`),
    unless an earlier site has it already, then the first of :data:`APART` no site has. Set
    apart, a module that governs another site's rows shows in that site's rescaling and
    keep rate; at equal rates (as timm builds them) it would not."""
    chosen: dict[int, float] = {}
    for i in sites:
        p = _probability(case, i)
        chosen[i] = p if p not in chosen.values() else \
            next(q for q in APART if q not in chosen.values())
    return chosen


def _modules(case: Case, i: int) -> str:
    return ", ".join(repr(n) for n in case.recipe.sites[i].drop_path)


def _run(case: Case, inputs: Inputs, call: int) -> Observed:
    """One pass drawn from the case's own seed and ``call``, whatever earlier code left in
    torch's global generator, which is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(inputs.seed * CALLS + call)
        return observe(case.recipe, case.module, inputs.x.clone(), inputs.context)


def _statistics(case: Case, sites: list[int]) -> None:
    __tracebackhide__ = True
    inputs = Inputs.draw(case.recipe, TORCH_DTYPES[case.dtype], ROWS, 2, case.inputs.seed)
    probs = _apart(case, sites)
    masks: dict[int, list[bool | None]] = {i: [] for i in sites}
    with _probabilities(case, probs):
        for call in range(CALLS):
            seen = _run(case, inputs, call)
            for i in sites:
                masks[i] += _rows(case, i, seen, 1.0 - probs[i])
    for i in sites:
        _keep_rate(case, i, masks[i], 1.0 - probs[i])
    for a, b in itertools.pairwise(sites):
        _independent(case, (a, b), masks, {i: 1.0 - p for i, p in probs.items()})


@contextlib.contextmanager
def _probabilities(case: Case, probs: dict[int, float]) -> Iterator[None]:
    """Each listed site's drop probability set, restored afterwards."""
    with contextlib.ExitStack() as stack:
        for i, p in probs.items():
            stack.enter_context(drop_prob(case.module, case.recipe.sites[i], p))
        yield


def _extremes(case: Case, sites: list[int]) -> None:
    """Probability 0 keeps every row unscaled and 1 drops every row: every site at once,
    then each site's modules moved alone (to 1 with the others at 0, and to 0 with the
    others at 1), so a module that governs no site, or another site's rows, is named."""
    __tracebackhide__ = True
    configs: list[tuple[int | None, float]] = [(None, 0.0), (None, 1.0)]
    if len(sites) > 1:
        configs += [(i, p) for i in sites for p in (1.0, 0.0)]
    for moved, p in configs:
        probs = {j: p if moved in (None, j) else 1.0 - p for j in sites}
        said = f"at probability {p}: " if moved is None else \
            f"with site {moved}'s {_modules(case, moved)} alone at probability {p} (the " \
            f"other sites' at {1.0 - p}): "
        with _probabilities(case, probs):
            seen = _run(case, case.inputs, 0)
            for j in sites:
                _all_alike(case, j, _rows(case, j, seen, 1.0, said), probs[j] == 0.0, said)


def _all_alike(case: Case, j: int, masks: list[bool | None], kept: bool, said: str) -> None:
    """Every row of site ``j`` kept (``kept``) or dropped, as its probability 0 or 1 says."""
    __tracebackhide__ = True
    row = next((b for b, m in enumerate(masks) if m is (not kept)), None)
    if row is None:
        return
    want = "kept" if kept else "dropped"
    case.fail("drop_path", f"{said}row {row} {'dropped' if kept else 'kept'}, expected every "
              f"row {want}, as site {j}'s {_modules(case, j)} at probability "
              f"{0.0 if kept else 1.0} says: {_modules(case, j)} does not govern site {j}'s "
              "rows", j)


def drop_path(case: Case) -> dict[str, float]:
    """Train mode: every row of a drop-path site is its dropped or its kept-and-rescaled
    exit, the keep rate passes an exact binomial test, each site draws its own mask, and the
    probability's extremes keep or drop everything, each site's modules moved alone too (each
    governs its own site's rows); eval mode: every row is kept, unscaled."""
    __tracebackhide__ = True
    sites = [i for i, s in enumerate(case.recipe.sites) if s.drop_path]
    if not sites:
        raise Unjudged("no site declares a drop path")
    if case.mode == "eval":
        seen = _run(case, case.inputs, 0)  # a drop path that draws in eval draws alike
        for i in sites:
            masks = _rows(case, i, seen, 1.0, "eval, where drop path is the identity: ")
            if any(m is False for m in masks):
                case.fail("drop_path", f"eval: row {masks.index(False)} dropped, expected "
                          "drop path to be the identity in eval", i)
        return {}
    _extremes(case, sites)  # first: each module moved alone, a wrong one named
    _statistics(case, sites)
    return {}
