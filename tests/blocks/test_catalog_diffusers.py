"""The diffusers recipes: each names what its block has; every applicable law passes in
float64 and float32 (every dtype: tests/blocks/test_catalog_laws.py, marked slow); the zeroed
block is the map read off ``ResnetBlock2D.forward``, ``conv_shortcut(x) / output_scale_factor``
(``x`` for the identity one), by hand; and the controls: a recipe that forgets the post-scale
or the time embedding fails the decomposition.

These tests skip, naming diffusers and how to install it, where it is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import torch
from torch import nn

from resverify.blocks.check import run_law
from resverify.blocks.recipe import Recipe
from tests.blocks.catalog_checks import catalog_tests, max_diff, zeroed

# the skip reason is the ImportError the catalog module raises, naming the library
diffusers = pytest.importorskip("resverify.blocks.catalog.diffusers", exc_type=ImportError)

BY_NAME = {r.name: r for r in diffusers.RECIPES}
PLAIN = BY_NAME["diffusers.ResnetBlock2D"]
PROJECTING = BY_NAME["diffusers.ResnetBlock2D(8->16)"]
test_recipe_names_only_what_its_block_has, test_every_applicable_law_passes = (
    catalog_tests(diffusers.RECIPES))




def test_zeroed_block_is_x() -> None:
    _, x, y = zeroed(PLAIN)
    assert torch.equal(y, x), f"max |y - x| {max_diff(y, x)!r}, expected 0 [conv2 = 0, float64]"


def test_zeroed_projecting_block_is_the_shortcut_over_sqrt_2() -> None:
    module, x, y = zeroed(PROJECTING)
    with torch.no_grad():
        expected = module.get_submodule("conv_shortcut")(x) / diffusers.SCALE
    assert y.shape[1] == 2 * x.shape[1]
    assert torch.equal(y, expected), f"max |y - expected| {max_diff(y, expected)!r}, expected 0"


def _control(recipe: Recipe, **fields: Any) -> Recipe:
    site = dataclasses.replace(recipe.sites[0], **fields)
    return dataclasses.replace(recipe, name=f"{recipe.name}(control)", sites=(site,))


def test_recipe_without_the_post_scale_fails_decomposition() -> None:
    record = run_law(_control(PROJECTING, post_scale=1.0), "decomposition", "float64", "eval",
                     max_examples=2)
    assert record.verdict == "fail", f"{record.line()}, expected fail"


def test_recipe_whose_branch_ignores_the_time_embedding_fails_decomposition() -> None:
    """The control for ``context``: the block adds the projected temb to every pixel, so a
    branch that leaves it out is not F."""
    def without_temb(m: nn.Module, s: torch.Tensor, ctx: Mapping[str, torch.Tensor]
                     ) -> torch.Tensor:
        return PLAIN.sites[0].evaluate(m, s, {"temb": torch.zeros_like(ctx["temb"])})

    record = run_law(_control(PLAIN, branch=without_temb), "decomposition", "float64", "eval",
                     max_examples=2)
    assert record.verdict == "fail", f"{record.line()}, expected fail"
