"""The stream laws' parts: the swamped fraction and headroom as figures, aliasing of extras."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from resverify.blocks.catalog.torch_nn import decoder, encoder
from resverify.blocks.check import Draw
from resverify.blocks.laws_stream import no_aliasing, stream_dtype
from resverify.blocks.torch_adapter import make_case
from resverify.properties.assertions import PropertyFailure

TINY_BRANCH = Draw(batch=3, seq=4, seed=5, weight_exp=-12, input_exp=0)


def test_stream_dtype_reports_swamping_by_dtype() -> None:
    """With the branch ends scaled by 2**-12, most of a bfloat16 stream's update rounds
    away; none of a float64 stream's does (the figure, not a verdict)."""
    swamped = {d: stream_dtype(make_case(encoder(True), d, "eval", TINY_BRANCH))
               for d in ("float64", "float32", "bfloat16")}
    key = "swamped[feed-forward]"
    assert swamped["float64"][key] == 0.0, swamped["float64"]
    assert swamped["bfloat16"][key] > 0.5 > swamped["float32"][key], {
        d: f[key] for d, f in swamped.items()}


def test_stream_dtype_headroom_is_log2_of_largest_over_peak() -> None:
    case = make_case(encoder(True), "float16", "eval", replace(TINY_BRANCH, input_exp=3))
    figures = stream_dtype(case)
    peak = float(case.inputs.x.abs().max())
    assert figures["headroom_log2"] <= math.log2(65504 / peak) + 1e-12, (figures, peak)
    assert figures["headroom_log2"] > math.log2(65504 / peak) - 1, (figures, peak)


class _WritesMemory(torch.nn.TransformerDecoderLayer):
    """Scales its memory in place before attending to it."""

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, *args: object,
                **kwargs: object) -> torch.Tensor:
        return super().forward(tgt, memory.mul_(2.0))


def test_no_aliasing_refuses_a_block_writing_into_an_extra_input() -> None:
    bad = replace(decoder(True), factory=lambda dtype: _WritesMemory(
        16, 2, 32, 0.0, batch_first=True, norm_first=True, dtype=dtype))
    case = make_case(bad, "float32", "eval", TINY_BRANCH)
    with pytest.raises(PropertyFailure, match=r"no_aliasing: input memory after the call\["):
        no_aliasing(case)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_no_aliasing_holds_on_the_torch_layers(mode: str) -> None:
    for recipe in (encoder(True), encoder(False), decoder(True), decoder(False)):
        assert no_aliasing(make_case(recipe, "float32", mode, TINY_BRANCH)) == {}
