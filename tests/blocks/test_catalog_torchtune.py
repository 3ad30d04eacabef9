"""The torchtune recipe: it names what its layer has; every applicable law passes in float64
and float32 (every dtype: tests/blocks/test_catalog_laws.py, marked slow); the layer as built
is the identity (its tanh gates start at 0), by hand; and the controls: the gates declared
without ``scale_fn="tanh"`` fail the gate law, and a gate zeroed alone leaves the other
sublayer.

In float64 torchtune's RMSNorm normalizes ``x.float()`` with a float64 weight, and torch
warns that the mixed dtypes miss the fused kernel (a UserWarning, an error under this
project's pytest settings); the tests here ignore that one warning.

These tests skip, naming torchtune (or torchao) and how to install it, where it is missing.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from resverify.blocks.check import run_law
from resverify.blocks.torch_adapter import build
from tests.blocks.catalog_checks import DRAW, catalog_tests, max_diff, zeroed

# the skip reason is the ImportError the catalog module raises, naming the library
tt = pytest.importorskip("resverify.blocks.catalog.torchtune", exc_type=ImportError)

RMS_NORM_WARNING = "ignore:Mismatch dtype between input and weight:UserWarning"
pytestmark = pytest.mark.filterwarnings(RMS_NORM_WARNING)
GATED = tt.GATED
test_recipe_names_only_what_its_block_has, test_every_applicable_law_passes = (
    catalog_tests(tt.RECIPES))




@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_layer_as_built_is_the_identity(dtype: str) -> None:
    module = build(GATED, dtype, seed=0)
    x = torch.randn(2, 5, tt.DIM, generator=torch.Generator().manual_seed(3)).to(
        getattr(torch, dtype))
    with torch.no_grad():
        y = module(x)
    assert torch.equal(y, x), f"max |y - x| {max_diff(y, x)!r}, expected 0 [gates 0, {dtype}]"


def test_zeroing_one_gate_leaves_the_other_sublayer() -> None:
    """The control: the perturbed layer with only the attention's gate zeroed is not x."""
    _, x, y = zeroed(GATED, ["sa_scale.scale"], draw=DRAW)
    assert not torch.equal(y, x)
    _, x, y = zeroed(GATED, draw=DRAW)
    assert torch.equal(y, x), f"max |y - x| {max_diff(y, x)!r}, expected 0 [both gates 0]"


def test_gates_declared_without_tanh_fail_the_gate_law() -> None:
    """The control for ``scale_fn``: declared as plain gates ``x + g·F``, the layer's
    ``tanh(g)`` is not linear in g, and the gate law says so."""
    plain = dataclasses.replace(
        GATED, name=f"{GATED.name}(declared plain)",
        sites=tuple(dataclasses.replace(s, scale_fn=None) for s in GATED.sites))
    record = run_law(plain, "affine_in_gamma", "float64", "eval", max_examples=3)
    assert record.verdict == "fail", f"{record.line()}, expected fail"
