"""Each row of the ATen table, on the smallest module that makes torch emit its overload: the
overload is really in the traced graph, it maps to the IR ops the row names, and the module's
own eager output and input gradient are within the exact oracle's budget, element by element,
in float64 and float32 (a row that moved one element, or dropped a rounding the budget does
not cover, fails here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import NotInIR, _export, lower


@dataclass(frozen=True)
class Case:
    aten: str
    """The overload the module makes torch emit (after ``run_decompositions()``)."""
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``fn(x, w)``: x of shape (3, 4), w a (4, 4) parameter."""
    ops: frozenset[str]
    """The IR ops the row emits."""


def case(aten: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
         *ops: str) -> Case:
    return Case(f"aten.{aten}", fn, frozenset(ops))


CASES = {
    "view": case("view.default", lambda x, w: x.view(2, 6), "reshape"),
    "unsqueeze": case("unsqueeze.default", lambda x, w: x.unsqueeze(1) * x[None], "reshape"),
    "squeeze": case("squeeze.dims", lambda x, w: (x @ w[:, :1]).squeeze(1), "reshape"),
    "permute": case("permute.default", lambda x, w: x.reshape(3, 2, 2).permute(2, 0, 1),
                    "permute"),
    "transpose": case("permute.default", lambda x, w: x.transpose(0, 1), "permute"),
    "t": case("permute.default", lambda x, w: x.t() @ x, "permute", "linear"),
    "expand": case("expand.default", lambda x, w: x[:, :1].expand(3, 4), "expand"),
    "add zero": case("add.Tensor", lambda x, w: (w + 0.0) @ x.t(), "permute", "linear"),
    "broadcast add": case("add.Tensor", lambda x, w: x + x[0], "add"),
    "slice": case("slice.Tensor", lambda x, w: x[:, 1:4:2], "slice"),
    "select": case("select.int", lambda x, w: x[1] * x, "slice", "reshape"),
    "split": case("split_with_sizes.default",
                  lambda x, w: torch.cat(torch.split(x, [1, 3], 1)[::-1], 1), "slice", "cat"),
    "split even": case("split_with_sizes.default",
                       lambda x, w: torch.cat(torch.split(x, 2, 1)[::-1], 1), "slice", "cat"),
    "cat of three": case("cat.default", lambda x, w: torch.cat([x, x * 2, x], 0), "cat"),
    "clone": case("clone.default", lambda x, w: x.t().clone() * 2, "permute", "scale"),
    "to the same dtype": case("mul.Tensor", lambda x, w: x.to(x.dtype, copy=True) * x, "mul"),
    "addmm": case("addmm.default", lambda x, w: torch.addmm(w[0], x, w), "linear", "add"),
    "nn.Linear": case("addmm.default", lambda x, w: nn.functional.linear(x, w, w[1]),
                      "permute", "linear", "add"),
    "square": case("pow.Tensor_Scalar", lambda x, w: x ** 2, "mul"),
    "neg": case("neg.default", lambda x, w: -(x @ w), "neg"),
    "sub": case("sub.Tensor", lambda x, w: x - torch.tanh(x @ w), "neg", "residual_add"),
    "exp": case("exp.default", lambda x, w: torch.exp(x @ w), "exp"),
    "silu": case("sigmoid.default", lambda x, w: nn.functional.silu(x @ w), "silu"),
    "gelu erf": case("gelu.default", lambda x, w: nn.functional.gelu(x @ w), "gelu_erf"),
    "gelu tanh": case("gelu.default", lambda x, w: nn.functional.gelu(x @ w, approximate="tanh"),
                      "gelu_tanh"),
    "mean of all": case("mean.default", lambda x, w: x.mean() * x, "sum", "scale"),
}


class Applied(nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.w)


X = torch.zeros(3, 4, dtype=torch.float64)


def aten_ops(module: nn.Module, x: torch.Tensor) -> set[str]:
    exported = _export(module, (x,))
    return {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_row_maps_its_overload_to_the_ir_ops_it_names(name: str) -> None:
    case = CASES[name]
    module = Applied(case.fn).double()
    assert case.aten in aten_ops(module, X), f"{name}: torch no longer emits {case.aten}"
    ops = {node.op for node in lower(module, (X,)).program.nodes}
    assert case.ops <= ops, f"{name}: IR ops {sorted(ops)}, expected {sorted(case.ops)} among them"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_row_is_within_budget_of_the_modules_own_answers(name: str, dtype: str) -> None:
    judgement = judge_module(Applied(CASES[name].fn), (X,), dtype, seed=2)
    assert judgement.passed, f"{name}: {judgement}"


def test_a_reduction_in_another_dtype_casts_its_input_first() -> None:
    """``sum(x, dtype=float32)`` of a float64 ``x`` sums in float32: torch casts the input
    to ``dtype`` before the op; ``mean(dtype=...)`` the same, then ``scale``."""
    module = Applied(lambda x, w: x.sum(-1, dtype=torch.float32).double())
    described = lower(module.double(), (X,)).program.describe()
    assert described == ("cast(sum_axes(cast(x, source=float64, target=float32), axes=(1,), "
                         "keepdim=False), source=float32, target=float64)"), described
    module = Applied(lambda x, w: x.mean(-1, dtype=torch.float32).double())
    assert "scale(sum_axes(cast(x, source=float64, target=float32)" in \
        lower(module.double(), (X,)).program.describe()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_reduction_in_float32_is_within_budget_on_every_element(dtype: str) -> None:
    module = Applied(lambda x, w: x + x.mean(-1, keepdim=True, dtype=torch.float32).to(x.dtype))
    judgement = judge_module(module, (X,), dtype, seed=2)
    assert judgement.passed, str(judgement)
    assert judgement.elements == judgement.total, str(judgement)


def test_adding_zero_is_the_operand_itself_and_another_number_is_a_lifted_constant() -> None:
    assert lower(Applied(lambda x, w: x + 0.0).double(), (X,)).program.describe() == "x"
    lowered = lower(Applied(lambda x, w: x + 1.0).double(), (X,))
    assert lowered.program.describe() == "add(x, add.number)", lowered.program.describe()
    assert {n: float(v) for n, v in lowered.constants.items()} == {"add.number": 1.0}


def test_a_number_not_exact_beside_a_half_precision_operand_is_refused_by_name() -> None:
    """bfloat16's op math is float32 (the number read in float32, the sum rounded to
    bfloat16 once), which no bfloat16 IR ``add`` of a bfloat16 constant computes."""
    with pytest.raises(NotInIR, match=r"the number 0.1 is not exact in torch.bfloat16"):
        lower(Applied(lambda x, w: x + 0.1).bfloat16(), (X.bfloat16(),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_number_beside_a_float32_or_float64_operand_is_lifted_as_torch_rounds_it(
        dtype: torch.dtype) -> None:
    """``x + 0.1`` with x in float32 or float64: the constant is 0.1 rounded to nearest in
    x's dtype, and torch's float32 sum is that constant added to x, rounded once: bitwise, on
    4,096 small drawn x (the float32 sum of two float32 numbers is their float64 sum rounded
    once; with 0.1 unrounded, 814 of them differ)."""
    lowered = lower(Applied(lambda x, w: x + 0.1).to(dtype), (X.to(dtype),))
    held = lowered.constants["add.number"]
    assert held.dtype == dtype and held.item() == torch.tensor(0.1, dtype=dtype).item(), \
        (held, dtype)
    if dtype == torch.float32:  # float64's sum is the float64 sum of x and held itself
        x = torch.randn(4096, generator=torch.Generator().manual_seed(3)).mul(2.0**-20)
        ours = (x.double() + held.double()).float()
        assert torch.equal(x + 0.1, ours), \
            f"{int((x + 0.1 != ours).sum())} of 4096 differ from x + {held.item()!r}"


@pytest.mark.parametrize(("fn", "alpha"), [
    (lambda x, w: x * 0.1, Fraction(float(np.float32(0.1)))),
    (lambda x, w: x / 0.1, 1 / Fraction(float(np.float32(0.1)))),
    (lambda x, w: x / 3.0, Fraction(1, 3))])
def test_a_float32_scale_by_a_number_is_by_the_number_torch_reads(
        fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], alpha: Fraction) -> None:
    """``x * c`` and ``x / c`` in float32: ``scale`` by float32's ``c`` (its exact
    reciprocal), and torch's result is that exact product rounded once to float32, bitwise
    on 4,096 drawn x (float64's ``0.1`` instead rounds 610 of 3,000 the other way,
    measured)."""
    (node,) = lower(Applied(fn).float(), (X.float(),)).program.nodes
    assert (node.op, node.attribute) == ("scale", alpha), (node.op, node.attribute, alpha)
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3))
    exact = [Fraction(v) * alpha for v in x.tolist()]
    ours = torch.tensor([_round32(e) for e in exact])
    assert torch.equal(fn(x, x), ours), f"{int((fn(x, x) != ours).sum())} of 4096 differ"


def _round32(value: Fraction) -> float:
    """``value`` rounded to nearest float32 (ties to even), exactly."""
    import mpmath

    with mpmath.workprec(24):
        return float(mpmath.fdiv(value.numerator, value.denominator))


def test_a_float32_number_in_a_float64_program_is_cast_from_its_exact_lift() -> None:
    """T5's ``variance + eps`` in a float64 layer: the variance in float32 (RMSNorm's upcast
    is a downcast there), ``eps`` read in float32, lifted exactly in float64 and cast."""
    lowered = lower(Applied(lambda x, w: (x.float() * x.float() + 1e-6).double()).double(),
                    (X,))
    described = lowered.program.describe()
    assert "cast(add.number" in described, described
    held = lowered.constants["add.number"]
    assert held.dtype == torch.float64 and held.item() == torch.tensor(1e-6).item(), held


@pytest.mark.parametrize(("use", "shown"), [
    (lambda x, w: x + float("inf"), "inf"), (lambda x, w: x * float("nan"), "nan"),
    (lambda x, w: x / float("inf"), "inf")])
def test_an_infinite_or_nan_number_is_refused_by_name(use: Callable[..., torch.Tensor],
                                                       shown: str) -> None:
    """A Python number no real number stands for is a listed refusal in every row that
    reads one (``x * nan`` and ``x / inf`` raised Fraction's ValueError/OverflowError)."""
    with pytest.raises(NotInIR, match=rf"the number {shown} is not a real number"):
        lower(Applied(use).double(), (X,))


def test_a_cube_is_two_products_and_another_power_is_refused_with_its_exponent() -> None:
    """ATen's ``pow`` kernel computes ``x ** 3`` as ``x * x * x``: two roundings."""
    cube = lower(Applied(lambda x, w: x ** 3).double(), (X,)).program
    assert cube.describe() == "mul(mul(x, x), x)", cube.describe()
    with pytest.raises(NotInIR, match=r"exponent 4 \(only 2 and 3 are mapped"):
        lower(Applied(lambda x, w: x ** 4).double(), (X,))


def test_select_at_a_negative_index_takes_the_element_python_would() -> None:
    program = lower(Applied(lambda x, w: x[-1]).double(), (X,)).program
    (taken,) = [n for n in program.nodes if n.op == "slice"]
    assert dict(taken.params) == {"axis": 0, "start": 2, "stop": 3, "step": 1}


def test_an_n_way_cat_is_a_chain_of_two_way_cats_along_its_axis() -> None:
    program = lower(Applied(lambda x, w: torch.cat([x, x, x], -1)).double(), (X,)).program
    assert program.describe() == "cat(cat(x, x, axis=1), x, axis=1)"
