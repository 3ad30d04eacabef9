""":func:`~resverify.spec.enclosure.verify` with a gradient not given: the full budget at once,
the same verdict as by way of the cheaper budget first.

Why: a whole-layer judgement gives no gradient for the lifted constants (a Llama layer's
rotary tables and mask), each a shape miss under any budget, so the budget without the
spec's slack was computed only to be followed by the full one (a sixth of the float64
judgement at hidden 64, sequence 32).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from resverify.spec import enclosure
from resverify.spec.enclosure import enclose, verify
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops.attributes import Params
from resverify.spec.request import Request


def _request() -> Request:
    """``softmax(x) @ w`` in float64 (softmax: not rational, so the spec has a slack)."""
    nodes = (Node("s", "softmax", ("x",), params=Params({"axis": 1})),
             Node("y", "matmul", ("s", "w")))
    rng = np.random.default_rng(0)
    values = {"x": rng.normal(size=(2, 3)), "w": rng.normal(size=(3, 3))}
    program = Program((Input("x", (2, 3)), Input("w", (3, 3))), nodes, "y")
    return Request(program, values, "float64", np.ones((2, 3)))


def _verdict(monkeypatch: pytest.MonkeyPatch, former: bool) -> tuple[Any, list[bool]]:
    request = _request()
    enclosed = enclose(request)
    output = enclosed.output.mid + enclosed.output.lo
    grads = {"x": enclosed.grads["x"].mid}  # no gradient of w: a shape miss
    asked: list[bool] = []
    budget = enclosure.fast_budget

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("with_spec_slack", True))
        return budget(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(enclosure, "fast_budget", counted)
        if former:
            m.setattr(enclosure, "_shape_missed", lambda *a: False)
        return verify(request, output, grads), asked


def test_a_missing_gradient_asks_for_the_full_budget_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now, asked = _verdict(monkeypatch, former=False)
    before, asked_before = _verdict(monkeypatch, former=True)
    assert asked == [True] and asked_before == [False, True]
    assert [m.where for m in now.misses] == [m.where for m in before.misses] == ["grad[w].shape"]
    assert now.budget.output.tobytes() == before.budget.output.tobytes()
    for name, bound in before.budget.grads.items():
        assert now.budget.grads[name].tobytes() == bound.tobytes()
