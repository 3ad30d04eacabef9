"""The backward law of a residual block: the gradient goes through the skip.

Why it is a law of its own: a detached skip, or a hand-written backward that drops the
identity's part, leaves the forward exact and the model trainable, only slower to learn;
no forward check sees it. The law rebuilds ``x̄`` site by site from the output back,
``s̄ = shortcut'(s)ᵀ z̄ + alpha J_F(s)ᵀ z̄`` with ``z̄`` the cotangent through the site's
activation and post-norms, by the library's own VJP of the site as the recipe composes it,
at the stream the module carried, and compares the module's ``x̄`` with it. Why bitwise:
the composition (the adapter's :meth:`~.adapter.BlockAdapter.site_vjp`) creates the same ops
in the same order as the block, so the gradient parts of the stream are added in the same
order (:mod:`.torch_adapter` says why that order matters). A site marked
``exact=False`` is judged within :func:`~.laws_forward.sum_budget` of its parts (the skip's
and each branch's share of ``x̄``, added in any order).

Precondition: the forward decomposition holds for the example (the backward of a wrong
forward is judged by :func:`~.laws_forward.decomposition`, not here); else the example is
unjudged. Every parameter must also get a finite gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from resverify.blocks.adapters import ask
from resverify.blocks.laws_forward import decomposition, sum_budget
from resverify.blocks.trace import Case, Unjudged, first_difference
from resverify.properties.assertions import PropertyFailure

__all__ = []


def _params_finite(case: Case, grads: Sequence[tuple[str, torch.Tensor | None]]) -> None:
    __tracebackhide__ = True
    for name, grad in grads:
        if grad is None:
            case.fail("gradient_skip", f"parameter {name!r} gets no gradient, expected a "
                      "finite one")
        if not bool(torch.isfinite(grad).all()):
            case.fail("gradient_skip", f"parameter {name!r}'s gradient is not finite "
                      f"(max |g| {float(grad.abs().max())!r}), expected finite")


def gradient_skip(case: Case) -> dict[str, float]:
    """``x̄ - ȳ`` is ``J_Fᵀȳ`` chained over the sites (the identity's part is there), and
    every parameter gets a finite gradient."""
    __tracebackhide__ = True
    try:
        decomposition(case)
    except PropertyFailure as exc:
        raise Unjudged(f"the forward decomposition fails ({exc})") from None
    adapter = ask(case)
    seen = adapter.observe(case)
    run = adapter.vjp(case, params=True)
    g = run.y_bar
    for i in reversed(range(len(case.recipe.sites))):
        expected, parts = adapter.site_vjp(case, i, seen.entries[i], g)
        if i == 0:
            _judge(case, run.x_bar, expected, parts)
        g = expected
    _params_finite(case, run.params)
    return {}


def _judge(case: Case, x_bar: torch.Tensor | None, expected: torch.Tensor,
           parts: list[torch.Tensor]) -> None:
    __tracebackhide__ = True
    law, v = "gradient_skip", ask(case).value
    if x_bar is None:
        case.fail(law, "x̄ is None: the output does not depend on the input, expected "
                  "ȳ + J_Fᵀȳ", 0)
    branch = parts[1]
    for part in parts[2:]:
        branch = branch + part
    budget = None if case.recipe.sites[0].exact else \
        sum_budget(x_bar.dtype, [(p, False) for p in parts])
    diff = first_difference(v(x_bar), v(expected.detach()), budget)
    if diff is None:
        return
    hint = ""
    if first_difference(v(x_bar), v(branch.detach()), budget) is None:
        hint = " (x̄ equals J_Fᵀȳ alone: the skip's gradient is missing)"
    case.fail(law, f"x̄{diff}: x̄ = ȳ + J_Fᵀȳ chained over the sites{hint}", 0)
