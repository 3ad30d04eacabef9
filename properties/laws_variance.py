"""Variance laws: the exact sample identity, and chi-square tests on random streams.

Exact sample identity. For the backend's branch output f and merge output y over a
sample x, ``Var(y) - [Var x + Var f + 2Cov(x, f)] = Var(y) - Var(x + f)``. The merge
rounds once: ``y = x + f + δ`` with ``|δ_i| <= b_i`` (the spec's budget for the merge
alone), hence with population moments ``D = 2Cov(x+f, δ) + Var δ`` and, by Cauchy-Schwarz,
``|D| <= 2·sqrt(Var(x+f)·M) + M`` where ``M = mean(b²)``. Checked in exact rationals, as the
relation of a :class:`~resverify.properties.relations.Group` of the merge's request and
the branch's (:func:`sample_variance_identity`), which the test and ``resverify vectors
group`` both build.

Random streams (numpy Generator seeded from Hypothesis; its float64 normal draws are
taken as exact N(0, 1) samples). Under a correct backend the ideal output ``y*`` (the
program on the unrounded draws) has independent ``N(0, v)`` components, so
``S = Σ y*² / v`` is chi-square(n). The backend's ``y`` is within ``r_i = b_i + d_i`` of
``y*`` (``b``: the spec's budget; ``d``: the effect of rounding the draws to the dtype,
summed with a 1e-3 relative margin), so S lies in ``[Σ max(|y|-r, 0)², Σ (|y|+r)²] / v``.
The check fails only when that whole interval is outside the chi-square acceptance
region of :mod:`resverify.properties.stats`: false-alarm probability at most 1e-9 per example.

Streams through real normalization (seed facts S26 and S29 together). A block's branch is
``scale(linear(N(h), W), 1/√d)`` (pre-norm; post-norm: ``N(h + scale(linear(h, W), 1/√d))``)
with W's entries independent N(0, 1) draws and h of width d. Given everything before the
block, the update ``u = N(h)W/√d`` is N(0, m·I) with ``m`` the mean square of ``N(h)``
(Gaussian W is rotation invariant), and m is ``σ²/(σ² + ε)``: 1 up to ε, whatever h's
scale. So ``g = u/√m`` is standard normal and independent of the past, and

* pre-norm: ``h_L = x + Σ u_l = (x + Σ g_l) - E`` with ``x + Σ g_l`` exactly
  ``N(0, (s² + L)·I)`` for ``x ~ N(0, s²I)``: the stream's variance grows by 1 a block, from
  any start. ``E = Σ (1 - √m_l) g_l`` is bounded elementwise by ``Σ (1 - m_l)/√m_l·|u_l|``
  from the exact trace (a few ε/σ²: the bound joins the radius);
* post-norm: every block starts from a normalized h (mean square m), so the sum entering its
  norm, ``h + u``, has ``|h + u|²/m = |√d·e + g|²`` (e a unit vector): noncentral
  chi-square(d, d), variance 2m ≈ 2 per element at every depth, whatever x's scale. The
  test is conditional on the block's input (its m from the exact trace), and its region is
  :func:`~resverify.properties.stats.shifted_acceptance`.

The draws are float64 normals; in a narrower dtype the request holds them rounded, and the
radius adds the exact change that rounding makes to the ideal output (both programs
evaluated exactly, with their slack).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num, run_ok
from resverify.properties.cases import round_to_dtype
from resverify.properties.laws_norm import norm_blocks
from resverify.properties.relations import Group, VarianceIdentity, holds
from resverify.properties.stats import acceptance, miss_probability, shifted_acceptance
from resverify.spec.budget import Budget, error_budget
from resverify.spec.enclosure import Ball, NotEnclosed, enclose, fast_budget
from resverify.spec.exact import evaluate_exact
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = []

STREAM_SAMPLES = 768  # the width of seed S26
DEPENDENT_SAMPLES = 4096
NORM_WIDTH = 64  # a square: the branch's 1/√d is 1/8, exact
NORM_EPS = Fraction(1, 2**20)


def sample_variance_identity(request: Request) -> Group:
    """The group of the sample variance identity: ``request`` is one block
    ``residual_add(x, f)`` over a 1-D sample x; the branch f is fetched by a second request,
    the same program with the branch as output (cotangent ones)."""
    program = request.program
    merge = {n.name: n for n in program.nodes}[program.output]
    x_name, f_name = merge.args
    f_request = Request(Program(program.inputs, program.nodes, f_name), request.inputs,
                        request.dtype, np.ones_like(request.inputs[x_name]))
    return Group((request, f_request), (VarianceIdentity(
        "Var(y) against Var x + Var f + 2Cov(x,f)", x_name, 0, 1),))


def check_sample_variance_identity(backend: Backend, request: Request) -> None:
    """``Var y = Var x + Var f + 2Cov(x, f)`` on the backend's f and y, within the merge budget
    (:func:`sample_variance_identity`)."""
    __tracebackhide__ = True
    holds(backend, sample_variance_identity(request))


def noise_stack(samples: int, depth: int, scale: Fraction) -> Program:
    """x (zeros) plus ``depth`` updates ``scale·e_l``, each merged with residual_add."""
    inputs = [Input("x", (samples,))] + [Input(f"e{i}", (samples,)) for i in range(depth)]
    nodes, h = [], "x"
    for i in range(depth):
        nodes += [Node(f"u{i}", "scale", (f"e{i}",), scale),
                  Node(f"h{i}", "residual_add", (h, f"u{i}"))]
        h = f"h{i}"
    return Program(tuple(inputs), tuple(nodes), h)


def check_independent_updates_variance(backend: Backend, dtype: str, seed: int, root: int,
                                       rescale: bool, samples: int = STREAM_SAMPLES) -> None:
    """``L = root²`` independent N(0,1) updates sum to variance L, or 1 with the 1/√L scale."""
    __tracebackhide__ = True
    depth = root * root
    scale = Fraction(1, root) if rescale else Fraction(1)
    draws = np.random.default_rng(seed).standard_normal((depth, samples))
    rounded = round_to_dtype(draws, dtype)
    values: dict[str, np.ndarray] = {"x": np.zeros(samples)}
    values.update({f"e{i}": rounded[i] for i in range(depth)})
    request = Request(noise_stack(samples, depth, scale), values, dtype, np.ones(samples))
    drift = float(scale) * np.sum(np.abs(rounded.astype(np.float64) - draws), axis=0) * 1.001
    _stream_check(backend, request, drift, depth * scale * scale,
                  f"variance of {depth} independent updates scaled by {scale}")


def _stream_check(backend: Backend, request: Request, drift: np.ndarray, variance: Fraction,
                  law: str, region: tuple[float, float] | None = None,
                  spec: str = "chi-square", budget: Budget | None = None,
                  variance_high: Fraction | None = None) -> tuple[float, float]:
    """Σy²/v (y: the backend's output, each element within its radius of the ideal one)
    against ``region`` (default: chi-square(n)'s acceptance region); ``budget``: the
    request's error budget, if already known; ``variance_high``: where v is only known to
    lie in ``[variance, variance_high]``, S's interval takes both ends."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    y = np.asarray(run_ok(backend, request).output, dtype=np.float64)
    budget = output_budget(request) if budget is None else budget
    radius = np.asarray(budget.output, dtype=np.float64) + drift
    v, v_high = float(variance), float(variance if variance_high is None else variance_high)
    s_lo = float(np.sum(np.maximum(np.abs(y) - radius, 0.0) ** 2)) / v_high * (1 - 1e-9)
    s_hi = float(np.sum((np.abs(y) + radius) ** 2)) / v * (1 + 1e-9)
    q_lo, q_hi = acceptance(len(y)) if region is None else region
    ctx.check(bool(np.all(np.isfinite(y))) and not (s_hi < q_lo or s_lo > q_hi),
              f"{law}: backend {ctx.backend} gives Σy²/v in [{s_lo:.6g}, {s_hi:.6g}] for "
              f"v={num(variance)}, spec: {spec}({len(y)}) in [{q_lo:.6g}, {q_hi:.6g}] "
              f"(false alarm <= 1e-9)")
    return s_lo, s_hi


def output_budget(request: Request) -> Budget:
    """The request's error budget, from float64 enclosures of its values
    (:mod:`resverify.spec.enclosure`: sound, and never below the exact trace's budget) when
    every op has an enclosure rule, else from the exact interpreter. The streams here are
    hundreds of elements through dozens of merges, where the exact interpreter's Fractions
    cost most of a suite run's time and the enclosures a few milliseconds."""
    try:
        return fast_budget(request, enclose(request))
    except NotEnclosed:
        return error_budget(request)


def check_dependent_branch_variance(backend: Backend, dtype: str, seed: int, a: Fraction,
                                    samples: int = DEPENDENT_SAMPLES) -> None:
    """``y = x + a·x`` has variance ``(1+a)²``, not the naive ``1 + a²``: the covariance counts.

    The naive value must be rejected too; :func:`miss_probability` shows beforehand that a
    correct backend leaves it inside the acceptance region with probability <= 1e-9.
    """
    __tracebackhide__ = True
    true_var, naive_var = (1 + a) ** 2, 1 + a * a
    assert miss_probability(samples, true_var / naive_var) <= 1e-9, "strategy: a too small"
    draws = np.random.default_rng(seed).standard_normal(samples)
    rounded = round_to_dtype(draws, dtype)
    program = Program((Input("x", (samples,)),),
                      (Node("f", "scale", ("x",), a), Node("y", "residual_add", ("x", "f"))), "y")
    request = Request(program, {"x": rounded}, dtype, np.ones(samples))
    drift = float(abs(1 + a)) * np.abs(rounded.astype(np.float64) - draws) * 1.001
    s_lo, s_hi = _stream_check(backend, request, drift, true_var,
                               f"variance of x + {a}·x")
    q_lo, q_hi = acceptance(samples)
    ratio = float(true_var / naive_var)
    Context(backend.name, request).check(
        s_hi * ratio < q_lo or s_lo * ratio > q_hi,
        f"backend {backend.name}: the naive Var x + Var F = {naive_var} is not rejected "
        f"(Σy²/v in [{s_lo * ratio:.6g}, {s_hi * ratio:.6g}]), spec: (1+a)² = {true_var}")


def norm_stream(width: int, depth: int, op: str, placement: str,
                eps: Fraction = NORM_EPS) -> Program:
    """``depth`` pre-norm or post-norm blocks (:func:`~resverify.properties.laws_norm.
    norm_blocks`) over x of shape ``(width,)``, every branch scaled by ``1/√width``."""
    root = math.isqrt(width)
    assert root * root == width, f"width {width} is not a square"
    return norm_blocks((width,), op, placement, [Fraction(1, root)] * depth, eps)


@dataclass(frozen=True)
class _Stream:
    """A norm stream's request and what the laws read of its ideal run (the program on
    the unrounded draws): the radius the rounding of the draws adds (``drift``), the
    request's error budget, and bounds of the ideal values they use."""

    request: Request
    drift: np.ndarray
    budget: Budget
    mean_square: Callable[[str], tuple[Fraction, Fraction]]
    """Bounds ``(low, high)`` of the mean square of a node's ideal value."""
    size: Callable[[str], np.ndarray]
    """Upper bounds (up to a 1e-3 relative margin) of a node's ideal ``|value|``."""


def _draws(program: Program, dtype: str, seed: int, spread: int
           ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Request]:
    """x ~ N(0, spread²), w_l ~ N(0, 1) drawn, the same rounded to ``dtype``, and the
    request on the rounded ones (cotangent 1)."""
    rng = np.random.default_rng(seed)
    draws = {i.name: rng.standard_normal(i.shape) for i in program.inputs}
    draws["x"] = draws["x"] * spread  # a power of two: exact
    rounded = {k: round_to_dtype(v, dtype) for k, v in draws.items()}
    width = program.inputs[0].shape[0]
    return draws, rounded, Request(program, rounded, dtype, np.ones(width))


def _norm_stream(program: Program, dtype: str, seed: int, spread: int) -> _Stream:
    """The stream from float64 enclosures (:mod:`resverify.spec.enclosure`) of both runs,
    or, where the enclosure does not cover them, from the exact interpreter."""
    draws, rounded, request = _draws(program, dtype, seed, spread)
    try:
        return _enclosed_stream(request, draws, rounded)
    except NotEnclosed:
        return _exact_stream(request, draws)


def _enclosed_stream(request: Request, draws: dict[str, np.ndarray],
                     rounded: dict[str, np.ndarray]) -> _Stream:
    """Balls hold the true values of both runs, so ``|actual - ideal|`` is at most the
    distance of their exact midpoints plus both radii (where nothing was rounded the two
    runs are one and the drift is 0); the budget is :func:`~resverify.spec.enclosure.
    fast_budget`, never below the exact one (forward only: the laws read the output)."""
    ideal = enclose(Request(request.program, draws, "float64", request.cotangent), reverse=False)
    actual, drift = ideal, np.zeros(np.shape(ideal.output.mid))
    if any(not np.array_equal(rounded[k], draws[k]) for k in draws):
        actual = enclose(request, reverse=False)
        gap = np.array([float(abs(p - q)) for p, q in zip(
            _exact_mid(actual.output), _exact_mid(ideal.output), strict=True)])
        drift = np.nextafter((gap + actual.output.rad + ideal.output.rad) * 1.001, np.inf)

    def mean_square(name: str) -> tuple[Fraction, Fraction]:
        """From ``|value| >= |mid| - |lo| - rad`` and ``<= size``, each rounding directed:
        a float sum of n squares is within ``(n + 1) u`` of the exact one."""
        ball = ideal.values[name]
        n = ball.mid.size
        low = np.maximum(np.nextafter(np.abs(ball.mid) - np.nextafter(
            np.abs(ball.lo) + ball.rad, np.inf), -np.inf), 0.0)
        slack = (n + 2) * 2.0**-52
        total_low = np.nextafter(np.sum(low * low) * (1 - slack), -np.inf)
        total_high = np.nextafter(np.sum(ball.size * ball.size) * (1 + slack), np.inf)
        return Fraction(float(total_low)) / n, Fraction(float(total_high)) / n

    return _Stream(request, drift, fast_budget(request, actual), mean_square,
                   lambda name: ideal.values[name].size)


def _exact_mid(ball: Ball) -> list[Fraction]:
    return [Fraction(m) + Fraction(lo) for m, lo in
            zip(ball.mid.reshape(-1).tolist(), ball.lo.reshape(-1).tolist(), strict=True)]


def _exact_stream(request: Request, draws: dict[str, np.ndarray]) -> _Stream:
    """Both runs in the exact interpreter: the drift is their exact distance plus both
    slacks; the ideal values are the spec's (within its slack of the true ones)."""
    program, rounded = request.program, request.inputs
    ideal = evaluate_exact(program, draws, None)
    assert ideal.output is not None and ideal.trace is not None
    drift, actual = np.zeros(np.shape(ideal.output)), ideal
    if any(not np.array_equal(rounded[k], draws[k]) for k in draws):
        actual = evaluate_exact(program, rounded, None)
        assert actual.output is not None
        gap = np.abs((actual.output - ideal.output).astype(np.float64))
        drift = (gap + float(actual.slack + ideal.slack)) * 1.001
    trace = ideal.trace

    def mean_square(name: str) -> tuple[Fraction, Fraction]:
        m = _mean_square(trace.values[name])
        return m, m

    return _Stream(request, drift + float(ideal.slack), error_budget(request, exact=actual),
                   mean_square, lambda name: np.abs(trace.values[name].astype(np.float64)))


def _mean_square(values: np.ndarray) -> Fraction:
    return sum((v * v for v in values), Fraction(0)) / len(values)


def check_pre_norm_stream_variance(backend: Backend, dtype: str, seed: int, op: str,
                                   depth: int, spread: int, width: int = NORM_WIDTH) -> None:
    """A pre-norm stream ``h_L`` from ``x ~ N(0, spread²)`` through ``depth`` blocks with
    independent Gaussian branch weights has variance ``spread² + depth`` per element (the
    norm makes every update's variance 1 up to ε, whatever the stream's scale)."""
    __tracebackhide__ = True
    stream = _norm_stream(norm_stream(width, depth, op, "pre"), dtype, seed, spread)
    shortfall = np.zeros(width)
    for i in range(depth):
        m, m_high = stream.mean_square(f"n{i}")  # the shortfall falls as m grows: its low end
        assert m > 0 and m_high <= 1 + Fraction(1, 2**40), f"spec: mean square {float(m)}"
        shortfall += float(max(1 - m, Fraction(0))) / math.sqrt(float(m)) * stream.size(
            f"s{i}") * 1.001
    _stream_check(backend, stream.request, stream.drift + shortfall,
                  Fraction(spread * spread + depth),
                  f"pre-norm {op} stream after {depth} blocks from variance {spread ** 2}",
                  budget=stream.budget)


def check_post_norm_stream_variance(backend: Backend, dtype: str, seed: int, op: str,
                                    depth: int, spread: int, width: int = NORM_WIDTH) -> None:
    """A post-norm stream (``depth >= 2`` blocks) from ``x ~ N(0, spread²)``: the sum entering
    the last block's norm has variance ``2m`` per element, m (1 up to ε) the mean square of
    the normalized stream the block starts from, at every depth and whatever the scale."""
    __tracebackhide__ = True
    assert depth >= 2, "the first block starts from x itself, not from a normalized stream"
    whole = norm_stream(width, depth, op, "post")
    program = Program(whole.inputs, whole.nodes[:-1], f"h{depth - 1}")  # before the last norm
    stream = _norm_stream(program, dtype, seed, spread)
    m, m_high = stream.mean_square(f"n{depth - 2}")
    assert Fraction(1, 2) < m and m_high <= 1 + Fraction(1, 2**40), f"spec: mean square {float(m)}"
    _stream_check(backend, stream.request, stream.drift, m,
                  f"post-norm {op} stream entering the norm of block {depth} from variance "
                  f"{spread ** 2}", shifted_acceptance(width, Fraction(width)),
                  "noncentral chi-square(λ = n), union bound,", budget=stream.budget,
                  variance_high=m_high)
