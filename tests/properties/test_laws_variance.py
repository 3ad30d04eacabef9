"""The statistical laws' stream radius comes from float64 enclosures
(:func:`resverify.properties.laws_variance.output_budget`), not the exact interpreter: it must
be sound, never below the exact budget (norm streams included), and the exact budget itself
where the program has an op without an enclosure rule."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.properties.cases import round_to_dtype
from resverify.properties.laws_variance import (
    _draws,
    _enclosed_stream,
    _exact_stream,
    noise_stack,
    norm_stream,
    output_budget,
)
from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate_exact
from resverify.spec.ops import OP_TABLE, Op
from resverify.spec.request import Request


def _noise_request(dtype: str, depth: int, scale: Fraction, seed: int) -> Request:
    samples = 64
    draws = round_to_dtype(np.random.default_rng(seed).standard_normal((depth, samples)), dtype)
    values = {"x": np.zeros(samples), **{f"e{i}": draws[i] for i in range(depth)}}
    return Request(noise_stack(samples, depth, scale), values, dtype, np.ones(samples))


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("depth", "scale"), [(1, Fraction(1)), (9, Fraction(1, 3)),
                                              (16, Fraction(1))])
def test_enclosed_stream_radius_is_never_below_the_exact_budget(
        dtype: str, depth: int, scale: Fraction) -> None:
    request = _noise_request(dtype, depth, scale, seed=depth)
    fast, exact = output_budget(request).output, error_budget(request).output
    below = np.flatnonzero(fast < exact)
    assert below.size == 0, (
        f"output_budget(noise_stack depth {depth}, scale {scale}, {dtype}) is below the exact "
        f"budget at {below[:5]}: {fast[below[:5]]} < {exact[below[:5]]}")
    # the enclosure is an ulp or two wide: the radius stays the budget's, not a multiple
    assert np.all(fast <= exact * (1 + 2.0**-40) + 2.0**-1060), (
        f"output_budget({dtype}, depth {depth}) is far above the exact budget: "
        f"max ratio {np.max(fast / np.where(exact > 0, exact, 1))}")


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_enclosed_norm_stream_radius_is_never_below_the_exact_budget(
        op: str, placement: str, dtype: str) -> None:
    program = norm_stream(16, 3, op, placement)
    rng = np.random.default_rng(len(op) + len(placement))
    values = {i.name: round_to_dtype(rng.standard_normal(i.shape), dtype)
              for i in program.inputs}
    request = Request(program, values, dtype, np.ones(16))
    fast, exact = output_budget(request).output, error_budget(request).output
    below = np.flatnonzero(fast < exact)
    assert below.size == 0, (
        f"output_budget({placement}-norm {op} stream, {dtype}) is below the exact budget at "
        f"{below[:5]}: {fast[below[:5]]} < {exact[below[:5]]}")
    assert np.all(fast <= exact * (1 + 2.0**-30)), (
        f"output_budget({placement}-norm {op} stream, {dtype}) is far above the exact "
        f"budget: max ratio {np.max(fast / exact)}")


def test_stream_radius_of_a_program_without_enclosure_rules_is_the_exact_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    program = norm_stream(16, 2, "layer_norm", "pre")
    rng = np.random.default_rng(1)
    values = {i.name: rng.standard_normal(i.shape) for i in program.inputs}
    request = Request(program, values, "float64", np.ones(16))
    monkeypatch.setattr(type(OP_TABLE["layer_norm"]), "enclose", Op.enclose)
    fast, exact = output_budget(request).output, error_budget(request).output
    assert np.array_equal(fast, exact), (
        f"output_budget(pre-norm layer_norm stream without its rule) = {fast}, expected the "
        f"exact budget {exact}")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_enclosed_norm_stream_bounds_hold_the_exact_ones(op: str, placement: str,
                                                         dtype: str) -> None:
    """What the stream laws read from balls bounds what they read from the exact
    interpreter: the drift covers the exact distance of the two runs (non-zero: the draws
    were rounded), the mean squares lie in their ranges, the sizes bound the updates."""
    program = norm_stream(16, 3, op, placement)
    draws, rounded, request = _draws(program, dtype, seed=7, spread=2)
    fast, exact = _enclosed_stream(request, draws, rounded), _exact_stream(request, draws)
    ideal, actual = (evaluate_exact(program, v, None) for v in (draws, rounded))
    assert ideal.output is not None and actual.output is not None
    gap = np.abs((actual.output - ideal.output).astype(np.float64))
    assert gap.max() > 0 and np.all(fast.drift >= gap), (fast.drift, gap)
    assert np.all(fast.budget.output >= exact.budget.output), (fast.budget.output,
                                                                exact.budget.output)
    for i in range(3):
        low, high = fast.mean_square(f"n{i}")
        m, _ = exact.mean_square(f"n{i}")
        assert low <= m <= high, f"mean square of n{i}: {float(m)} outside [{low}, {high}]"
        size = np.abs(ideal.trace.values[f"s{i}"].astype(np.float64)) if ideal.trace else None
        assert size is not None and np.all(fast.size(f"s{i}") >= size), f"|s{i}|"
