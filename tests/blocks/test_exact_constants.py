"""Constants lifted to data: causal masks, additive masks and rotary tables are inputs of the
traced program holding the module's own values, ``where`` selects by a constant mask, and the
judgement passes the right modules and catches a ``where`` whose backward picks the wrong side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from resverify.blocks.exact import judge_module
from resverify.blocks.lower import NotInIR, lower
from resverify.spec.exact import evaluate
from tests.blocks.constant_modules import CausalAttention, Rotary, WrongSideWhere

X = (torch.zeros(2, 4, 8),)
DTYPES = ["float64", "float32"]


class Lambda(nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, self.w)  # type: ignore[operator]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_causal_where_mask_is_lifted_and_every_element_is_judged(dtype: str) -> None:
    torch.manual_seed(0)
    judgement = judge_module(CausalAttention(), X, dtype)
    assert judgement.verdict == "pass", str(judgement)
    # the output and x's gradient (64 each), q, k and v's weights (64) and biases (8)
    assert judgement.elements == judgement.total == 2 * 64 + 3 * (64 + 8), str(judgement)
    assert "where" in {n.op for n in judgement.program.nodes}
    assert "constants lifted: " in str(judgement), str(judgement)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_additive_mask_is_a_lifted_constant_added(dtype: str) -> None:
    torch.manual_seed(0)
    judgement = judge_module(CausalAttention(additive=True, mask_value=-1e4), X, dtype)
    assert judgement.verdict == "pass", str(judgement)
    assert judgement.elements == judgement.total, str(judgement)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_additive_mask_of_finfo_min_is_a_masked_softmax_judged_on_every_element(
        dtype: str) -> None:
    """``s + finfo.min`` then softmax is a softmax over the kept scores, 0 on the masked
    ones, in floating point: the trace reads it as ``masked_softmax`` and every element has
    a finite bound (as ``add`` then ``softmax`` none of the masked rows had)."""
    torch.manual_seed(0)
    judgement = judge_module(CausalAttention(additive=True), X, dtype)
    assert judgement.verdict == "pass", str(judgement)
    assert judgement.elements == judgement.total, str(judgement)
    assert [m.split(" at ")[0] for m in judgement.matched] == ["masked_softmax"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_tables_from_arange_cos_and_sin_are_lifted(dtype: str) -> None:
    torch.manual_seed(0)
    module = Rotary()
    lowered = lower(module.to(getattr(torch, dtype)), [X[0].to(getattr(torch, dtype))])
    assert {n.op for n in lowered.program.nodes} >= {"mul", "neg", "cat", "linear"}
    assert len(lowered.constants) == 2, sorted(lowered.constants)  # the cos and sin tables
    judgement = judge_module(module, X, dtype)
    assert judgement.verdict == "pass", str(judgement)
    assert judgement.elements == judgement.total, str(judgement)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_where_whose_backward_picks_the_wrong_side_is_caught(dtype: str) -> None:
    torch.manual_seed(0)
    wrong = judge_module(CausalAttention(select=WrongSideWhere.apply), X, dtype)
    assert wrong.verdict == "fail", str(wrong)
    assert {m.where for m in wrong.misses} & {"grad[x]", "grad[q.weight]", "grad[k.weight]"}
    torch.manual_seed(0)
    assert judge_module(CausalAttention(), X, dtype).passed


def test_a_mask_that_depends_on_the_data_is_refused_by_name() -> None:
    module = Lambda(lambda x, w: torch.where(x > 0, x * w, x))
    with pytest.raises(NotInIR, match=r"at node where .*the mask gt depends on the data"):
        lower(module.double(), (torch.zeros(3, 4, dtype=torch.float64),))


def test_a_floating_constant_in_another_dtype_is_lifted_and_cast_when_exact() -> None:
    """A float32 constant in a float64 program is exact there: lifted in float64, cast to
    its own float32 (giving it back exactly) and widened for the product, as torch
    promotes; the layer passes."""
    module = Lambda(lambda x, w: x * w * torch.arange(4, dtype=torch.float32))
    lowered = lower(module.double(), (torch.zeros(3, 4, dtype=torch.float64),))
    casts = [(n.params["source"], n.params["target"]) for n in lowered.program.nodes
             if n.op == "cast"]
    assert casts == [("float64", "float32"), ("float32", "float64")], lowered.program
    judgement = judge_module(module.double(), (torch.zeros(3, 4),), "float64")
    assert judgement.verdict == "pass", str(judgement)


def test_a_floating_constant_not_exact_in_the_program_s_dtype_is_refused_by_name() -> None:
    module = Lambda(lambda x, w: x * w * torch.full((4,), 0.1, dtype=torch.float32))
    with pytest.raises(NotInIR, match=r"the constant full is torch.float32 and not exact in "
                                      r"the program's torch.bfloat16"):
        lower(module.bfloat16(), (torch.zeros(3, 4, dtype=torch.bfloat16),))


def test_a_boolean_constant_outside_a_where_mask_is_refused_by_name() -> None:
    module = Lambda(lambda x, w: x * w * torch.ones(4, dtype=torch.bool))
    with pytest.raises(NotInIR, match=r"the constant full is torch.bool \(only a where mask"):
        lower(module.double(), (torch.zeros(3, 4, dtype=torch.float64),))


def _slack_taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each budget the judgement's whole-program ``verify`` built carried the spec's
    slack (its second, wider try), recorded in call order."""
    from resverify.blocks import exact
    from resverify.spec import enclosure

    taken: list[bool] = []
    inner, own = enclosure.fast_budget, exact.verify

    def recorded(*args: Any, **kwargs: Any) -> Any:
        taken.append(kwargs.get("with_spec_slack", True))
        return inner(*args, **kwargs)

    def judged(*args: Any, **kwargs: Any) -> Any:
        with monkeypatch.context() as m:
            m.setattr(enclosure, "fast_budget", recorded)
            return own(*args, **kwargs)

    monkeypatch.setattr(exact, "verify", judged)
    return taken


def test_lifted_constants_ask_no_gradient_so_verify_keeps_the_budget_without_slack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The causal mask is a lifted constant whose gradient nobody asks: its absence is no
    miss, so the judgement's ``verify`` stays on its first budget, without the exact side's
    slack (before, the constants' ``grad[...].shape`` misses sent every block whose
    constants are lifted to the budget with the slack)."""
    taken = _slack_taken(monkeypatch)
    torch.manual_seed(0)
    judgement = judge_module(CausalAttention(), X, "float32")
    assert judgement.verdict == "pass", str(judgement)
    assert judgement.constants, str(judgement)
    assert taken == [False], f"the budgets verify built carried slack: {taken}, want [False]"


def test_a_real_miss_still_fails_and_takes_the_budget_with_slack(
        monkeypatch: pytest.MonkeyPatch) -> None:
    taken = _slack_taken(monkeypatch)
    torch.manual_seed(0)
    wrong = judge_module(CausalAttention(select=WrongSideWhere.apply), X, "float32")
    assert wrong.verdict == "fail", str(wrong)
    assert not any(".shape" in m.where for m in wrong.misses), str(wrong)
    assert taken == [False, True], f"the budgets verify built carried slack: {taken}"


def test_a_gradient_asked_for_and_not_given_is_still_a_miss() -> None:
    """Only the inputs named ``unjudged`` give up their gradient: another missing one is a
    ``grad[...].shape`` miss, as before."""
    from resverify.spec.enclosure import verify

    torch.manual_seed(0)
    judgement = judge_module(CausalAttention(), X, "float32")
    request = judgement.request
    assert request is not None
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output = np.vectorize(float, otypes=[np.float64])(exact.output)
    grads = {n: np.vectorize(float, otypes=[np.float64])(g) for n, g in exact.grads.items()}
    dropped = next(n for n in grads if n not in judgement.constants)
    given = {n: g for n, g in grads.items() if n != dropped}
    misses = verify(request, output, given, unjudged=judgement.constants).misses
    assert [m.where for m in misses] == [f"grad[{dropped}].shape"], misses
    assert not verify(request, output, grads, unjudged=judgement.constants).misses
