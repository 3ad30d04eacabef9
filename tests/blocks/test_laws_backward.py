"""The gradient law's parts: a parameter left without gradient, a precondition unmet, and
the bitwise agreement of the composed VJP on every torch layer in every dtype."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from resverify.blocks.catalog import catalog
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import Draw
from resverify.blocks.haiku_adapter import JaxRecipe
from resverify.blocks.laws_backward import gradient_skip
from resverify.blocks.torch_adapter import make_case
from resverify.blocks.trace import Unjudged
from resverify.properties.assertions import PropertyFailure
from tests.blocks.broken_blocks import BUGS
from tests.blocks.catalog_checks import library_marks

DRAW = Draw(batch=2, seq=3, seed=13, weight_exp=0, input_exp=0)


class _SpareParameter(nn.TransformerEncoderLayer):
    """A registered parameter the forward never reads (a head left behind, say)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__(16, 2, 32, 0.0, batch_first=True, norm_first=True, dtype=dtype)
        self.spare = nn.Parameter(torch.ones(4, dtype=dtype))


def test_gradient_skip_refuses_a_parameter_without_gradient() -> None:
    bad = replace(encoder(True), factory=_SpareParameter)
    with pytest.raises(PropertyFailure, match="parameter 'spare' gets no gradient"):
        gradient_skip(make_case(bad, "float32", "train", DRAW))


def test_gradient_skip_is_unjudged_when_the_forward_is_wrong() -> None:
    bug = BUGS["normalized_skip"]
    with pytest.raises(Unjudged, match="the forward decomposition fails"):
        gradient_skip(make_case(bug.recipe, "float32", "eval", DRAW))


@pytest.mark.parametrize("name", [pytest.param(n, marks=library_marks(n))
                                  for n, r in sorted(catalog().items())
                                  if not isinstance(r, JaxRecipe)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_gradient_skip_holds_bitwise_on_the_torch_layers(name: str, dtype: str) -> None:
    assert gradient_skip(make_case(catalog()[name], dtype, "train", DRAW)) == {}
