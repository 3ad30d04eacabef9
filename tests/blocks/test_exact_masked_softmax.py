"""An additive causal mask read as ``masked_softmax``: real decoder layers judged on every
element, a mask that is not far enough below 0 judged as the ``add`` it is, scores too large
beside the mask refused by name, bugs in a masked layer's backward caught, and torch's own
attention's ``-inf`` mask (read again by its masked-row guard) read the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from resverify.blocks.catalog import recipe
from resverify.blocks.constants import fold
from resverify.blocks.exact import judge_module, judge_recipe
from resverify.blocks.lower import NotInIR, _export, lower
from tests.blocks.constant_modules import (
    CausalAttention,
    SdpaAttention,
    leaky_mask_add,
    scaled_back_softmax,
)
from tests.blocks.planted_kernels import Kernels

X = (torch.zeros(2, 4, 8),)
DTYPES = ["float64", "float32"]
PLANTED = {"float64": 2.0**-30, "float32": 2.0**-6}
"""The planted bugs' sizes: in float32 the gradients' whole-program budgets at this size
admit a softmax backward ``1 + 2**-10`` times the right one (it uses at most 0.26 of them),
``1 + 2**-8`` breaks one element and ``1 + 2**-6`` ninety-four."""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["hf.LlamaDecoderLayer", "hf.GPT2Block"])
def test_a_decoder_layer_with_a_causal_mask_is_judged_on_every_element(name: str, dtype: str
                                                                        ) -> None:
    judgement = judge_recipe(recipe(name), dtype)
    assert judgement.verdict == "pass", f"{name}: {judgement}"
    assert judgement.elements == judgement.total, f"{name}: {judgement}"
    assert "masked_softmax at _softmax" in judgement.matched, f"{name}: {judgement.matched}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_mask_of_minus_one_stays_an_add_and_is_judged_as_one(dtype: str) -> None:
    torch.manual_seed(0)
    module = CausalAttention(additive=True, mask_value=-1.0)
    kind = getattr(torch, dtype)
    ops = {n.op for n in lower(module.to(kind), [X[0].to(kind)]).program.nodes}
    assert "masked_softmax" not in ops and {"add", "softmax"} <= ops, sorted(ops)
    judgement = judge_module(module, X, dtype)
    assert judgement.verdict == "pass" and not judgement.matched, str(judgement)
    assert judgement.elements == judgement.total, str(judgement)


def test_scores_too_large_beside_the_mask_are_refused_by_the_masks_add() -> None:
    """A mask of -5000 stands for 0 in the softmax while every score is at most
    (5000 - 1100) / 8 in size; scores scaled by 1000 are not."""
    torch.manual_seed(0)
    small = judge_module(CausalAttention(additive=True, mask_value=-5000.0), X, "float64")
    assert small.verdict == "pass" and small.matched, str(small)
    torch.manual_seed(0)
    large = CausalAttention(additive=True, mask_value=-5000.0, scale=1000.0)
    with pytest.raises(NotInIR, match=r"aten.add.Tensor at node add is not in the IR .*at "
                                      r"most 487.5 in size; mul reaches 1\d\d\d\)"):
        judge_module(large, X, "float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_mask_whose_backward_leaks_into_the_masked_scores_is_caught(dtype: str) -> None:
    torch.manual_seed(0)
    leaky = leaky_mask_add(PLANTED[dtype])
    wrong = judge_module(CausalAttention(additive=True, add=leaky), X, dtype)
    assert wrong.matched and wrong.verdict == "fail", str(wrong)
    assert {m.where for m in wrong.misses} & {"grad[x]", "grad[q.weight]", "grad[k.weight]"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_softmax_backward_off_by_a_small_factor_in_a_masked_layer_is_caught(dtype: str
                                                                             ) -> None:
    torch.manual_seed(0)
    module = CausalAttention(additive=True, softmax=scaled_back_softmax(1 + PLANTED[dtype]))
    wrong = judge_module(module, X, dtype)
    assert wrong.matched and wrong.verdict == "fail", str(wrong)
    assert {m.where for m in wrong.misses} & {"grad[x]", "grad[q.weight]", "grad[k.weight]"}
    torch.manual_seed(0)
    assert judge_module(CausalAttention(additive=True), X, dtype).passed


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_causal_sdpa_whose_mask_is_minus_inf_is_judged_on_every_element(dtype: str) -> None:
    """torch's attention decomposition adds a ``-inf`` causal mask to the scores and reads the
    sum again in its masked-row guard; the sum is still read as ``masked_softmax``."""
    torch.manual_seed(0)
    judgement = judge_module(SdpaAttention(), X, dtype)
    assert judgement.verdict == "pass", str(judgement)
    assert judgement.elements == judgement.total, str(judgement)
    assert "masked_softmax at _softmax" in judgement.matched, judgement.matched


def test_the_masked_row_guard_of_a_minus_inf_mask_is_true_exactly_on_the_masked_scores() -> None:
    """``eq(scores + mask, -inf)`` folds to the mask's own ``-inf`` entries (a real score plus
    ``-inf`` is ``-inf``), not to "no score is -inf"."""
    exported = _export(SdpaAttention().double(), [X[0].double()])
    nodes = list(exported.graph.nodes)
    folded = fold(nodes, {})
    (guard,) = [n for n in nodes if str(n.target) == "aten.eq.Scalar"]
    hidden = torch.ones(4, 4, dtype=torch.bool).triu(1).expand(2, 2, 4, 4)
    value = folded[guard.name]
    assert value is not None and torch.equal(value, hidden), (value, hidden)


def test_a_minus_inf_mask_that_hides_a_whole_row_is_refused_by_its_add() -> None:
    """A row with no score kept is 0 by the masked-row guard, not a softmax: the ``-inf``
    mask is then a constant of the program, which holds real numbers only."""
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    keep[2] = False
    with pytest.raises(NotInIR, match=r"aten.add.Tensor at node \w+ is not in the IR .*holds "
                                      r"an infinity"):
        judge_module(SdpaAttention(keep=keep), X, "float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_fused_attention_kernel_that_drops_the_causal_mask_is_caught(dtype: str) -> None:
    """The eager layer's fused CPU kernel run without its causal mask: the traced program
    (the decomposition, masked) is right, what ran is not."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def unmasked(q: Any, k: Any, v: Any, dropout_p: float = 0.0, is_causal: bool = False,
                 **kwargs: Any) -> Any:
        assert is_causal, "the module asks for the causal mask"
        return flash(q, k, v, dropout_p, False, **kwargs)
    torch.manual_seed(0)
    module = SdpaAttention()
    with Kernels({flash: unmasked}, frozenset({getattr(torch, dtype)})) as planted:
        wrong = judge_module(module, X, dtype)
    assert planted.calls and wrong.verdict == "fail", str(wrong)
    assert any(m.where == "output" for m in wrong.misses), str(wrong)
