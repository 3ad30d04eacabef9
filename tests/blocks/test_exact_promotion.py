"""Implicit dtype promotion in the trace: an elementwise op whose operands' dtypes differ
computes in the wider one, so the trace casts the narrower operand first (exact: it widens)
and the op rounds once there; a floating constant of another dtype than the program's is
lifted in the program's dtype and cast, when every value of it is exact there.

torch's bfloat16 layers do both: ``torch.rms_norm`` multiplies its float32 row by the
bfloat16 weight (torchtune's RMSNorm), and the math attention of
``nn.TransformerEncoderLayer`` computes the softmax in float32 and guards its fully-masked
rows with float32 zeros (``where(any(...), full_like(0), softmax)``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.catalog import catalog
from resverify.blocks.exact import judge_module, judge_recipe
from resverify.blocks.lower import NotInIR, lower

WIDTH = 8


def _draw(dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(4096, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("narrow", [torch.bfloat16, torch.float16])
def test_torch_widens_the_narrower_operand_exactly_and_rounds_once_in_the_wider_dtype(
        narrow: torch.dtype) -> None:
    """``a + b`` and ``a * b`` of a low-precision ``a`` and a float32 ``b`` are, bitwise,
    ``a`` cast to float32 then the float32 op; and the float32 product is the exact product
    (float64 holds it) rounded once."""
    a, b = _draw(narrow, 0), _draw(torch.float32, 1)
    for op in (torch.add, torch.mul):
        promoted, cast_first = op(a, b), op(a.to(torch.float32), b)
        assert promoted.dtype == torch.float32
        assert torch.equal(promoted, cast_first), \
            f"{op.__name__}({narrow}, float32) differs from the cast-first float32 op"
    once = (a.to(torch.float64) * b.to(torch.float64)).to(torch.float32)
    assert torch.equal(a * b, once), "the promoted product is not rounded once"


class WeightInFloat32Row(nn.Module):
    """``x + (x.float() * w).to(x.dtype)``: a float32 row times the layer-dtype weight, as
    ``torch.rms_norm`` computes it in a bfloat16 layer."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(WIDTH, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (x.to(torch.float32) * self.w).to(x.dtype)


def test_a_mixed_dtype_product_traces_to_a_cast_of_the_narrower_operand_then_the_op() -> None:
    block = WeightInFloat32Row().to(torch.bfloat16)
    lowered = lower(block, (torch.zeros(2, WIDTH, dtype=torch.bfloat16),))
    assert lowered.program.describe() == (
        "residual_add(x, cast(mul(cast(x, source=bfloat16, target=float32), "
        "cast(w, source=bfloat16, target=float32)), source=float32, target=bfloat16))")


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_a_mixed_dtype_product_is_within_budget_on_every_element(dtype: str) -> None:
    judgement = judge_module(WeightInFloat32Row(), (torch.zeros(2, WIDTH),), dtype, seed=2)
    assert judgement.passed, str(judgement)
    assert judgement.elements == judgement.total == 2 * 2 * WIDTH + WIDTH, str(judgement)


class Float32Constant(nn.Module):
    """``x + (x.float() * c).to(x.dtype)`` with ``c`` a float32 constant made in forward."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.full((WIDTH,), self.value, dtype=torch.float32)
        return x + (x.to(torch.float32) * c).to(x.dtype)


def test_a_float32_constant_exact_in_the_program_dtype_is_lifted_there_and_cast() -> None:
    lowered = lower(Float32Constant(0.5).to(torch.bfloat16),
                    (torch.zeros(2, WIDTH, dtype=torch.bfloat16),))
    assert lowered.program.describe() == (
        "residual_add(x, cast(mul(cast(x, source=bfloat16, target=float32), "
        "cast(full, source=bfloat16, target=float32)), source=float32, target=bfloat16))")
    assert lowered.constants["full"].dtype == torch.bfloat16
    assert bool((lowered.constants["full"] == 0.5).all())


def test_a_float32_constant_not_exact_in_the_program_dtype_is_refused_by_name() -> None:
    with pytest.raises(NotInIR, match=r"the constant full is torch\.float32 and not exact "
                       r"in the program's torch\.bfloat16"):
        lower(Float32Constant(0.1), (torch.zeros(2, WIDTH, dtype=torch.bfloat16),))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["torch.TransformerEncoderLayer(pre)",
                                  "torch.TransformerDecoderLayer(post)"])
def test_low_precision_torch_transformer_layers_trace_and_none_is_outside_its_budget(
        name: str, dtype: str) -> None:
    """The float32 attention of a bfloat16 (float16) layer: its float32 zeros lifted and
    cast, the 0/1 mask cast with them. Partly judged: the elements with an infinite bound
    in the low dtype are counted apart; none judged is outside its budget."""
    judgement = judge_recipe(catalog()[name], dtype)
    assert judgement.verdict in ("pass", "partly judged"), f"{name}: {judgement}"
    assert judgement.elements > 0, f"{name}: {judgement}"
    casts = [n for n in judgement.program.nodes if n.op == "cast"
             and n.args[0] in judgement.program.input_names and n.args[0] != "x"]
    assert casts, f"{name}: no constant was lifted and cast"


def test_timm_vit_block_in_bfloat16_traces_and_none_is_outside_its_budget() -> None:
    """timm's ViT block: the same float32 masked-row guard as torch's layers (skips where
    timm cannot be imported: docs/blocks-install.md, ``.venv-vision``)."""
    pytest.importorskip("timm", exc_type=ImportError)
    judgement = judge_recipe(catalog()["timm.vit.Block"], "bfloat16")
    assert judgement.verdict in ("pass", "partly judged"), str(judgement)
    assert judgement.elements > 0 and not judgement.misses, str(judgement)
