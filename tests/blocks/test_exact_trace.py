"""Tracing a torch module into the IR: what maps, exactly, and what is refused, listed.

Each test names the law of :mod:`resverify.blocks.lower` it holds: the program's inputs are
the module's inputs and its parameters by ``state_dict`` name, constants stay exact, and an
ATen op with no row is one typed refusal listing every such node.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from resverify.blocks.aten import ROWS, Unmapped
from resverify.blocks.lower import NotInIR, _Walk, lower
from resverify.spec.errors import ResverifyError
from tests.blocks.exact_modules import Activation, ResidualMLP

X = torch.zeros(3, 4, dtype=torch.float64)


class Lambda(nn.Module):
    def __init__(self, fn: Activation) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def test_residual_mlp_traces_to_the_program_it_computes() -> None:
    lowered = lower(ResidualMLP(4).double(), (X,))
    assert lowered.program.describe() == \
        "residual_add(x, scale(linear(tanh(linear(x, w1)), w2), 1/2))"
    assert lowered.user_inputs == ("x",)
    assert lowered.state == ("w1", "w2")
    assert [i.name for i in lowered.program.inputs] == ["w1", "w2", "x"]


def test_a_scalar_constant_is_kept_exact_as_the_float_it_is() -> None:
    program = lower(Lambda(lambda x: x * 0.1), (X,)).program
    (node,) = program.nodes
    assert node.op == "scale" and node.alpha == Fraction(0.1) != Fraction(1, 10)


def test_division_by_a_number_is_scale_by_its_exact_reciprocal() -> None:
    (node,) = lower(Lambda(lambda x: x / 3.0), (X,)).program.nodes
    assert node.op == "scale" and node.alpha == Fraction(1, 3)


def test_subtraction_is_the_sum_with_the_negated_operand() -> None:
    program = lower(Lambda(lambda x: x - torch.tanh(x)), (X,)).program
    assert program.describe() == "residual_add(x, neg(tanh(x)))"


def test_layer_norm_maps_to_layer_norm_then_its_weight_and_bias() -> None:
    norm = nn.LayerNorm(4, eps=1e-5).double()
    lowered = lower(norm, (X,))
    assert lowered.program.describe() == (
        f"add(mul(layer_norm(input, eps={Fraction(1e-5)}), expand_in_dtype(weight, "
        "shape=(3, 4))), expand_in_dtype(bias, shape=(3, 4)))")
    assert lowered.state == ("weight", "bias")


def test_a_broadcast_subtraction_is_add_with_the_negated_operand() -> None:
    program = lower(Lambda(lambda x: x - x.sum()), (X,)).program
    assert program.describe() == "add(x, neg(sum(x)))"


def test_the_rms_norm_composite_maps_to_one_rms_norm_and_is_reported() -> None:
    lowered = lower(nn.RMSNorm(4, eps=1e-6).double(), (X,))
    assert lowered.program.describe() == f"mul(rms_norm(x, eps={Fraction(1e-6)}), weight)"
    assert lowered.matched == ("rms_norm at mul",)


def test_a_composite_whose_parts_are_read_elsewhere_is_not_matched() -> None:
    def shared(x: torch.Tensor) -> torch.Tensor:
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x * r + r

    lowered = lower(Lambda(shared), (X,))
    assert lowered.matched == (), lowered.matched
    assert "rsqrt" in {n.op for n in lowered.program.nodes}, lowered.program.describe()


def test_an_op_without_a_row_is_a_typed_refusal_naming_op_and_node() -> None:
    with pytest.raises(NotInIR) as caught:
        lower(Lambda(lambda x: torch.cumsum(x, 0) + torch.exp(x).sum()), (X,))
    assert isinstance(caught.value, ResverifyError)
    assert "aten op aten.cumsum.default at node cumsum is not in the IR" in str(caught.value)
    assert caught.value.ops == ["aten.cumsum.default"], caught.value.ops


def test_every_refused_node_is_listed_in_one_error() -> None:
    def two(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0) + torch.abs(x) + torch.cumsum(x, 1)

    with pytest.raises(NotInIR) as caught:
        lower(Lambda(two), (X,))
    nodes = [node for _, node, _ in caught.value.refused]
    assert nodes == ["cumsum", "abs_1", "cumsum_1"], caught.value.refused
    assert caught.value.ops == ["aten.abs.default", "aten.cumsum.default"]


@pytest.mark.parametrize(("fn", "program"), [
    (lambda x: torch.bmm(x[None], x.t()[None]),
     "matmul(reshape(x, shape=(1, 3, 4)), reshape(permute(x, perm=(1, 0)), shape=(1, 4, 3)))"),
    (lambda x: torch.softmax(x, -1), "softmax(x, axis=1)"),
    (lambda x: x.sum(-1), "sum_axes(x, axes=(1,), keepdim=False)"),
    (lambda x: x.mean(0, keepdim=True), "scale(sum_axes(x, axes=(0,), keepdim=True), 1/3)"),
])
def test_attention_rows_trace_to_their_ir_op(fn: Activation, program: str) -> None:
    """bmm is the batched matmul, _softmax the softmax over its axis, a sum or mean over
    some axes sum_axes (a mean then scaled by exactly 1/n)."""
    described = lower(Lambda(fn), (X,)).program.describe()
    assert described == program, f"traced {described}, expected {program}"


def test_a_row_whose_ir_op_is_missing_refuses_by_the_op_it_needs() -> None:
    walk = _Walk(torch.float64, {}, [])
    walk.begin("native_group_norm")
    with pytest.raises(Unmapped, match="needs the IR op 'group_norm'"):
        walk.emit("group_norm", ["x", "w"])
    assert walk.nodes == []


def test_attributes_an_ir_op_does_not_take_are_a_refusal_not_a_crash() -> None:
    walk = _Walk(torch.float64, {}, [])
    walk.begin("permute")
    with pytest.raises(Unmapped, match="the IR's scale refuses attributes"):
        walk.emit("scale", ["x"], perm=(1, 0))
    assert walk.nodes == []


def test_a_computation_in_another_dtype_is_traced_between_two_casts() -> None:
    lowered = lower(Lambda(lambda x: torch.tanh(x.float()).double()), (X,))
    assert lowered.program.describe() == ("cast(tanh(cast(x, source=float64, target=float32)), "
                                          "source=float32, target=float64)")


def test_a_cast_to_a_non_floating_dtype_is_a_listed_refusal() -> None:
    with pytest.raises(NotInIR, match="only floating dtypes are cast"):
        lower(Lambda(lambda x: x.to(torch.int64).double()), (X,))


def test_a_promotion_casts_the_narrower_operand_to_the_result_dtype_first() -> None:
    """``x * x.float()`` of a float64 ``x`` is float64: torch widens the float32 operand."""
    described = lower(Lambda(lambda x: x * x.float()), (X,)).program.describe()
    assert described == ("mul(x, cast(cast(x, source=float64, target=float32), "
                         "source=float32, target=float64))"), described


def test_transformer_encoder_layer_traces_whole_with_its_masked_row_guard_a_constant() -> None:
    """The attention's fully-masked-row guard ``where(all(eq(scores, -inf)), 0, softmax)``:
    no real score is -inf, so in the exact program the guard's mask is a constant (no row
    masked) and the zeros it would select are one too; both are lifted, and ``where`` maps."""
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double().eval()
    lowered = lower(layer, (torch.zeros(2, 3, 8, dtype=torch.float64),))
    (where,) = [n for n in lowered.program.nodes if n.op == "where"]
    mask, zeros, _ = where.args
    assert set(lowered.constants) == {mask, zeros}, lowered.constants
    assert not lowered.constants[mask].any() and not lowered.constants[zeros].any()


def test_the_silu_composite_maps_to_one_silu_and_is_reported() -> None:
    lowered = lower(nn.SiLU(), (X,))
    assert lowered.program.describe() == "silu(input)"
    assert lowered.matched == ("silu at mul",)


def test_a_product_with_the_sigmoid_of_another_tensor_is_not_silu() -> None:
    program = lower(Lambda(lambda x: x * torch.sigmoid(x * 2)), (X,)).program
    assert program.describe() == "mul(x, sigmoid(scale(x, 2)))"


def test_an_embedding_at_constant_indices_traces_to_embedding_and_others_are_refused() -> None:
    """Indices computed from nothing but shapes are the node's attribute; indices read from
    the data, or a padding row (whose gradient torch zeroes), are listed refusals."""
    table = torch.zeros(3, 2, dtype=torch.float64)
    lowered = lower(Lambda(lambda w: F.embedding(torch.arange(4).reshape(2, 2) % 3, w)),
                    (table,))
    assert lowered.program.describe() == "embedding(x, index_shape=(2, 2), indices=(0, 1, 2, 0))"
    with pytest.raises(NotInIR, match="depends on the data"):
        lower(Lambda(lambda w: F.embedding((w[:, 0] > 0).long(), w)), (table,))
    with pytest.raises(NotInIR, match="padding_idx"):
        lower(Lambda(lambda w: F.embedding(torch.arange(2), w, padding_idx=0)), (table,))


def test_a_half_to_float_softmax_casts_its_argument_to_float32_first() -> None:
    """``_softmax(x, -1, half_to_float=True)`` of a bfloat16 ``x``: the softmax of ``x``
    widened to float32, a float32 result (the CPU export writes a ``_to_copy`` instead, so
    the row is checked on a graph built by hand)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.zeros(2, 3, dtype=torch.bfloat16)
    node = graph.call_function(torch.ops.aten._softmax.default, (x, -1, True))
    node.meta["val"] = torch.zeros(2, 3)
    walk = _Walk(torch.bfloat16, {"x": "x"}, [])
    walk.begin(node.name)
    out = ROWS["aten._softmax.default"](walk, node)
    assert [(n.op, n.args) for n in walk.nodes] == [("cast", ("x",)), ("softmax", (node.name,))]
    assert walk.dtype_of(str(out)) == "float32"
