"""Mixed precision in the exact judgement: Hugging Face's RMSNorm upcasts to float32 inside
a layer of any dtype, and its casts are nodes of the traced program with their rounding.

The norm's composite is still matched across the casts: ``x.to(float32)`` is a ``cast``,
``h * rsqrt(mean(h²) + eps)`` one ``rms_norm`` on it (computed in float32), and
``h.to(x.dtype)`` a ``cast`` back before the weight's ``mul``. A residual gated MLP around
it passes in float64, float32 and bfloat16 (pointwise: these inputs); in float64 the
float32 inside is real rounding, and a judge that ignored the casts fails the correct layer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import lower
from resverify.spec.enclosure import verify
from resverify.spec.ir import Node, Program
from resverify.spec.request import Request
from tests.blocks.exact_modules import GatedMLP, HFRMSNorm, UpcastOnlyWhenTraced

WIDTH = 16
X = (torch.zeros(2, 3, WIDTH),)


def block(norm: torch.nn.Module | None = None) -> GatedMLP:
    torch.manual_seed(0)
    return GatedMLP(WIDTH, norm if norm is not None else HFRMSNorm(WIDTH))


def test_the_upcast_norm_traces_to_one_float32_rms_norm_between_two_casts() -> None:
    norm = HFRMSNorm(WIDTH).to(torch.bfloat16)
    lowered = lower(norm, (X[0].to(torch.bfloat16),))
    assert [m.split(" at ")[0] for m in lowered.matched] == ["rms_norm"]
    assert lowered.program.describe() == (
        "mul(weight, cast(rms_norm(cast(x, source=bfloat16, target=float32), "
        "eps=4722366482869645/4722366482869645213696), source=float32, target=bfloat16))")
    same = lower(HFRMSNorm(WIDTH), (X[0],)).program.describe()
    assert same == "mul(weight, rms_norm(x, eps=4722366482869645/4722366482869645213696))"


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_a_residual_mlp_around_the_upcast_norm_is_within_budget_on_every_element(
        dtype: str) -> None:
    model = block()
    judgement = judge_module(model, X, dtype, seed=3)
    assert judgement.passed, str(judgement)
    assert judgement.elements == judgement.total, str(judgement)
    assert "rms_norm" in {n.op for n in judgement.program.nodes}
    assert 0 < judgement.tightness.max <= 1, str(judgement)


def _without_casts(program: Program) -> Program:
    """The program as a judge that forgot the casts sees it: each cast is its argument."""
    renamed = {n.name: n.args[0] for n in program.nodes if n.op == "cast"}

    def name(value: str) -> str:
        while value in renamed:
            value = renamed[value]
        return value

    nodes = tuple(Node(n.name, n.op, tuple(name(a) for a in n.args), n.alpha, n.eps, n.params)
                  for n in program.nodes if n.op != "cast")
    return Program(program.inputs, nodes, name(program.output))


def test_in_float64_a_judge_that_ignored_the_float32_norm_fails_the_correct_layer() -> None:
    """The float64 layer's norm rounds to float32: judged against its traced program it
    passes; against the same program without its casts (float64 throughout) it fails."""
    model = block().double()
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, WIDTH, generator=generator, dtype=torch.float64)
    lowered = lower(model, (x,))
    leaves = {"x": x.clone().requires_grad_(True)}
    params = dict(model.named_parameters())
    leaves |= {name: params[name] for name in lowered.state}
    output = model(leaves["x"])
    cotangent = torch.randn(output.shape, generator=generator, dtype=torch.float64)
    output.backward(cotangent)
    inputs = {n: t.detach().numpy() for n, t in leaves.items()}
    grads = {n: np.zeros(t.shape) if t.grad is None else t.grad.numpy()
             for n, t in leaves.items()}
    answer = output.detach().numpy()
    for program, wanted in ((lowered.program, False), (_without_casts(lowered.program), True)):
        request = Request(program, inputs, "float64", cotangent.numpy())
        misses = verify(request, answer, grads).misses
        assert bool(misses) == wanted, f"{program.describe()[:120]}...: {misses[:3]}"


def test_a_norm_computed_in_bfloat16_is_not_caught_by_the_global_budget() -> None:
    """The planted precision bug (the upcast dropped in the eager run) changes the answers,
    but the budget of the whole layer allows it: only a per-node judgement could see it."""
    model = block(UpcastOnlyWhenTraced(WIDTH))
    judgement = judge_module(model, X, "bfloat16", seed=3)
    correct = judge_module(block(), X, "bfloat16", seed=3)
    assert judgement.passed and correct.passed, f"{judgement}\n{correct}"
    assert judgement.tightness.max < 0.5, str(judgement)
    x = torch.randn(2, 3, WIDTH, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    planted, right = (m.to(torch.bfloat16) for m in (block(UpcastOnlyWhenTraced(WIDTH)),
                                                      block()))
    assert not torch.equal(planted(x), right(x)), "the planted bug changed nothing"
