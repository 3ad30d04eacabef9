"""batch_norm: the exact value against a high-precision one, torch's eval-mode kernel (its
uncentred ``x α + (β - μ α)`` order included, at ``x`` near ``μ``) inside the budget in
every dtype, the balls around the exact values, and a backward that uses ε differently
caught."""

from __future__ import annotations

from fractions import Fraction
from typing import cast

import mpmath
import numpy as np
import pytest

from resverify.spec.budget import Miss
from resverify.spec.enclosure import verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request
from tests.installed import skip_without_torch
from tests.spec.ops.op_checks import assert_balls_hold_exact

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

EPS = Fraction(1, 100000)
KINDS = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def request(dtype: str, seed: int = 0, near_mean: bool = False) -> Request:
    """x (2, 3, 4, 4) and p = [γ; β; μ; σ²] drawn in ``dtype``; ``near_mean``: x within a
    few per cent of μ, where the uncentred order's rounding is of ``|x| α``."""
    rng = np.random.default_rng(seed)
    p = np.stack([rng.normal(size=3), rng.normal(size=3), 4 * rng.normal(size=3),
                  rng.uniform(0.25, 2, size=3)])
    x = rng.normal(size=(2, 3, 4, 4))
    if near_mean:
        x = p[2][None, :, None, None] * (1 + 0.03 * x)
    program = Program((Input("x", x.shape), Input("p", (4, 3))),
                      (Node("y", "batch_norm", ("x", "p"), eps=EPS),), "y")
    rounded = {n: in_dtype(v, dtype) for n, v in (("x", x), ("p", p))}
    return Request(program, rounded, dtype, in_dtype(rng.normal(size=x.shape), dtype),
                   accumulate="float32" if dtype == "bfloat16" else None)


def in_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    return torch.tensor(values).to(KINDS[dtype]).double().numpy()


def torch_answers(req: Request, eps_in_backward: float | None = None
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """torch's eval-mode batch norm: the output and the gradients it computes (x, γ, β);
    ``eps_in_backward``: a hand-written backward whose ``x̄`` uses that ε instead."""
    kind = KINDS[req.dtype]
    x = torch.tensor(req.inputs["x"]).to(kind).requires_grad_(True)
    g, b, m, v = (torch.tensor(r).to(kind) for r in req.inputs["p"])
    g.requires_grad_(True)
    b.requires_grad_(True)
    y = torch.nn.functional.batch_norm(x, m, v, g, b, training=False, eps=float(EPS))
    cot = torch.tensor(req.cotangent).to(kind)
    y.backward(cot)
    assert x.grad is not None and g.grad is not None and b.grad is not None
    gx = x.grad
    if eps_in_backward is not None:
        scale = g / torch.sqrt(v + eps_in_backward)
        gx = cot * scale[None, :, None, None]
    rows = torch.stack([g.grad, b.grad, torch.zeros_like(m), torch.zeros_like(v)])
    return (as_numpy(y), {"x": as_numpy(gx), "p": as_numpy(rows)})


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def judged(misses: list[Miss]) -> list[Miss]:
    """The misses but those of the running statistics' gradients (rows 2 and 3 of p̄),
    which torch does not compute."""
    return [m for m in misses if not (m.where == "grad[p]" and m.index[0] in (2, 3))]


def test_the_exact_value_is_within_its_enclosure_of_the_true_one() -> None:
    req = request("float64")
    exact = evaluate(req)
    assert exact.output is not None
    x, p = req.inputs["x"], req.inputs["p"]
    mpmath.mp.prec = 300
    for index in [(0, 0, 0, 0), (1, 2, 3, 1), (0, 1, 2, 3)]:
        ch = index[1]
        true = ((mpmath.mpf(x[index]) - mpmath.mpf(p[2, ch])) * mpmath.mpf(p[0, ch])
                / mpmath.sqrt(mpmath.mpf(p[3, ch]) + mpmath.mpf(EPS.numerator) / EPS.denominator)
                + mpmath.mpf(p[1, ch]))
        got = cast(Fraction, exact.output[index])
        gap = abs(mpmath.mpf(got.numerator) / got.denominator - true)
        assert gap <= abs(true) * mpmath.mpf(2) ** -190, \
            f"batch_norm(x, p)[{index}] is {gap} from the true value {true}"


@pytest.mark.parametrize("near_mean", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_torch_eval_batch_norm_is_inside_the_budget(dtype: str, near_mean: bool) -> None:
    req = request(dtype, seed=1, near_mean=near_mean)
    output, grads = torch_answers(req)
    misses = judged(verify(req, output, grads).misses)
    assert not misses, f"torch batch_norm {dtype}: {misses[:3]}"


def test_the_balls_hold_the_exact_value_and_gradients() -> None:
    assert_balls_hold_exact(request("float64", seed=2))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_backward_that_uses_eps_differently_is_caught(dtype: str) -> None:
    """``x̄ = ḡ γ / sqrt(σ² + 2ε)``: ε doubled in the backward alone (the forward is
    torch's own) lies outside the budget; the correct twin is inside it."""
    req = request(dtype, seed=3)
    output, grads = torch_answers(req, eps_in_backward=2 * float(EPS))
    misses = judged(verify(req, output, grads).misses)
    assert misses and all(m.where == "grad[x]" for m in misses), misses[:3]
    assert not judged(verify(req, *torch_answers(req)).misses)


def test_the_shape_rule_wants_four_rows_of_the_channels() -> None:
    from resverify.spec.errors import ShapeMismatch

    with pytest.raises(ShapeMismatch, match="batch_norm"):
        OP_TABLE["batch_norm"].shape([(2, 3, 4), (4, 4)])
    with pytest.raises(ShapeMismatch, match="batch_norm"):
        OP_TABLE["batch_norm"].shape([(2, 3, 4), (2, 3)])
