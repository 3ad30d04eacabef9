"""The Llama layer's SiLU judged by the narrow silu balls: no element goes to the exact
interpreter, and every bound and verdict is the wide balls' or tighter.

Why: silu's wide ball (NumPy's value trusted to 40 units of ``2**-53 |a|``) was wider than
its own one-op budget (8 units), so the op-by-op judgement of a float64 Llama layer sent
most elements of its SiLU unit and of its ``silu_backward`` kernel to the exact interpreter
(mpmath's σ per element), about a quarter of the judgement's time at hidden 64, sequence
32. The narrow balls (:func:`~resverify.spec.ops.sigmoid.sigmoid_balls`, half an ulp) decide
them all; the wide rules, put back here, are the control.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from resverify.blocks import local, local_backward
from resverify.blocks.catalog import recipe
from resverify.blocks.exact import Judgement, judge_recipe
from resverify.spec.enclosure import enclose, fast_budget
from resverify.spec.ops.gated import Gated
from resverify.spec.ops.silu import Silu

LLAMA = "hf.LlamaDecoderLayer"


def _sending(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Elements the op-by-op and derivative-kernel judgements send to the exact
    interpreter, by the unit's ops (``silu``, ``rms_norm ...``)."""
    sent: dict[str, int] = {}

    def counted(module: Any, name: str, ask: Callable[[Any], int]) -> None:
        original = getattr(module, name)

        def wrapper(request: Any, *args: Any) -> Any:
            key = " ".join(n.op for n in request.program.nodes)
            sent[key] = sent.get(key, 0) + ask(args)
            return original(request, *args)
        monkeypatch.setattr(module, name, wrapper)

    counted(local, "_outside_exactly", lambda a: int(np.sum(a[1])))
    counted(local_backward, "_outside_exactly", lambda a: int(np.sum(a[3])))
    counted(local_backward, "_judged_exactly",
            lambda a: sum(int(np.size(g)) for g in a[0].values()))
    return sent


def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """SiLU's balls as they were: the gated ops' wide rules."""
    monkeypatch.setattr(Silu, "enclose", Gated.enclose)
    monkeypatch.setattr(Silu, "enclose_vjp", Gated.enclose_vjp)


def _judged(dtype: str) -> Judgement:
    return judge_recipe(recipe(LLAMA), dtype, seed=0)


def test_no_silu_element_of_a_float64_llama_goes_to_the_exact_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _sending(monkeypatch)
    judged = _judged("float64")
    assert judged.verdict == "pass" and judged.local is not None and judged.local.passed
    assert not {k: n for k, n in sent.items() if "silu" in k and n}, sent
    # the control: with the wide balls more than half of the elements of both units went
    # (280 of 512 at the catalog's size)
    with monkeypatch.context() as m:
        _wide(m)
        sent.clear()
        wide = _judged("float64")
    assert wide.local is not None
    units = [u for u in wide.local.units + wide.local.backward if "silu" in u.target]
    assert len(units) == 2, units  # aten.silu and aten.silu_backward
    assert 2 * sent.get("silu", 0) > sum(u.elements for u in units), sent


@pytest.fixture(scope="module")
def both() -> dict[str, tuple[Judgement, Judgement]]:
    """Each dtype's judgement with the narrow balls and with the wide ones."""
    found = {}
    with pytest.MonkeyPatch.context() as m:
        for dtype in ("float64", "float32", "bfloat16"):
            narrow = _judged(dtype)
            with m.context() as w:
                _wide(w)
                found[dtype] = (narrow, _judged(dtype))
    return found


@pytest.mark.slow  # three dtypes of a Llama layer, each judged twice
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_the_narrow_balls_keep_every_verdict_and_no_bound_grows(
        both: dict[str, tuple[Judgement, Judgement]], dtype: str) -> None:
    """The whole program's budget from the narrow balls is at most the wide balls' in every
    element of the output and every gradient (the trace's midpoints are the same, its
    slack no larger); the verdicts, the elements judged and every op's and derivative
    kernel's count outside its budget are the same."""
    narrow, wide = both[dtype]
    assert (narrow.verdict, narrow.elements, narrow.misses) == \
        (wide.verdict, wide.elements, wide.misses)
    assert narrow.local is not None and wide.local is not None
    counts = [[(u.node, u.elements, u.outside) for u in (*n.units, *n.backward)]
              for n in (narrow.local, wide.local)]
    assert counts[0] == counts[1]
    request = narrow.request
    assert request is not None
    tight = fast_budget(request, enclose(request))
    with pytest.MonkeyPatch.context() as m:
        _wide(m)
        loose = fast_budget(request, enclose(request))
    assert (tight.output <= loose.output).all()
    for name, bound in loose.grads.items():
        assert (tight.grads[name] <= bound).all(), name
