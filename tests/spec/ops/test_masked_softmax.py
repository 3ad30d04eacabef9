"""The masked_softmax entry's own promises: a masked entry is exactly 0 and gets no gradient,
the kept ones are exactly the softmax of the kept scores, and a library's softmax with the
masked scores at ``-inf`` is inside the budget while one that forgets the mask is not.

The op table's tests check the entry on its sample shapes like any other (SymPy's derivative
at rational points, the reference and each installed library within the budget).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.enclosure import verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params
from resverify.spec.rational import objects
from resverify.spec.request import Request
from tests.installed import skip_without_torch

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

MASKED = OP_TABLE["masked_softmax"]
AXIS = Params({"axis": 1})
X = np.array([[1.5, -2.0, 0.25, 3.0], [0.5, 9.0, -1.0, 2.0], [-4.0, 0.0, 7.5, -0.5]])
KEEP = np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
G = np.array([[1.0, -2.0, 0.5, 4.0], [0.25, 3.0, -1.0, 2.0], [1.0, -1.0, 2.0, 0.5]])


def _fractions(x: np.ndarray) -> np.ndarray:
    return objects([Fraction(v) for v in x.reshape(-1).tolist()], x.shape)


def _request(dtype: str) -> Request:
    program = Program((Input("x", X.shape), Input("m", KEEP.shape)),
                      (Node("y", "masked_softmax", ("x", "m"), params=AXIS),), "y")
    return Request(program, {"x": X.astype(dtype), "m": KEEP.astype(dtype)}, dtype, G)


def test_masked_entries_are_exactly_zero_and_kept_ones_the_softmax_of_the_kept() -> None:
    y = MASKED.exact([_fractions(X), _fractions(KEEP)], AXIS)
    for row, keep in enumerate(KEEP != 0):
        kept = OP_TABLE["softmax"].exact([_fractions(X[row][keep])], Params({"axis": 0}))
        assert list(y[row][keep]) == list(kept), f"row {row}: {y[row]}, kept {kept}"
        assert all(v == 0 for v in y[row][~keep]), f"row {row}: {y[row]}"


def test_a_masked_entry_and_the_mask_get_no_gradient() -> None:
    exact = evaluate(_request("float64"))
    assert exact.grads is not None
    assert all(v == 0 for v in np.asarray(exact.grads["x"])[KEEP == 0])
    assert all(v == 0 for v in np.asarray(exact.grads["m"]).reshape(-1))
    assert any(v != 0 for v in np.asarray(exact.grads["x"])[KEEP != 0])


def _torch(dtype: str, masked_value: float | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """torch's softmax of the scores with the masked ones at ``masked_value`` (None: the
    mask forgotten), its output and the scores' gradient for ``G``."""
    kind = getattr(torch, dtype)
    x = torch.tensor(X, dtype=kind, requires_grad=True)
    keep = torch.tensor(KEEP != 0)
    scores = x if masked_value is None else torch.where(keep, x, masked_value)
    y = torch.softmax(scores, 1)
    y.backward(torch.tensor(G, dtype=kind))
    assert x.grad is not None
    return y.detach().numpy(), {"x": x.grad.numpy(), "m": np.zeros(KEEP.shape, dtype)}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_softmax_with_the_masked_scores_at_the_dtypes_min_is_within_budget(
        dtype: str) -> None:
    for value in (float("-inf"), float(torch.finfo(getattr(torch, dtype)).min)):
        y, grads = _torch(dtype, value)
        verdict = verify(_request(dtype), y, grads)
        assert not verdict.misses, f"masked at {value}: {verdict.misses[:3]}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_softmax_that_forgets_the_mask_or_masks_by_minus_one_is_outside_the_budget(
        dtype: str) -> None:
    for value in (None, -1.0):
        y, grads = _torch(dtype, value)
        misses = verify(_request(dtype), y, grads).misses
        assert {m.where for m in misses} >= {"output", "grad[x]"}, f"masked at {value}"


def test_the_balls_hold_the_exact_value_and_gradient() -> None:
    request = _request("float64")
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    out = MASKED.enclose([Ball.exact(X), Ball.exact(KEEP)], AXIS)
    back, mask = MASKED.enclose_vjp(Ball.exact(G), [Ball.exact(X), Ball.exact(KEEP)], out,
                                    AXIS)
    for name, ball, want in (("y", out, exact.output), ("x̄", back, exact.grads["x"])):
        gap = max(abs(Fraction(w) - Fraction(m)) - Fraction(r) for w, m, r in
                  zip(np.asarray(want).reshape(-1), ball.mid.reshape(-1),
                      ball.rad.reshape(-1), strict=True))
        assert gap <= 0, f"masked_softmax {name} ball misses the spec's value by {float(gap)}"
    assert (out.mid[KEEP == 0] == 0).all() and (out.rad[KEEP == 0] == 0).all()
    assert not mask.mid.any()
