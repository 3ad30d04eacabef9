"""conv2d: the exact rules against the convolution's definition, torch's kernels inside the
budget in every geometry (stride, padding, dilation, groups, depthwise) and dtype, the balls
around the exact values, and a gradient with the filters left unflipped caught."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from resverify.impl import resolve_backend
from resverify.spec.budget import error_budget
from resverify.spec.enclosure import verify
from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Params
from resverify.spec.ops.attributes import IntValue
from resverify.spec.request import Request, Value
from tests.installed import skip_without_torch
from tests.spec.ops.op_checks import assert_balls_hold_exact

GEOMETRIES = [  # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 4, 6, 5), (4, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((2, 4, 7, 7), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4),  # depthwise, strided
    ((1, 2, 6, 6), (6, 1, 2, 2), (3, 3), (0, 2), (2, 1), 2),  # stride beyond the kernel
]


def params(stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
           groups: int) -> Params:
    values: dict[str, IntValue] = {"stride": stride, "padding": padding, "dilation": dilation,
                                   "groups": groups}
    return Params(values)


def node_params(req: Request) -> Params:
    found = req.program.nodes[0].params
    assert isinstance(found, Params)
    return found


def request(geometry: tuple, dtype: str = "float64", seed: int = 0,
            accumulate: str | None = None) -> Request:
    x, w, *rest = geometry
    k = params(*rest)
    rng = np.random.default_rng(seed)
    program = Program((Input("x", x), Input("w", w)), (Node("y", "conv2d", ("x", "w"),
                                                            params=k),), "y")
    out = OP_TABLE["conv2d"].shape([x, w], k)
    rounded = {"x": in_dtype(rng.standard_normal(x), dtype),
               "w": in_dtype(rng.standard_normal(w), dtype)}
    return Request(program, rounded, dtype, in_dtype(rng.standard_normal(out), dtype),
                   accumulate=accumulate)


def in_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (float32 at least), held in float64."""
    skip_without_torch()
    import torch

    kind = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    return torch.tensor(values).to(kind).double().numpy()


def by_definition(x: np.ndarray, w: np.ndarray, k: Params) -> np.ndarray:
    """``out[n, o, a, b] = Σ x_pad[n, c, a s + i d, b s + j d] w[o, c', i, j]``, loop by loop."""
    (sh, sw), (ph, pw), (dh, dw), groups = (k.ints("stride"), k.ints("padding"),
                                            k.ints("dilation"), k.number("groups"))
    n, c, h, width = x.shape
    o, cg, kh, kw = w.shape
    padded = np.zeros((n, c, h + 2 * ph, width + 2 * pw), dtype=object)
    padded[...] = Fraction(0)
    padded[:, :, ph:ph + h, pw:pw + width] = x
    out_shape = OP_TABLE["conv2d"].shape([x.shape, w.shape], k)
    out = np.zeros(out_shape, dtype=object)
    for b, f, a, col in itertools.product(*(range(s) for s in out_shape)):
        group = f // (o // groups)
        out[b, f, a, col] = sum((padded[b, group * cg + ch, a * sh + i * dh, col * sw + j * dw]
                                 * w[f, ch, i, j] for ch in range(cg) for i in range(kh)
                                 for j in range(kw)), Fraction(0))
    return out


def exact_arrays(req: Request) -> tuple[np.ndarray, np.ndarray]:
    def fr(v: np.ndarray) -> np.ndarray:
        return np.array([Fraction(float(e)) for e in v.reshape(-1)],
                        dtype=object).reshape(v.shape)
    return fr(req.inputs["x"]), fr(req.inputs["w"])


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_exact_value_is_the_convolution_by_its_definition(geometry: tuple) -> None:
    req = request(geometry)
    x, w = exact_arrays(req)
    k = node_params(req)
    got = OP_TABLE["conv2d"].exact([x, w], k)
    expected = by_definition(x, w, k)
    differ = np.argwhere(got != expected)
    assert not differ.size, (f"conv2d(x, w)[{tuple(differ[0])}]={got[tuple(differ[0])]}, but "
                             f"should be {expected[tuple(differ[0])]} [{k.text()}]")


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_vjp_is_the_transpose_of_the_convolution(geometry: tuple) -> None:
    """``⟨ḡ, conv(t_x, w) + conv(x, t_w)⟩ = ⟨x̄, t_x⟩ + ⟨w̄, t_w⟩`` exactly, on tangents that
    are unit vectors at every element (so every entry of both gradients is checked)."""
    req = request(geometry)
    x, w = exact_arrays(req)
    k = node_params(req)
    op = OP_TABLE["conv2d"]
    g = np.array([Fraction(float(v)) for v in req.cotangent.reshape(-1)],
                 dtype=object).reshape(req.cotangent.shape)
    out = op.exact([x, w], k)
    gx, gw = op.exact_vjp(g, [x, w], out, k)
    for which, arg, grad in (("x", x, gx), ("w", w, gw)):
        for index in np.ndindex(*arg.shape):
            unit = np.zeros(arg.shape, dtype=object)
            unit[...] = Fraction(0)
            unit[index] = Fraction(1)
            other = np.zeros((w if which == "x" else x).shape, dtype=object)
            other[...] = Fraction(0)
            ts = [unit, other] if which == "x" else [other, unit]
            expected = (g * op.exact_jvp(ts, [x, w], out, k)).sum()
            assert grad[index] == expected, \
                f"grad[{which}][{index}]={grad[index]}, but should be {expected} [{k.text()}]"


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_torch_convolutions_are_inside_the_budget(geometry: tuple, dtype: str) -> None:
    """torch's conv2d, its input and filter gradients, every geometry; bfloat16 with the
    float32 accumulation torch declares on CPU."""
    req = request(geometry, dtype, accumulate="float32" if dtype == "bfloat16" else None)
    result = resolve_backend("torch").run(req)
    assert isinstance(result, Value), result
    verdict = verify(req, result.output, result.grads)
    assert not verdict.misses, f"torch {req.program.describe()} {dtype}: {verdict.misses[:3]}"


@pytest.mark.parametrize("geometry", GEOMETRIES[:2])
def test_the_exact_budget_and_the_fast_budget_agree_on_torch(geometry: tuple) -> None:
    req = request(geometry, "float32")
    result = resolve_backend("torch").run(req)
    assert isinstance(result, Value), result
    exact = evaluate(req)
    assert not error_budget(req, exact=exact).misses(exact, result.output, result.grads)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_the_balls_hold_the_exact_value_and_gradients(geometry: tuple) -> None:
    assert_balls_hold_exact(request(geometry, seed=3))


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_an_input_gradient_with_unflipped_filters_is_caught(geometry: tuple) -> None:
    """``x̄`` computed with the filters as they are (not flipped): a conv backward that
    correlates where it should convolve lies outside the budget."""
    skip_without_torch()
    import torch
    import torch.nn.grad

    req = request(geometry, "float32", seed=1)
    x, w = (torch.tensor(req.inputs[n], dtype=torch.float32) for n in ("x", "w"))
    k = node_params(req)
    geometry_args = (k.ints("stride"), k.ints("padding"), k.ints("dilation"),
                     k.number("groups"))
    g = torch.tensor(req.cotangent, dtype=torch.float32)
    wrong_w = torch.flip(w, dims=(2, 3))
    gx = torch.nn.grad.conv2d_input(x.shape, wrong_w, g, *geometry_args)
    gw = torch.nn.grad.conv2d_weight(x, w.shape, g, *geometry_args)
    y = torch.nn.functional.conv2d(x, w, None, *geometry_args)
    verdict = verify(req, y.numpy().astype(np.float64),
                     {"x": gx.numpy().astype(np.float64), "w": gw.numpy().astype(np.float64)})
    assert verdict.misses and all(m.where.startswith("grad[x]") for m in verdict.misses), \
        verdict.misses[:3]


def test_the_shape_rule_refuses_a_group_count_that_does_not_divide() -> None:
    with pytest.raises(ShapeMismatch, match="conv2d"):
        OP_TABLE["conv2d"].shape([(1, 3, 4, 4), (4, 1, 2, 2)], params((1, 1), (0, 0), (1, 1), 2))
    with pytest.raises(ShapeMismatch, match="conv2d"):
        OP_TABLE["conv2d"].shape([(1, 2, 2, 2), (2, 2, 3, 3)], params((1, 1), (0, 0), (1, 1), 1))
