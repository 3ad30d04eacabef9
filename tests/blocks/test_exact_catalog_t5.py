"""Hugging Face's T5Block against the exact oracle: its relative position bias is an
``embedding`` of the bias table at the position buckets, which T5 computes from ``arange``
alone (``abs``, ``log``, ``div``, a cast to int64, ``min``, ``where``): every bucket node is
folded to a constant, so the indices are the node's attribute and the table's gradient
(a row read by several query-key pairs adds their parts) is judged. Its norms are
``rms_norm`` (in bfloat16, of the row widened to float32); in float64 they are not matched
(T5LayerNorm squares the row narrowed to float32 and scales the float64 row by the float32
``rsqrt(variance + eps)``), and traced op by op, ``eps`` read in float32 as torch reads it.
"""

from __future__ import annotations

import pytest
import torch

from resverify.blocks.catalog import catalog
from resverify.blocks.exact import Judgement, judge_recipe

T5 = "hf.T5Block"
BIAS = "block.layer.0.SelfAttention.relative_attention_bias.weight"


def _t5_buckets(length: int) -> list[int]:
    """T5's own bucket of each (query, key) pair of a sequence, flat."""
    from transformers.models.t5.modeling_t5 import T5Attention

    context = torch.arange(length)[:, None]
    memory = torch.arange(length)[None, :]
    buckets = T5Attention._relative_position_bucket(memory - context, bidirectional=True,
                                                    num_buckets=32, max_distance=128)
    return [int(b) for b in buckets.reshape(-1).tolist()]


@pytest.fixture(scope="module", params=["float64", "float32", "bfloat16"])
def judgement(request: pytest.FixtureRequest) -> Judgement:
    return judge_recipe(catalog()[T5], request.param)


def test_t5_position_bias_traces_to_one_embedding_at_t5s_own_buckets(
        judgement: Judgement) -> None:
    (embedding,) = [n for n in judgement.program.nodes if n.op == "embedding"]
    assert embedding.args == (BIAS,), embedding
    assert embedding.params["indices"] == tuple(_t5_buckets(4))
    assert embedding.params["index_shape"] == (4, 4)
    norms = [] if judgement.dtype == "float64" else ["rms_norm", "rms_norm"]
    assert [m.split(" at ")[0] for m in judgement.matched] == norms, judgement.matched


def test_t5_block_has_no_element_outside_its_budget(judgement: Judgement) -> None:
    """float64 and float32: every element judged; bfloat16: partly (the elements with an
    infinite bfloat16 bound are counted apart)."""
    expected = ("pass",) if judgement.dtype != "bfloat16" else ("pass", "partly judged")
    assert judgement.verdict in expected, str(judgement)
    assert judgement.elements > 0 and not judgement.misses, str(judgement)
    assert BIAS in judgement.program.input_names, judgement.program.input_names
