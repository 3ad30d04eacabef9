"""The torchvision recipes: each names what its block has; with the last BatchNorm's weight
and bias zeroed the block is ``relu(x)`` bitwise in float64 (``relu(downsample(x))`` for the
downsampling Bottleneck), by hand and through the law, and so is the block as the library's
own ``zero_init_residual`` leaves it (the recipes' ``zero_init``), which stops being so once
that BatchNorm's bias moves.

These tests skip, naming torchvision and the reason, where torchvision cannot be imported: on
x86_64 beside the CPU torch wheel the index's torchvision is a CUDA build that fails to
import. docs/blocks-install.md gives the environment they run in.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.check import Draw, run_law
from resverify.blocks.laws_zero import zero_branch
from resverify.blocks.recipe import Recipe, validate
from resverify.blocks.torch_adapter import build, make_case
from resverify.properties.assertions import PropertyFailure

# the skip reason is the ImportError the catalog module raises, naming the library
catalog_tv = pytest.importorskip("resverify.blocks.catalog.torchvision", exc_type=ImportError)

BY_NAME = {r.name: r for r in catalog_tv.RECIPES}
ZERO_INIT = sorted(r.name for r in catalog_tv.RECIPES if r.zero_init is not None)
DRAW = Draw(batch=2, seq=4, seed=5, weight_exp=0, input_exp=0)


def _zeroed_output(recipe: Recipe, names: list[str]
                   ) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    case = make_case(recipe, "float64", "eval", DRAW)
    with torch.no_grad():
        for name in names:
            case.module.get_parameter(name).zero_()
        return case.module, case.inputs.x, recipe.run(case.module, case.inputs.x.clone(), {})


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_recipe_names_only_what_its_block_has(name: str) -> None:
    recipe = BY_NAME[name]
    for dtype in recipe.dtypes:
        validate(recipe, build(recipe, dtype, seed=0))


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_zeroed_block_is_relu_of_its_shortcut_bitwise_in_float64(name: str) -> None:
    recipe = BY_NAME[name]
    (site,) = recipe.sites
    module, x, y = _zeroed_output(recipe, list(site.zero))
    with torch.no_grad():
        skip = x if site.shortcut == "identity" else module.get_submodule(site.shortcut)(x)
    assert torch.equal(y, torch.relu(skip)), f"{name}: max diff " \
        f"{float((y - torch.relu(skip)).abs().max())!r}"
    assert not torch.equal(y, skip), "x has negative entries, so relu(x) must differ from x"


def test_basic_and_bottleneck_declare_the_zero_init_option() -> None:
    assert ZERO_INIT == ["torchvision.BasicBlock", "torchvision.Bottleneck"]


@pytest.mark.parametrize("name", ZERO_INIT)
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_zero_init_residual_block_is_relu_of_x(name: str, mode: str) -> None:
    case = make_case(BY_NAME[name], "float64", mode, DRAW)
    built = case.extra["zero_init"]
    assert not torch.equal(built.get_parameter("bn1.weight"), torch.zeros_like(
        built.get_parameter("bn1.weight"))), "only the last BatchNorm is zero-initialised"
    zero_branch(case)


def test_zero_init_residual_is_not_relu_once_the_bias_moves() -> None:
    """The control: ``zero_init_residual`` zeroes bn2's weight only; a bias that training
    moved gives the branch a constant, and the law sees it."""
    case = make_case(BY_NAME["torchvision.BasicBlock"], "float64", "eval", DRAW)
    with torch.no_grad():
        case.extra["zero_init"].get_parameter("bn2.bias").fill_(0.1)
    with pytest.raises(PropertyFailure, match="zero-init"):
        zero_branch(case)


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("law", ["zero_branch", "decomposition", "no_aliasing",
                                 "gradient_skip"])
def test_law_passes_in_float64(name: str, law: str) -> None:
    record = run_law(BY_NAME[name], law, "float64", "eval", max_examples=3)
    assert record.verdict == "pass", record.line()
