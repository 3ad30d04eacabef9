"""The backward law of a residual block: the gradient goes through the skip.

Why it is a law of its own: a detached skip, or a hand-written backward that drops the
identity's part, leaves the forward exact and the model trainable, only slower to learn;
no forward check sees it. The law rebuilds ``x̄`` site by site from the output back,
``s̄ = shortcut'(s)ᵀ z̄ + alpha J_F(s)ᵀ z̄`` with ``z̄`` the cotangent through the site's
activation and post-norms, by torch's own autograd on the site as the recipe composes it,
at the stream the module carried, and compares the module's ``x̄`` with it. Why bitwise:
the composition creates the same ops in the same order as the block, so autograd adds the
stream's gradient parts (the skip's, and one per op of F that reads the stream, two in an
RMSNorm) in the same order; summing the skip's part and F's total separately would not
(measured: one ulp off on the Hugging Face layers in float32). A site marked
``exact=False`` is judged within :func:`~.laws_forward.sum_budget` of its parts (the skip's
and each branch's share of ``x̄``, added in any order).

Precondition: the forward decomposition holds for the example (the backward of a wrong
forward is judged by :func:`~.laws_forward.decomposition`, not here); else the example is
unjudged. Every parameter must also get a finite gradient.
"""

from __future__ import annotations

import torch

from resverify.blocks.laws_forward import decomposition, sum_budget
from resverify.blocks.recipe import apply_branch
from resverify.blocks.trace import (
    Case,
    Observed,
    Unjudged,
    first_difference,
    no_drop,
    observe,
    shortcut,
    site_exit,
    site_post,
    site_sum,
)
from resverify.properties.assertions import PropertyFailure

__all__ = ["gradient_skip"]


def _site_vjp(case: Case, i: int, s: torch.Tensor, g: torch.Tensor
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(s̄, parts)`` of site ``i`` at entry ``s`` for exit cotangent ``g``: ``parts`` the
    skip's and then each branch's share of ``s̄``.

    ``s̄`` is autograd's own VJP of the site as the recipe composes it, ``(β shortcut(s) +
    alpha F(s)) / c`` through the post part, with F's ops created in the block's order, so
    that autograd sums the stream's gradient parts (the skip's and each of F's reads of
    ``s``) in the order the block's own backward does. The parts, for the message and the
    budget, come from the same composition with the skip and each branch reading a copy of
    ``s`` of their own."""
    site, module, ctx = case.recipe.sites[i], case.module, case.inputs.context
    with torch.enable_grad():
        leaf = s.detach().clone().requires_grad_(True)
        f = site.evaluate(module, leaf, ctx)
        whole = torch.autograd.grad(site_exit(module, site, leaf, f)[1], leaf, g)[0]
        leaves = [s.detach().clone().requires_grad_(True)
                  for _ in range(2 + len(site.parallel))]
        terms = [apply_branch(b, module, leaf, ctx)
                 for b, leaf in zip((site.branch, *site.parallel), leaves[1:], strict=True)]
        update = terms[0]
        for term in terms[1:]:
            update = update + term
        z = site_sum(module, site, shortcut(module, site, leaves[0]), update)
        grads = torch.autograd.grad(site_post(module, site, z), leaves, g, allow_unused=True)
    return whole, [torch.zeros_like(s) if p is None else p for p in grads]


def _params_finite(case: Case, names: list[str], grads: tuple[torch.Tensor | None, ...]
                   ) -> None:
    __tracebackhide__ = True
    for name, grad in zip(names, grads, strict=True):
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
    recipe, module = case.recipe, case.module
    x = case.inputs.x.detach().clone().requires_grad_(True)
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    with no_drop(module, recipe):
        seen: Observed = observe(recipe, module, case.inputs.x.clone(), case.inputs.context)
        with torch.enable_grad():
            y = recipe.run(module, x, case.inputs.context)
            g = case.inputs.cotangent(y)
            grads = torch.autograd.grad(y, [x, *(p for _, p in named)], g, allow_unused=True)
        for i in reversed(range(len(recipe.sites))):
            s = seen.entries[i]
            expected, parts = _site_vjp(case, i, s, g)
            if i == 0:
                _judge(case, grads[0], expected, parts)
            g = expected
    _params_finite(case, [n for n, _ in named], grads[1:])
    return {}


def _judge(case: Case, x_bar: torch.Tensor | None, expected: torch.Tensor,
           parts: list[torch.Tensor]) -> None:
    __tracebackhide__ = True
    law = "gradient_skip"
    if x_bar is None:
        case.fail(law, "x̄ is None: the output does not depend on the input, expected "
                  "ȳ + J_Fᵀȳ", 0)
    branch = parts[1]
    for part in parts[2:]:
        branch = branch + part
    budget = None if case.recipe.sites[0].exact else \
        sum_budget(x_bar.dtype, [(p, False) for p in parts])
    diff = first_difference(x_bar, expected.detach(), budget)
    if diff is None:
        return
    hint = ""
    if first_difference(x_bar, branch.detach(), budget) is None:
        hint = " (x̄ equals J_Fᵀȳ alone: the skip's gradient is missing)"
    case.fail(law, f"x̄{diff}: x̄ = ȳ + J_Fᵀȳ chained over the sites{hint}", 0)
