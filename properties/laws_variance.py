"""Variance laws: the exact sample identity, and chi-square tests on random streams.

Exact sample identity. For the backend's branch output f and merge output y over a
sample x, ``Var(y) - [Var x + Var f + 2Cov(x, f)] = Var(y) - Var(x + f)``. The merge
rounds once: ``y = x + f + δ`` with ``|δ_i| <= b_i`` (the spec's budget for the merge
alone), hence with population moments ``D = 2Cov(x+f, δ) + Var δ`` and, by Cauchy-Schwarz,
``|D| <= 2·sqrt(Var(x+f)·M) + M`` where ``M = mean(b²)``. Checked in exact rationals.

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
from fractions import Fraction

import mpmath
import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num, run_ok
from resverify.properties.cases import round_to_dtype
from resverify.properties.laws_norm import norm_blocks
from resverify.properties.laws_structure import merge_request
from resverify.properties.stats import acceptance, miss_probability, shifted_acceptance
from resverify.spec.budget import Budget, error_budget
from resverify.spec.enclosure import NotEnclosed, enclose, fast_budget
from resverify.spec.exact import ExactResult, as_fractions, evaluate_exact
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = [
    "DEPENDENT_SAMPLES",
    "STREAM_SAMPLES",
    "check_dependent_branch_variance",
    "check_independent_updates_variance",
    "check_post_norm_stream_variance",
    "check_pre_norm_stream_variance",
    "check_sample_variance_identity",
    "noise_stack",
    "norm_stream",
]

STREAM_SAMPLES = 768  # the width of seed S26
DEPENDENT_SAMPLES = 4096
NORM_WIDTH = 64  # a square: the branch's 1/√d is 1/8, exact
NORM_EPS = Fraction(1, 2**20)


def _moments(a: np.ndarray, b: np.ndarray) -> Fraction:
    """Population covariance of two object arrays of Fractions."""
    n = len(a)
    ma, mb = sum(a, Fraction(0)) / n, sum(b, Fraction(0)) / n
    return sum(((p - ma) * (q - mb) for p, q in zip(a, b, strict=True)), Fraction(0)) / n


def check_sample_variance_identity(backend: Backend, request: Request) -> None:
    """``Var y = Var x + Var f + 2Cov(x, f)`` on the backend's f and y, within the merge budget.

    ``request`` is one block ``residual_add(x, f)`` over a 1-D sample x; f is fetched by
    running the same program with the branch as output.
    """
    __tracebackhide__ = True
    program = request.program
    merge = {n.name: n for n in program.nodes}[program.output]
    x_name, f_name = merge.args
    f_program = Program(program.inputs, program.nodes, f_name)
    f_request = Request(f_program, request.inputs, request.dtype,
                        np.ones_like(request.inputs[x_name]))
    y_raw = np.asarray(run_ok(backend, request).output)
    f_raw = np.asarray(run_ok(backend, f_request).output)
    if not (np.all(np.isfinite(y_raw)) and np.all(np.isfinite(f_raw))):
        overflow = np.isinf(error_budget(request).output)
        bad = ~np.isfinite(y_raw) | ~np.isfinite(f_raw)
        Context(backend.name, request).check(
            bool(np.all(overflow[bad])), f"backend {backend.name} gives a non-finite output where "
            "the spec's budget rules out overflow")
        return
    budget = error_budget(merge_request("residual_add", request.inputs[x_name], f_raw,
                                        request.dtype, np.ones_like(f_raw))).output
    if not np.all(np.isfinite(budget)):
        return  # the analysis allows overflow in the merge: no bound to check
    y, x, f = (as_fractions(v) for v in (y_raw, request.inputs[x_name], f_raw))
    bound = as_fractions(budget)
    exact_sum = x + f
    gap = abs(_moments(y, y) - (_moments(x, x) + _moments(f, f) + 2 * _moments(x, f)))
    m = sum((b * b for b in bound), Fraction(0)) / len(bound)
    ok = gap <= m or (gap - m) ** 2 <= 4 * _moments(exact_sum, exact_sum) * m
    if not ok:
        product = m * _moments(exact_sum, exact_sum)
        allowed = 2 * mpmath.sqrt(mpmath.mpf(product.numerator) / product.denominator) + (
            mpmath.mpf(m.numerator) / m.denominator)
        Context(backend.name, request).fail(
            f"Var(y) - [Var x + Var f + 2Cov(x,f)] = {num(gap)} on backend {backend.name}'s "
            f"outputs; spec: 0 up to the merge budget {mpmath.nstr(allowed, 3)}")


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
                  spec: str = "chi-square", exact: ExactResult | None = None
                  ) -> tuple[float, float]:
    """Σy²/v (y: the backend's output, each element within its radius of the ideal one)
    against ``region`` (default: chi-square(n)'s acceptance region); ``exact``: the
    request's exact forward pass, if already known."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    y = np.asarray(run_ok(backend, request).output, dtype=np.float64)
    budget = error_budget(request, exact=exact) if exact is not None else output_budget(request)
    radius = np.asarray(budget.output, dtype=np.float64) + drift
    v = float(variance)
    s_lo = float(np.sum(np.maximum(np.abs(y) - radius, 0.0) ** 2)) / v * (1 - 1e-9)
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


def _norm_stream_request(program: Program, dtype: str, seed: int, spread: int
                         ) -> tuple[Request, ExactResult, ExactResult, np.ndarray]:
    """The request (x ~ N(0, spread²), w_l ~ N(0, 1), rounded to ``dtype``), the exact
    forward passes on the unrounded draws (the ideal) and on the request's inputs, and the
    radius the rounding adds."""
    rng = np.random.default_rng(seed)
    draws = {i.name: rng.standard_normal(i.shape) for i in program.inputs}
    draws["x"] = draws["x"] * spread  # a power of two: exact
    rounded = {k: round_to_dtype(v, dtype) for k, v in draws.items()}
    ideal = evaluate_exact(program, draws, None)
    assert ideal.output is not None and ideal.trace is not None
    drift, actual = np.zeros(np.shape(ideal.output)), ideal
    if any(not np.array_equal(rounded[k], draws[k]) for k in draws):
        actual = evaluate_exact(program, rounded, None)
        assert actual.output is not None
        gap = np.abs((actual.output - ideal.output).astype(np.float64))
        drift = (gap + float(actual.slack + ideal.slack)) * 1.001
    width = program.inputs[0].shape[0]
    request = Request(program, rounded, dtype, np.ones(width))
    return request, ideal, actual, drift + float(ideal.slack)


def _mean_square(values: np.ndarray) -> Fraction:
    return sum((v * v for v in values), Fraction(0)) / len(values)


def check_pre_norm_stream_variance(backend: Backend, dtype: str, seed: int, op: str,
                                   depth: int, spread: int, width: int = NORM_WIDTH) -> None:
    """A pre-norm stream ``h_L`` from ``x ~ N(0, spread²)`` through ``depth`` blocks with
    independent Gaussian branch weights has variance ``spread² + depth`` per element (the
    norm makes every update's variance 1 up to ε, whatever the stream's scale)."""
    __tracebackhide__ = True
    program = norm_stream(width, depth, op, "pre")
    request, ideal, actual, drift = _norm_stream_request(program, dtype, seed, spread)
    assert ideal.trace is not None
    shortfall = np.zeros(width)
    for i in range(depth):
        m = _mean_square(ideal.trace.values[f"n{i}"])
        assert 0 < m <= 1 + Fraction(1, 2**100), f"spec: mean square of N(h) is {float(m)}"
        u = np.abs(ideal.trace.values[f"s{i}"].astype(np.float64))
        shortfall += float(max(1 - m, Fraction(0))) / math.sqrt(float(m)) * u * 1.001
    _stream_check(backend, request, drift + shortfall, Fraction(spread * spread + depth),
                  f"pre-norm {op} stream after {depth} blocks from variance {spread ** 2}",
                  exact=actual)


def check_post_norm_stream_variance(backend: Backend, dtype: str, seed: int, op: str,
                                    depth: int, spread: int, width: int = NORM_WIDTH) -> None:
    """A post-norm stream (``depth >= 2`` blocks) from ``x ~ N(0, spread²)``: the sum entering
    the last block's norm has variance ``2m`` per element, m (1 up to ε) the mean square of
    the normalized stream the block starts from, at every depth and whatever the scale."""
    __tracebackhide__ = True
    assert depth >= 2, "the first block starts from x itself, not from a normalized stream"
    whole = norm_stream(width, depth, op, "post")
    program = Program(whole.inputs, whole.nodes[:-1], f"h{depth - 1}")  # before the last norm
    request, ideal, actual, drift = _norm_stream_request(program, dtype, seed, spread)
    assert ideal.trace is not None
    m = _mean_square(ideal.trace.values[f"n{depth - 2}"])
    assert Fraction(1, 2) < m <= 1 + Fraction(1, 2**100), f"spec: mean square {float(m)}"
    _stream_check(backend, request, drift, m,
                  f"post-norm {op} stream entering the norm of block {depth} from variance "
                  f"{spread ** 2}", shifted_acceptance(width, Fraction(width)),
                  "noncentral chi-square(λ = n), union bound,", exact=actual)
