"""The catalog blocks whose attention is torch's ``scaled_dot_product_attention`` with a
causal mask (litgpt's two blocks, torchtune's self-attention layer) against the exact oracle:
the decomposition fills the mask with ``-inf`` and adds it to the scores, read as
``masked_softmax``, so every element of the output and every gradient is judged, in every
dtype they claim (pointwise: the inputs drawn). Before, the ``-inf`` constant stopped the
trace (``aten.add.Tensor ... the constant where holds an infinity``).

These tests skip where litgpt or torchtune cannot be imported (``make blocks`` adds them).
"""

from __future__ import annotations

import pytest

from resverify.blocks.catalog import catalog
from resverify.blocks.exact import judge_recipe

pytestmark = pytest.mark.filterwarnings(  # torchtune's RMSNorm: a float32 row, float64 weight
    "ignore:Mismatch dtype between input and weight:UserWarning")

BLOCKS = {"litgpt.Block(llama)": "litgpt", "litgpt.Block(parallel_residual)": "litgpt",
          "torchtune.TransformerSelfAttentionLayer(TanhGate)": "torchtune"}


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_sdpa_catalog_blocks_pass_on_every_element_with_their_mask_read_as_masked_softmax(
        name: str, dtype: str) -> None:
    pytest.importorskip(BLOCKS[name], exc_type=ImportError)
    judgement = judge_recipe(catalog()[name], dtype)
    assert judgement.verdict == "pass", f"{name}: {judgement}"
    assert judgement.elements == judgement.total, f"{name}: {judgement}"
    assert "masked_softmax at _softmax" in judgement.matched, f"{name}: {judgement.matched}"
