"""The torch adapter: a ``torch.nn.Module`` answers the block laws through hooks and its own
submodules.

The stream is read off the norms with forward hooks (:func:`~.trace.observe`), a branch runs
alone through the module's own submodules (:meth:`~.recipe.Site.terms`), a parameter is
zeroed in a copy, and every VJP is torch's autograd. Why the site's VJP is autograd on the
composition with F's ops created in the block's order: autograd then adds the stream's
gradient parts (the skip's, and one per op of F that reads the stream) in the order the
block's own backward does (summing the skip's part and F's total separately was one ulp off
on the Hugging Face layers in float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from resverify.blocks.adapter import BlockVjp
from resverify.blocks.recipe import Recipe, apply_branch
from resverify.blocks.trace import (
    Case,
    Observed,
    no_drop,
    observe,
    shortcut,
    site_exit,
    site_post,
    site_sum,
    skip_scale,
    zeroed,
)

if TYPE_CHECKING:
    from resverify.blocks.check import Draw, LawRecord

__all__ = ["TORCH", "TorchAdapter"]


class TorchAdapter:
    """The block laws' questions, answered by a torch module (:class:`~.adapter.BlockAdapter`)."""

    library = "torch"
    unjudged: Mapping[str, str] = {}

    def observe(self, case: Case) -> Observed:
        with no_drop(case.module, case.recipe):
            return observe(case.recipe, case.module, case.inputs.x.clone(),
                           case.inputs.context)

    def shortcut(self, case: Case, i: int, s: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            return shortcut(case.module, case.recipe.sites[i], s).detach()

    def parts(self, case: Case, i: int, s: torch.Tensor
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        site = case.recipe.sites[i]
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            terms = [t.detach() for t in site.terms(case.module, s, case.inputs.context)]
            return shortcut(case.module, site, s).detach(), terms

    def compose(self, case: Case, i: int, skip: torch.Tensor, update: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        site = case.recipe.sites[i]
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            z = site_sum(case.module, site, skip, update).detach()
            return z, site_post(case.module, site, z).detach()

    def post(self, case: Case, i: int, z: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad(), no_drop(case.module, case.recipe):
            return site_post(case.module, case.recipe.sites[i], z).detach()

    def beta(self, case: Case, i: int) -> torch.Tensor | float:
        return skip_scale(case.module, case.recipe.sites[i])

    def zeroed(self, case: Case, names: Sequence[str]) -> Case:
        return replace(case, module=zeroed(case.module, list(names)))

    def vjp(self, case: Case, params: bool = False) -> BlockVjp:
        module = case.module
        x = case.inputs.x.detach().clone().requires_grad_(True)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad] \
            if params else []
        with no_drop(module, case.recipe), torch.enable_grad():
            y = case.recipe.run(module, x, case.inputs.context)
            y_bar = case.inputs.cotangent(y)
            grads = torch.autograd.grad(y, [x, *(p for _, p in named)], y_bar,
                                        allow_unused=True)
        return BlockVjp(y.detach(), y_bar, grads[0],
                        [(n, g) for (n, _), g in zip(named, grads[1:], strict=True)])

    def site_vjp(self, case: Case, i: int, s: torch.Tensor, g: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``s̄`` is autograd's own VJP of the site as the recipe composes it, ``(β
        shortcut(s) + alpha F(s)) / c`` through the post part, F's ops created in the block's
        order (module doc); the parts come from the same composition with the skip and each
        branch reading a copy of ``s`` of their own."""
        site, module, ctx = case.recipe.sites[i], case.module, case.inputs.context
        with no_drop(module, case.recipe), torch.enable_grad():
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
            grads = torch.autograd.grad(site_post(module, site, z), leaves, g,
                                        allow_unused=True)
        return whole, [torch.zeros_like(s) if p is None else p for p in grads]

    def zero_map_vjp(self, case: Case, seen: Observed | None, y_bar: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        module = case.module
        x = case.inputs.x.detach().clone().requires_grad_(True)
        with no_drop(module, case.recipe), torch.enable_grad():
            out = x
            for i, site in enumerate(case.recipe.sites):
                z = site_sum(module, site, shortcut(module, site, out),
                             torch.zeros((), dtype=out.dtype))
                own = None if seen is None else seen.sums[i]
                if own is not None:  # the block's own value, the map's gradient
                    z = z + (own - z).detach()
                out = site_post(module, site, z)
                if seen is not None:
                    out = out + (seen.exits[i] - out).detach()
            if out.shape != y_bar.shape:
                return out.detach(), y_bar
            e_bar = y_bar if out is x else torch.autograd.grad(out, x, y_bar)[0]
        return out.detach(), e_bar

    def value(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def laws(self, recipe: Recipe, paths: Iterable[str] = ()) -> list[str]:
        from resverify.blocks.laws import applicable

        return applicable(recipe, paths)

    def validate(self, recipe: Recipe, dtype: str, seed: int) -> Any:
        from resverify.blocks.check import build

        return build(recipe, dtype, seed)

    def run_law(self, recipe: Recipe, law: str, dtype: str, mode: str, *,
                max_examples: int | None = None, seed: int = 0, shrink: bool = True,
                paths: Iterable[str] = ()) -> LawRecord:
        from resverify.blocks.check import run_law

        return run_law(recipe, law, dtype, mode, max_examples=max_examples, seed=seed,
                       shrink=shrink, paths=paths)

    def judge_example(self, recipe: Recipe, law: str, dtype: str, mode: str, draw: Draw,
                      paths: Iterable[str] = ()) -> dict[str, float]:
        from resverify.blocks.check import judge_example

        return judge_example(recipe, law, dtype, mode, draw, paths)

    def probes(self, recipe: Recipe, dtypes: list[str], seed: int
               ) -> dict[str, list[dict[str, Any]]]:
        from resverify.blocks.probes import probes

        return probes(recipe, dtypes, seed)


TORCH = TorchAdapter()
"""The adapter of every torch block."""
