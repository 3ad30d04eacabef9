"""The timm recipes: each names what its block has; with γ (or the projections) zeroed the
block is the identity bitwise in float64, by hand and through the law; LayerScale holds the
constructor's value; and ``init_values=0.0`` silently builds no LayerScale (pinned).

These tests skip, naming timm and the reason, where timm cannot be imported: on x86_64 with
the CPU torch wheel, the index's torchvision (which timm imports) is a CUDA build that fails
to import. docs/blocks-install.md gives the environment they run in.
"""

from __future__ import annotations

import pytest
import torch

from resverify.blocks.check import Draw, run_law
from resverify.blocks.recipe import Recipe, Site, validate
from resverify.blocks.torch_adapter import build, make_case
from resverify.spec.errors import UsageError

# the skip reason is the ImportError the catalog module raises, naming the library
catalog_timm = pytest.importorskip("resverify.blocks.catalog.timm", exc_type=ImportError)

BY_NAME = {r.name: r for r in catalog_timm.RECIPES}
DRAW = Draw(batch=2, seq=3, seed=11, weight_exp=0, input_exp=0)


def _zeroed_output(recipe: Recipe, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    case = make_case(recipe, "float64", "eval", DRAW)
    with torch.no_grad():
        for name in names:
            case.module.get_parameter(name).zero_()
        return case.inputs.x, recipe.run(case.module, case.inputs.x, {})


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_recipe_names_only_what_its_block_has(name: str) -> None:
    recipe = BY_NAME[name]
    for dtype in recipe.dtypes:
        validate(recipe, build(recipe, dtype, seed=0))


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_zeroed_block_is_its_shortcut_bitwise_in_float64(name: str) -> None:
    recipe = BY_NAME[name]
    if recipe.sites[0].shortcut != "identity":
        pytest.skip(f"{name} projects; test_projecting_convnext_block_... checks it")
    x, y = _zeroed_output(recipe, [p for s in recipe.sites for p in s.zero])
    assert torch.equal(y, x), f"{name}: max |y - x| {float((y - x).abs().max())!r}, expected 0"


def _law_cases() -> list[object]:
    """Every forward law on every recipe, affine_in_gamma where a site has γ: ConvNeXt's γ
    scales dimension 1 of an (N, C, H, W) map (``scale_axis=1``), and with a width change
    y(γ = 0) is the 1x1 projection of x."""
    return [pytest.param(name, law, id=f"{law}-{name}") for name in sorted(BY_NAME)
            for law in ("zero_branch", "decomposition", "affine_in_gamma")
            if law != "affine_in_gamma" or any(s.scale for s in BY_NAME[name].sites)]


@pytest.mark.parametrize(("name", "law"), _law_cases())
def test_forward_law_passes_in_float64(name: str, law: str) -> None:
    record = run_law(BY_NAME[name], law, "float64", "eval", max_examples=4)
    assert record.verdict == "pass", record.line()


def test_drop_path_law_passes_on_the_vit_block() -> None:
    record = run_law(BY_NAME["timm.vit.Block"], "drop_path", "float32", "train", max_examples=2)
    assert record.verdict == "pass", record.line()


def test_layer_scale_holds_the_constructor_value_in_float64() -> None:
    module = build(BY_NAME["timm.vit.Block"], "float64", seed=0)
    gamma = module.get_parameter("ls1.gamma")
    assert torch.equal(gamma, torch.full_like(gamma, catalog_timm.LAYER_SCALE))


def test_zeroing_one_branch_is_not_the_identity() -> None:
    """The control: zeroing only the attention's γ leaves the MLP branch."""
    x, y = _zeroed_output(BY_NAME["timm.vit.Block"], ["ls1.gamma"])
    assert not torch.equal(y, x)


def test_init_values_zero_builds_no_layer_scale() -> None:
    """Documented choice, easy to trip on: ``init_values=0.0`` is falsy, so ``Block`` builds
    ``ls1``/``ls2`` as Identity; a recipe declaring γ = 0 is refused, naming ``ls1.gamma``."""
    from timm.models.vision_transformer import Block

    block = Block(catalog_timm.DIM, num_heads=2, init_values=0.0)
    assert isinstance(block.ls1, torch.nn.Identity)
    zero_gamma = Recipe(
        name="timm.vit.Block(init_values=0.0)",
        factory=lambda dtype: Block(catalog_timm.DIM, num_heads=2, init_values=0.0),
        sites=(Site("attn", ("norm1", "attn", "ls1"), zero=("ls1.gamma",), norms=("norm1",),
                    scale="ls1.gamma", scale_init=0.0),),
        shape=("batch", "seq", catalog_timm.DIM))
    with pytest.raises(UsageError, match=r"ls1\.gamma"):
        validate(zero_gamma, block)


def test_projecting_convnext_block_is_its_shortcut_with_gamma_zeroed() -> None:
    """The output is wider than the input: with γ zeroed it is the 1x1 projection of x."""
    recipe = BY_NAME["timm.ConvNeXtBlock(8->16)"]
    case = make_case(recipe, "float64", "eval", DRAW)
    with torch.no_grad():
        case.module.get_parameter("gamma").zero_()
        y = recipe.run(case.module, case.inputs.x, {})
        expected = case.module.get_submodule("shortcut")(case.inputs.x)
    assert y.shape[1] == 2 * case.inputs.x.shape[1]
    assert torch.equal(y, expected)
