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

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from resverify.blocks.adapter import BlockVjp
from resverify.blocks.recipe import Recipe, apply_branch, validate
from resverify.blocks.records import Draw
from resverify.blocks.trace import (
    TORCH_DTYPES,
    Case,
    Inputs,
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
from resverify.spec.errors import ResverifyError

__all__ = []

NOISE = 0.05


def build(recipe: Recipe, dtype: str, seed: int) -> nn.Module:
    """The factory's module for ``dtype`` with torch's generator seeded, validated."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = recipe.factory(TORCH_DTYPES[dtype])
    validate(recipe, module)
    return module


def _perturbed(recipe: Recipe, pristine: nn.Module, draw: Draw) -> nn.Module:
    module = copy.deepcopy(pristine)
    gen = torch.Generator().manual_seed(draw.seed + 1)
    ends = {p for site in recipe.sites for p in site.zero}
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64) * NOISE
            param.add_(noise.to(param.dtype))
            if name in ends:
                param.mul_(2.0**draw.weight_exp)
    return module


def make_case(recipe: Recipe, dtype: str, mode: str, draw: Draw,
              paths: tuple[str, ...] = ()) -> Case:
    """The law's question for one drawn example; ``paths``: the paths law's paths."""
    pristine = build(recipe, dtype, draw.seed).train(mode == "train")
    module = _perturbed(recipe, pristine, draw).train(mode == "train")
    stream = TORCH_DTYPES[recipe.stream_dtype or dtype]
    inputs = Inputs.draw(recipe, stream, draw.batch, draw.seq, draw.seed, 2.0**draw.input_exp)
    extra: dict[str, object] = {"paths": paths} if paths else {}
    if recipe.zero_init is not None:  # as the library builds it: not perturbed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(draw.seed)
            extra["zero_init"] = recipe.zero_init(TORCH_DTYPES[dtype]).train(mode == "train")
    return Case(recipe, dtype, mode, module, pristine, inputs, extra)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread (the driver's doc, :mod:`resverify.blocks.check`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class TorchAdapter:
    """The block laws' questions, answered by a torch module (:class:`~.adapter.BlockAdapter`)."""

    library = "torch"
    inapplicable: Mapping[str, str] = {}

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

    def validate(self, recipe: Recipe, dtype: str, seed: int) -> Any:
        return build(recipe, dtype, seed)

    def case(self, recipe: Recipe, dtype: str, mode: str, draw: Draw,
             paths: tuple[str, ...] = ()) -> Case:
        return make_case(recipe, dtype, mode, draw, paths)

    def judging(self, dtype: str) -> contextlib.AbstractContextManager[None]:
        return one_thread()

    def raised(self, case: Case, exc: Exception) -> str | None:
        if isinstance(exc, ResverifyError) or \
                not isinstance(exc, RuntimeError | ValueError | TypeError):
            return None
        first = (str(exc).strip().splitlines() or [""])[0]
        return (f"the block raised {type(exc).__name__}: {first}, expected a result (input x "
                f"{list(case.inputs.x.shape)}, {case.mode} mode; if the block cannot take "
                "sizes this small, fix them in the recipe's shape)")


TORCH = TorchAdapter()
"""The adapter of every torch block."""
