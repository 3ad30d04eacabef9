"""The x-transformers recipes: each names what its layer has; every applicable law passes in
float64 and float32 (every dtype: tests/blocks/test_catalog_laws.py, marked slow); the
zeroed layers are the maps read off the source (``Residual.forward``), by hand; and the
controls: a recipe that forgets the skip scale fails, and the library's defaults that trap
a recipe (the unit offset of γ, the sandwich norm cancelling γ) are pinned.

These tests skip, naming x-transformers and how to install it, where it is missing.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from resverify.blocks.check import run_law
from resverify.blocks.recipe import Recipe, Site
from tests.blocks.catalog_checks import catalog_tests, max_diff, zeroed

# the skip reason is the ImportError the catalog module raises, naming the library
xt = pytest.importorskip("resverify.blocks.catalog.xtransformers", exc_type=ImportError)

BY_NAME = {r.name: r for r in xt.RECIPES}
LAYERSCALE = BY_NAME["x_transformers.Encoder(layerscale)"]
SCALE_RESIDUAL = BY_NAME["x_transformers.Encoder(scale_residual)"]
test_recipe_names_only_what_its_block_has, test_every_applicable_law_passes = (
    catalog_tests(xt.RECIPES))




def test_layer_with_gamma_zeroed_is_the_identity_bitwise() -> None:
    _, x, y = zeroed(LAYERSCALE)
    assert torch.equal(y, x), f"max |y - x| {max_diff(y, x)!r}, expected 0 [γ = 0, float64]"


def test_layer_scale_holds_the_constructor_value_in_every_dtype() -> None:
    """Built under the dtype checked (x-transformers takes no ``dtype=``), γ is 1e-2 rounded
    once to that dtype, not 1e-2 rounded to float32 and cast."""
    for dtype in LAYERSCALE.dtypes:
        gamma = LAYERSCALE.factory(getattr(torch, dtype)).get_parameter("layers.0.1.gamma")
        expected = torch.full_like(gamma, xt.LAYER_SCALE)
        assert torch.equal(gamma, expected), (f"γ = {float(gamma[0])!r}, expected "
                                              f"{float(expected[0])!r} [{dtype}]")


def test_skip_scaled_layer_with_branches_zeroed_is_x_times_both_scales() -> None:
    """``Residual.forward``: ``x + residual * residual_scale``; with both branches' output
    projections zeroed, the layer is ``(x * rs_0) * rs_1``."""
    module, x, y = zeroed(SCALE_RESIDUAL)
    expected = (x * module.get_parameter("layers.0.2.residual_scale")
                * module.get_parameter("layers.1.2.residual_scale"))
    assert torch.equal(y, expected), f"max |y - expected| {max_diff(y, expected)!r}, expected 0"
    assert not torch.equal(y, x), "the control: the perturbed skip scales are not 1"


def test_recipe_without_the_skip_scale_fails_decomposition() -> None:
    """The control for the skip-scale recipe: declared without ``skip_scale``, the sum the
    law composes is ``x + F``, which the layer does not compute."""
    plain = dataclasses.replace(
        SCALE_RESIDUAL, name="x_transformers.Encoder(scale_residual, undeclared)",
        sites=tuple(dataclasses.replace(s, skip_scale=1.0) for s in SCALE_RESIDUAL.sites))
    record = run_law(plain, "decomposition", "float64", "eval", max_examples=2)
    assert record.verdict == "fail", f"{record.line()}, expected fail"


def test_default_unit_offset_stores_gamma_minus_one() -> None:
    """Pinned library default (``norm_add_unit_offset=True``): ``LayerScale`` stores γ - 1
    and multiplies by ``gamma + 1``, so zeroing the parameter named ``gamma`` leaves the
    branch whole; the catalog recipe builds with ``norm_add_unit_offset=False``."""
    layer = xt.encoder_class()(dim=xt.DIM, depth=1, heads=2, use_layerscale=True,
                    layerscale_init_value=xt.LAYER_SCALE, pre_norm_has_final_norm=False)
    gamma = layer.get_parameter("layers.0.1.gamma")
    assert torch.equal(gamma, torch.full_like(gamma, xt.LAYER_SCALE - 1.0)), float(gamma[0])
    x = torch.randn(1, 3, xt.DIM)
    with torch.no_grad():
        for name in ("layers.0.1.gamma", "layers.1.1.gamma"):
            layer.get_parameter(name).zero_()
        y = layer(x)
    assert not torch.equal(y, x), "γ stored as 0 multiplies by 1: the branches stay"


def test_sandwich_norm_cancels_the_layer_scale() -> None:
    """A configuration trap the issue-35 pass found: with ``sandwich_norm=True`` the
    post-branch norm normalizes ``γ·F`` again, so γ scales nothing but LN's ε; the gate law
    fails (y(γ) - x is not linear in γ) while the decomposition holds."""
    Encoder = xt.encoder_class()

    def factory(dtype: torch.dtype) -> torch.nn.Module:
        return xt.built_in(dtype, lambda: Encoder(
            dim=xt.DIM, depth=1, heads=2, use_layerscale=True, sandwich_norm=True,
            layerscale_init_value=xt.LAYER_SCALE, norm_add_unit_offset=False,
            pre_norm_has_final_norm=False))

    sandwich = Recipe(
        name="x_transformers.Encoder(layerscale, sandwich_norm)", factory=factory,
        sites=tuple(Site(label, (f"layers.{k}.0.0", f"layers.{k}.1", f"layers.{k}.0.1"),
                         zero=(f"layers.{k}.0.1.gamma",), norms=(f"layers.{k}.0.0",),
                         scale=f"layers.{k}.1.gamma", scale_init=xt.LAYER_SCALE)
                    for k, label in enumerate(("attention", "feedforward"))))
    assert run_law(sandwich, "decomposition", "float64", "eval", max_examples=2).verdict == "pass"
    record = run_law(sandwich, "affine_in_gamma", "float64", "eval", max_examples=2)
    assert record.verdict == "fail", f"{record.line()}, expected fail"
