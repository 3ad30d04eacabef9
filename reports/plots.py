"""The report's five plots, drawn with matplotlib's Agg canvas (no pyplot, no display).

Each plot shows the exact (or reference) curve of a law and, beside it, one series per
backend being checked, computed by running that backend on the plot's programs: a report
on torch shows torch's numbers, not a picture that is the same whatever is checked.

Why "tapped" programs: a backend is asked for one request per gradient curve, not one
per point, so a compiling backend (torch-compile, jax-jit, pytensor) compiles a handful of
small programs per report. A tap is a zero input ``z_i`` added (``add``) into the stream
at each block boundary: its gradient is the cotangent that reached block ``i``, so the
gradient through the last ``k`` blocks of one stack gives the curve for every depth ``k``
at once. The variance plots need forward values instead: there every five layers are one
request of the same program, fed with the backend's own previous output (one program,
compiled once, however deep the stream).

* ``gradient_retention``: ``max|x̄| / max|ȳ|`` through ``k`` linear layers, plain and
  residual: the S11 stack ``W = diag(-1/4, -1/4)`` (exactly ``(1/4)^k`` and ``(3/4)^k``)
  and a seeded random 8-wide stack (the exact interpreter's values).
* ``depth_law``: ``|(1+a)^L|`` over ``a`` and ``L`` (exact powers), the ``|1+a| = 1``
  boundary marked and the S25 values shown; each backend's ``d x_L / d x_0`` of the branch
  ``F = a ⊙ x`` for four values of ``a`` in one 4-wide request.
* ``depth_law_jvp``: the same law in forward mode: ``|J·t|`` through the last ``L`` blocks
  of the same stack, ``(1+a)^L·t`` exactly (the spec's law,
  :func:`resverify.spec.symbolic.depth_law`, with ``t = 3/4``), from one request per backend
  that claims mode ``jvp``: a ``4·(depth+1)``-wide stack whose block ``k`` has its tangent
  on the tap ``z_{depth-k}`` only, so its output tangent holds every depth at once. A
  backend that claims only ``vjp`` is not asked and has no series; the legend and the
  report say so (:attr:`PlotData.not_claimed`).
* ``variance_growth``: seeded S26/S27 simulations (768 components, unit normal updates,
  the reference path through :func:`resverify.impl.ops.residual_add`): left, the sample
  variance after each layer of one unscaled 100-layer stream against ``l·σ²``; right, the
  final sample variance of streams of depth L whose updates are scaled by ``1/√L``
  against ``σ²``; both with a 99.9% band (Wilson–Hilferty quantiles of χ²). Each backend
  runs the same updates, a few layers a request: the left path every 5 layers, the right
  at L = 1, 4, 16 and 64 (where ``1/√L`` is exact).
* ``norm_depth``: ``‖x̄‖₂ / ‖ȳ‖₂`` through the last ``k`` blocks of pre-norm stacks
  ``h + F(LN(h))`` and post-norm stacks ``LN(h + F(h))`` with seeded random linear
  branches, exactly (every value a rational or an enclosure 2**-200 wide) and on each
  backend.

The plots illustrate the laws on a few fixed programs in float64 (or float32); they are
not the property verdicts. Where a backend's own answers to those programs are wrong, its
legend entry says so: :func:`departure` measures its largest relative deviation from the
lines (``off the lines`` past :data:`OFF_LINES`) and where it answered NaN or ±inf, which
draw no marker; :func:`plot_ops` lists the ops each plot's programs use.

A backend that refuses a request, raises, answers malformed values, or runs past its
time (:data:`SECONDS_PER_BACKEND`) leaves a gap in its series; :attr:`PlotData.gaps` says
why, and the report lists it. ``resverify check`` asks each backend in a process of its
own (:mod:`resverify.reports.plot_child`), so one that crashes costs only its series. A
backend without float64 is asked in float32 (its inputs rounded), and its series says so.
PNG output is byte-for-byte repeatable for the same seed, backends and versions: the
Software metadata stamp is dropped and nothing depends on the clock (unless a backend
runs out of time).
"""

from __future__ import annotations

import functools
import io
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from resverify.impl import NumpyBackend, Tensor
from resverify.impl.backend import Backend
from resverify.impl.ops import residual_add, scale
from resverify.spec.errors import BadResult
from resverify.spec.exact import evaluate
from resverify.spec.fixtures import STACK_W
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, ResultError, Value, check_form, storage_dtype

__all__ = ["SECONDS_PER_BACKEND", "add_series", "plot_data", "plot_summary", "render_plots"]

PLOT_NAMES = ("gradient_retention", "depth_law", "depth_law_jvp", "variance_growth",
              "norm_depth")
PLOT_MODES = {name: "jvp" if name == "depth_law_jvp" else "vjp" for name in PLOT_NAMES}
"""The mode a plot asks its backends in: only a backend claiming it gets a series."""
NORM_EPS = Fraction(1, 10**5)
Z_999 = 3.2905  # two-sided 99.9% normal quantile
SECONDS_PER_BACKEND = 120.0
"""Time one backend's requests may take over all the plots; its later requests are left
as gaps (a compiling backend may need it: one program of a hundred layers compiles for
seconds)."""
DEPTH_LAW_A = (-2.5, -0.5, 0.1, 1.0)
DEPTH_LAW_TANGENT = Fraction(3, 4)  # the input tangent t of the forward-mode depth law
STREAM_CHUNK = 5  # layers per request of the variance streams
SCALED_DEPTHS = (1, 4, 16, 64)  # 1/√L is exact: scale's α is 1/isqrt(L)
OFF_LINES = 1e-3
"""A backend's series whose largest relative deviation from the plot's lines exceeds this
is called off the lines in its legend: far above the rounding of float64 or float32
through these programs (under 1e-12 and 1e-5 here), and about what a log axis hides."""
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
_LEGEND_CHARS = 48
_LINES = ("-", "--", ":", "-.")
_EXACT = threading.local()  # whether plot_data computes the exact curves (this thread)
_POINTS = 25  # at most this many markers per curve and backend


@dataclass
class Curve:
    """One law's curve: the exact or reference values over ``x`` and each backend's."""

    label: str
    x: np.ndarray
    reference: np.ndarray
    panel: int = 0
    by_backend: dict[str, np.ndarray] = field(default_factory=dict)
    asked: np.ndarray | None = None
    """The points each backend is asked for (None: all of ``x``): the variance streams
    sample a backend every few layers only."""


@dataclass
class PlotData:
    """What one plot shows: its curves, the backends in it (its series, in order), the
    dtype each was asked in, why a backend's series has gaps, the mode the plot asks in,
    and the backends that do not claim that mode (not asked, no series)."""

    curves: list[Curve]
    series: list[str] = field(default_factory=list)
    dtypes: dict[str, str] = field(default_factory=dict)
    gaps: dict[str, str] = field(default_factory=dict)
    mode: str = "vjp"
    not_claimed: list[str] = field(default_factory=list)


class _Asker:
    """Sends one backend the plots' requests and keeps the first reason of any gap."""

    def __init__(self, backend: Backend, seconds: float,
                 stop: threading.Event | None = None) -> None:
        self.backend, self.seconds, self.stop = backend, seconds, stop
        self.spent = 0.0  # in this backend's run, over all the plots
        dtypes = backend.capabilities.dtypes
        self.dtype = next((d for d in ("float64", "float32") if d in dtypes), None)
        self.gap: str | None = None

    def _missing(self, reason: str) -> None:
        self.gap = self.gap or reason

    def grads(self, program: Program, inputs: Mapping[str, np.ndarray],
              cotangent: np.ndarray) -> Mapping[str, np.ndarray] | None:
        """The backend's gradients (as float64), or None with the reason kept."""
        answer = self.run(program, inputs, cotangent)
        return None if answer is None else answer[1]

    def tangent(self, program: Program, inputs: Mapping[str, np.ndarray],
                cotangent: np.ndarray, tangents: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The backend's output tangent ``J·t`` (as float64) for input ``tangents`` (forward
        mode), or None with the reason kept."""
        value = self._ask(program, inputs, cotangent, tangents)
        return None if value is None else np.asarray(value.tangent, dtype=np.float64)

    def run(self, program: Program, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
            ) -> tuple[np.ndarray, Mapping[str, np.ndarray]] | None:
        """The backend's output (in the dtype asked) and gradients (as float64), or None
        with the reason kept."""
        value = self._ask(program, inputs, cotangent)
        return None if value is None else (value.output, {
            k: np.asarray(v, dtype=np.float64) for k, v in value.grads.items()})

    def _ask(self, program: Program, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray,
             tangents: Mapping[str, np.ndarray] | None = None) -> Value | None:
        """The backend's well-formed answer, or None with the reason kept."""
        if self.dtype is None:
            self._missing("claims neither float64 nor float32")
            return None
        if self.spent > self.seconds:
            self._missing(f"its {self.seconds:g} s for the plots ran out")
            return None
        if self.stop is not None and self.stop.is_set():
            self._missing("the run stopped")
            return None
        store = storage_dtype(self.dtype)
        request = Request(program, {k: v.astype(store) for k, v in inputs.items()},
                          self.dtype, cotangent.astype(store),
                          None if tangents is None else
                          {k: v.astype(store) for k, v in tangents.items()})
        reason = self.backend.capabilities.covers(request)
        if reason is not None:
            self._missing(reason)
            return None
        began = time.monotonic()
        try:
            result = self.backend.run(request)
            if isinstance(result, ResultError):
                self._missing(f"{result.kind}: {result.message}")
                return None
            check_form(request, result)
        except BadResult as exc:
            self._missing(f"bad_result: {exc}")
            return None
        except Exception as exc:  # a plot must survive any backend
            self._missing(f"raised {type(exc).__name__}: {exc}")
            return None
        finally:
            self.spent += time.monotonic() - began
        return result


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes at 100 dpi with no software stamp (the same bytes each time:
    the report's plots and the blocks report's)."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


# --- programs -----------------------------------------------------------------------------


def tapped_stack(depth: int, residual: bool, width: int) -> Program:
    """``depth`` linear layers over ``x``, plain or residual, with a zero tap ``z_i`` added
    before layer ``i`` and at the output (``z_depth``): ``z̄_i`` is the cotangent that
    reached layer ``i``, so ``z̄_{depth-k}`` has passed through the last ``k`` layers."""
    inputs = [Input("x", (width,))] + [Input(f"w{i}", (width, width)) for i in range(depth)]
    inputs += [Input(f"z{i}", (width,)) for i in range(depth + 1)]
    nodes, prev = [], "x"
    for i in range(depth + 1):
        nodes.append(Node(f"t{i}", "add", (prev, f"z{i}")))
        prev = f"t{i}"
        if i == depth:
            break
        nodes.append(Node(f"f{i}", "linear", (prev, f"w{i}")))
        if residual:
            nodes.append(Node(f"h{i}", "residual_add", (prev, f"f{i}")))
        prev = f"h{i}" if residual else f"f{i}"
    return Program(tuple(inputs), tuple(nodes), prev)


def _taps(grads: Mapping[str, Any], depth: int,
          norm: Callable[[np.ndarray], float], cot_norm: float) -> np.ndarray:
    """``norm(z̄_{depth-k}) / cot_norm`` for k = 0..depth."""
    return np.array([norm(np.array([float(v) for v in grads[f"z{depth - k}"]]))
                     / cot_norm for k in range(depth + 1)])


def _max_norm(v: np.ndarray) -> float:
    return float(np.max(np.abs(v)))


def _two_norm(v: np.ndarray) -> float:
    return float(np.linalg.norm(v))


def _stack_values(x: np.ndarray, weights: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    values = {"x": x, **{f"w{i}": w for i, w in enumerate(weights)}}
    values.update({f"z{i}": np.zeros_like(x) for i in range(len(weights) + 1)})
    return values


def retention_curve(weights: list[np.ndarray], residual: bool,
                    backend: Backend | None = None) -> np.ndarray:
    """max|x̄| / max|ȳ| through k = 0..len(weights) layers (the last k), from one request on
    ``backend`` (the NumPy reference by default; NaN where it gave nothing).

    The max-norm keeps the S11 values exact: there x̄ = f^k ȳ with ȳ = [1, 1].
    """
    return _retention(_Asker(backend or NumpyBackend(), float("inf")), weights, residual)


def _retention(asker: _Asker, weights: Sequence[np.ndarray], residual: bool) -> np.ndarray:
    width, depth = weights[0].shape[0], len(weights)
    x = np.linspace(1.0, -1.0, width) if width > 2 else np.array([2.0, -1.0])
    cot = np.ones(width)
    grads = asker.grads(tapped_stack(depth, residual, width), _stack_values(x, weights), cot)
    return np.full(depth + 1, np.nan) if grads is None else _taps(grads, depth, _max_norm, 1.0)


def _exact_retention(weights: Sequence[np.ndarray], residual: bool) -> np.ndarray:
    width, depth = weights[0].shape[0], len(weights)
    x, cot = np.linspace(1.0, -1.0, width), np.ones(width)
    exact = evaluate(Request(tapped_stack(depth, residual, width), _stack_values(x, weights),
                             "float64", cot))
    assert exact.grads is not None, exact
    return _taps(exact.grads, depth, _max_norm, 1.0)


def _depth_law_program(depth: int, width: int = 4) -> Program:
    """``x_{i+1} = t_i + a ⊙ t_i`` with ``t_i = x_i + z_i`` (zero taps)."""
    inputs = [Input("x", (width,)), Input("a", (width,))] + [Input(f"z{i}", (width,))
                                                             for i in range(depth + 1)]
    nodes, prev = [], "x"
    for i in range(depth + 1):
        nodes.append(Node(f"t{i}", "add", (prev, f"z{i}")))
        prev = f"t{i}"
        if i < depth:
            nodes += [Node(f"f{i}", "mul", (prev, "a")), Node(f"h{i}", "residual_add",
                                                           (prev, f"f{i}"))]
            prev = f"h{i}"
    return Program(tuple(inputs), tuple(nodes), prev)


def _chunk_program(width: int, layers: int, alpha: Fraction | None) -> Program:
    """``layers`` layers of a residual stream from ``h``: ``h + u_i``, or ``h + α·u_i``."""
    inputs = [Input("h", (width,))] + [Input(f"u{i}", (width,)) for i in range(layers)]
    nodes, prev = [], "h"
    for i in range(layers):
        branch = f"u{i}"
        if alpha is not None:
            nodes.append(Node(f"c{i}", "scale", (branch,), alpha))
            branch = f"c{i}"
        nodes.append(Node(f"s{i}", "residual_add", (prev, branch)))
        prev = f"s{i}"
    return Program(tuple(inputs), tuple(nodes), prev)


def _stream(asker: _Asker, updates: Sequence[np.ndarray], alpha: Fraction | None,
            chunk: int) -> np.ndarray:
    """The sample variance of the stream after every ``chunk`` layers (0 at layer 0, NaN
    between), each chunk one request of the same program, fed with the backend's own
    previous output; NaN from a missing answer on."""
    width, depth = len(updates[0]), len(updates)
    out = np.full(depth + 1, np.nan)
    h, program = np.zeros(width), _chunk_program(width, chunk, alpha)
    for start in range(0, depth, chunk):
        values = {"h": h, **{f"u{i}": updates[start + i] for i in range(chunk)}}
        answer = asker.run(program, values, np.ones(width))
        if answer is None:
            break
        out[0] = 0.0
        h = answer[0]
        out[start + chunk] = np.var(h.astype(np.float64), ddof=1)
    return out


def norm_stack(placement: str, depth: int, width: int, taps: bool = False) -> Program:
    """``depth`` blocks ``h + F_l(LN(h))`` (pre) or ``LN(h + F_l(h))`` (post), ``F_l = ·W_l``;
    with ``taps``, a zero ``z_l`` is added before block ``l`` and at the output."""
    inputs = [Input("x", (width,))] + [Input(f"w{i}", (width, width)) for i in range(depth)]
    if taps:
        inputs += [Input(f"z{i}", (width,)) for i in range(depth + 1)]
    nodes, h = [], "x"
    for i in range(depth + 1):
        if taps:
            nodes.append(Node(f"t{i}", "add", (h, f"z{i}")))
            h = f"t{i}"
        if i == depth:
            break
        into = h
        if placement == "pre":
            nodes.append(Node(f"n{i}", "layer_norm", (h,), eps=NORM_EPS))
            into = f"n{i}"
        nodes += [Node(f"f{i}", "linear", (into, f"w{i}")),
                  Node(f"h{i}", "residual_add", (h, f"f{i}"))]
        h = f"h{i}"
        if placement == "post":
            nodes.append(Node(f"m{i}", "layer_norm", (h,), eps=NORM_EPS))
            h = f"m{i}"
    return Program(tuple(inputs), tuple(nodes), h)


def _norm_values(max_depth: int, seed: int, width: int, gain: float
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x, cot = rng.standard_normal(width), rng.standard_normal(width)
    weights = [rng.normal(0.0, gain / np.sqrt(width), (width, width)) for _ in range(max_depth)]
    return _stack_values(x, weights), cot


@functools.cache  # an exact stack costs a second or so; the curve depends on its arguments
def norm_gradient_curve(placement: str, max_depth: int, seed: int, width: int = 4,
                        gain: float = 1.0) -> tuple[float, ...]:
    """``‖x̄‖₂ / ‖ȳ‖₂`` through the last k = 0..max_depth blocks of one stack, exactly
    (seeded x, ȳ and W_l ~ N(0, gain²/d); gain 0: zero branches)."""
    values, cot = _norm_values(max_depth, seed, width, gain)
    exact = evaluate(Request(norm_stack(placement, max_depth, width, taps=True), values,
                             "float64", cot))
    assert exact.grads is not None, exact
    return tuple(_taps(exact.grads, max_depth, _two_norm, _two_norm(cot)).tolist())


def variance_path(seed: int, width: int = 768, depth: int = 100) -> np.ndarray:
    """Sample variance after each layer of one unscaled residual stream (S26)."""
    out = [0.0]
    stream = Tensor(np.zeros(width))
    for update in _updates(seed, width, depth):
        stream = residual_add(stream, Tensor(update))
        out.append(float(np.var(stream.value, ddof=1)))
    return np.array(out)


def _updates(seed: int, width: int, depth: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(width) for _ in range(depth)]


def _scaled_updates(seed: int, width: int, max_depth: int) -> dict[int, list[np.ndarray]]:
    """The updates of the scaled stack of each depth L = 1..max_depth (S27), in draw order."""
    rng = np.random.default_rng([seed, 1])
    return {depth: [rng.standard_normal(width) for _ in range(depth)]
            for depth in range(1, max_depth + 1)}


def scaled_finals(seed: int, width: int = 768, max_depth: int = 100) -> np.ndarray:
    """Final sample variance of stacks of depth L = 1..max_depth, each update scaled by 1/√L
    (S27)."""
    out = []
    for depth, updates in _scaled_updates(seed, width, max_depth).items():
        stream = Tensor(np.zeros(width))
        factor = 1.0 / np.sqrt(depth)
        for update in updates:
            stream = residual_add(stream, scale(Tensor(update), factor))
        out.append(float(np.var(stream.value, ddof=1)))
    return np.array(out)


def _chi2_band(dof: int) -> tuple[float, float]:
    """Wilson–Hilferty 99.9% quantiles of χ²_dof / dof (the sample variance over σ²)."""
    def quantile(z: float) -> float:
        c = 2.0 / (9.0 * dof)
        return float((1.0 - c + z * np.sqrt(c)) ** 3)
    return quantile(-Z_999), quantile(Z_999)


# --- data: the reference curves and each backend's series -----------------------------------


def _retention_data(seed: int, askers: Mapping[str, _Asker]) -> PlotData:
    s11 = [np.array(STACK_W)] * 12
    rng = np.random.default_rng(seed)
    width, depth, gain = 8, 20, 0.9
    weights = [rng.normal(0.0, gain / np.sqrt(width), (width, width)) for _ in range(depth)]
    curves = [
        Curve("S11 residual: 0.75^L", np.arange(13), 0.75 ** np.arange(13.0)),
        Curve("S11 plain: 0.25^L", np.arange(13), 0.25 ** np.arange(13.0)),
        Curve(f"random residual, gain {gain} (exact)", np.arange(depth + 1),
              _exact_retention(weights, True) if _EXACT.on else np.full(depth + 1, np.nan)),
        Curve(f"random plain, gain {gain} (exact)", np.arange(depth + 1),
              _exact_retention(weights, False) if _EXACT.on else np.full(depth + 1, np.nan)),
    ]
    for name, asker in askers.items():
        for curve, stack, residual in zip(curves, (s11, s11, weights, weights),
                                          (True, False, True, False), strict=True):
            curve.by_backend[name] = _retention(asker, stack, residual)
    return PlotData(curves)


def _depth_law_data(askers: Mapping[str, _Asker], depth: int = 30) -> PlotData:
    steps = np.arange(depth + 1)
    curves = [Curve(f"a = {a}", steps, np.array([float((1 + Fraction(a)) ** int(k))
                                                for k in steps]), panel=1) for a in DEPTH_LAW_A]
    values = {"x": np.ones(4), "a": np.array(DEPTH_LAW_A),
              **{f"z{i}": np.zeros(4) for i in range(depth + 1)}}
    for name, asker in askers.items():
        grads = asker.grads(_depth_law_program(depth), values, np.ones(4))
        for j, curve in enumerate(curves):
            curve.by_backend[name] = (np.full(depth + 1, np.nan) if grads is None else np.array(
                [grads[f"z{depth - k}"][j] for k in steps]))
    return PlotData(curves)


def _forward_depth_law_data(askers: Mapping[str, _Asker], depth: int = 30) -> PlotData:
    """``|J·t|`` through the last L blocks of the depth-law stack, every L from one request:
    block ``k`` of a ``4·(depth+1)``-wide stack carries the tangent ``t`` on its tap
    ``z_{depth-k}`` only (every other tangent is zero), so it passes ``k`` blocks."""
    steps, lanes = np.arange(depth + 1), len(DEPTH_LAW_A)
    curves = [Curve(f"a = {a}", steps, _exact_tangent_law(a, depth)) for a in DEPTH_LAW_A]
    width = lanes * (depth + 1)
    zero = np.zeros(width)
    values = {"x": np.ones(width), "a": np.tile(DEPTH_LAW_A, depth + 1),
              **{f"z{i}": zero for i in range(depth + 1)}}
    tangents = {"x": zero, "a": zero, **{f"z{depth - k}": _block(k, lanes, depth + 1)
                                          for k in range(depth + 1)}}
    program = _depth_law_program(depth, width)
    for name, asker in askers.items():
        tangent = asker.tangent(program, values, np.ones(width), tangents)
        for j, curve in enumerate(curves):
            curve.by_backend[name] = (np.full(depth + 1, np.nan) if tangent is None
                                      else tangent.reshape(depth + 1, lanes)[:, j])
    return PlotData(curves)


def _block(k: int, lanes: int, blocks: int) -> np.ndarray:
    """The tangent ``t`` in block ``k`` (of ``blocks`` blocks ``lanes`` wide), 0 elsewhere."""
    out = np.zeros(lanes * blocks)
    out[k * lanes:(k + 1) * lanes] = float(DEPTH_LAW_TANGENT)
    return out


def _exact_tangent_law(a: float, depth: int) -> np.ndarray:
    """``(1+a)^L·t`` for L = 0..depth from the spec's depth law, each value exact until
    it is rounded to float64 (NaN when ``plot_data`` leaves the exact curves out)."""
    if not _EXACT.on:
        return np.full(depth + 1, np.nan)
    import sympy as sp

    from resverify.spec.symbolic import SLOPE, depth_law

    slope, t = sp.Rational(Fraction(a)), sp.Rational(DEPTH_LAW_TANGENT)
    return np.array([float(depth_law(True, sp.Integer(k)).subs(SLOPE, slope) * t)
                     for k in range(depth + 1)])


def _variance_data(seed: int, askers: Mapping[str, _Asker], width: int = 768,
                   depth: int = 100) -> PlotData:
    layers = np.arange(depth + 1)
    grow = Curve("after layer l of one unscaled stream (law l·σ²)", layers,
                 variance_path(seed, width, depth))
    flat = Curve("final, each update scaled by 1/√L (law σ²)", np.arange(1, depth + 1),
                 scaled_finals(seed, width, depth), panel=1)
    grow.asked = layers % STREAM_CHUNK == 0
    flat.asked = np.isin(flat.x, SCALED_DEPTHS)
    updates = _updates(seed, width, depth)
    scaled = _scaled_updates(seed, width, max(SCALED_DEPTHS))
    for name, asker in askers.items():
        grow.by_backend[name] = _stream(asker, updates, None, STREAM_CHUNK)
        flat.by_backend[name] = np.full(depth, np.nan)
        for at in SCALED_DEPTHS:  # 1/√L = 1/isqrt(L) exactly
            flat.by_backend[name][at - 1] = _stream(
                asker, scaled[at], Fraction(1, math.isqrt(at)), min(at, 4))[-1]
    return PlotData([grow, flat])


def _norm_data(seed: int, askers: Mapping[str, _Asker], max_depth: int = 6,
               width: int = 4) -> PlotData:
    depths = np.arange(max_depth + 1)
    curves, setups = [], []
    for gain in (0.5, 1.0):
        for placement in ("pre", "post"):
            curves.append(Curve(f"{placement}-norm, gain {gain} (exact)", depths, np.array(
                norm_gradient_curve(placement, max_depth, seed, width, gain)) if _EXACT.on
                else np.full(max_depth + 1, np.nan)))
            setups.append((placement, gain))
    for name, asker in askers.items():
        for curve, (placement, gain) in zip(curves, setups, strict=True):
            values, cot = _norm_values(max_depth, seed, width, gain)
            grads = asker.grads(norm_stack(placement, max_depth, width, taps=True), values, cot)
            curve.by_backend[name] = (np.full(max_depth + 1, np.nan) if grads is None
                                      else _taps(grads, max_depth, _two_norm, _two_norm(cot)))
    return PlotData(curves)


def plot_data(seed: int, backends: Sequence[Backend] | None = None,
              stop: threading.Event | None = None, exact: bool = True,
              only: Sequence[str] = PLOT_NAMES) -> dict[str, PlotData]:
    """Every plot's data, by name: the reference curves and one series per backend (the
    NumPy reference when ``backends`` is None; none for an empty list), each named after
    its backend. Once ``stop`` is set, no backend is asked again (the rest are gaps).
    ``exact=False`` leaves out the exact interpreter's curves (NaN), which cost seconds:
    for a process that only computes a backend's series. The forward-mode plots ask last,
    so a backend whose time runs out (:data:`SECONDS_PER_BACKEND`) loses them first.
    ``only`` names the plots to compute (default: all)."""
    _EXACT.on = exact
    chosen = [NumpyBackend()] if backends is None else list(backends)
    askers = {str(b.name): _Asker(b, SECONDS_PER_BACKEND, stop) for b in chosen}
    builders: dict[str, Callable[[Mapping[str, _Asker]], PlotData]] = {
        "gradient_retention": lambda asked: _retention_data(seed, asked),
        "depth_law": _depth_law_data, "depth_law_jvp": _forward_depth_law_data,
        "variance_growth": lambda asked: _variance_data(seed, asked),
        "norm_depth": lambda asked: _norm_data(seed, asked)}
    data = {}
    for name in sorted(only, key=lambda n: PLOT_MODES[n] != "vjp"):  # forward mode last
        mode = PLOT_MODES[name]
        asked = {n: a for n, a in askers.items() if mode in a.backend.capabilities.modes}
        for asker in asked.values():
            asker.gap = None
        plot = data[name] = builders[name](asked)
        plot.mode, plot.series = mode, list(asked)
        plot.not_claimed = [n for n in askers if n not in asked]
        plot.dtypes = {n: a.dtype or "none" for n, a in asked.items()}
        plot.gaps = {n: a.gap for n, a in asked.items() if a.gap is not None}
    return {name: data[name] for name in PLOT_NAMES if name in data}


def plot_ops() -> dict[str, tuple[str, ...]]:
    """The ops each plot's programs use, sorted: all a backend's markers can show wrong
    (the same builders at their smallest sizes)."""
    programs = {
        "gradient_retention": [tapped_stack(1, True, 2), tapped_stack(1, False, 2)],
        "depth_law": [_depth_law_program(1)], "depth_law_jvp": [_depth_law_program(1)],
        "variance_growth": [_chunk_program(2, 1, None), _chunk_program(2, 1, Fraction(1, 2))],
        "norm_depth": [norm_stack(placement, 1, 2, taps=True) for placement in ("pre", "post")]}
    return {name: tuple(sorted({n.op for p in programs[name] for n in p.nodes}))
            for name in PLOT_NAMES}


@dataclass(frozen=True)
class Departure:
    """How far one backend's series lies from a plot's lines: the largest relative
    deviation ``|b - r| / |r|`` over the points it answered with a finite value (None when
    there is none), and at how many of the ``points`` where a line is finite it answered
    NaN or ±inf (or nothing: a gap)."""

    largest: float | None
    non_finite: int
    points: int


def departure(plot: PlotData, name: str) -> Departure:
    """Backend ``name``'s :class:`Departure` from the lines of ``plot`` (its own numbers
    against the exact or reference values)."""
    largest: float | None = None
    non_finite = points = 0
    for curve in plot.curves:
        values = curve.by_backend.get(name, np.full(len(curve.x), np.nan))
        asked = np.isfinite(curve.reference) & (True if curve.asked is None else curve.asked)
        points += int(asked.sum())
        shown = asked & np.isfinite(values)
        non_finite += int((asked & ~shown).sum())
        if shown.any():
            ref = curve.reference[shown]
            scale = np.where(ref != 0, np.abs(ref), 1.0)
            worst = float(np.max(np.abs(values[shown] - ref) / scale))
            largest = worst if largest is None else max(largest, worst)
    return Departure(largest, non_finite, points)


def plot_summary(data: Mapping[str, PlotData]) -> dict[str, dict[str, Any]]:
    """report.json's ``plots``: for each plot its mode, its series, the dtype each backend
    was asked in, the reason of each gap, and the backends that do not claim its mode."""
    return {name: {"mode": plot.mode, "series": list(plot.series), "dtypes": dict(plot.dtypes),
                   "gaps": dict(plot.gaps), "not_claimed": list(plot.not_claimed)}
            for name, plot in data.items()}


def series_document(data: Mapping[str, PlotData], name: str) -> dict[str, Any]:
    """One backend's part of ``data`` as JSON (NaN as null): what a plot process sends
    back (:mod:`resverify.reports.plot_child`); a plot whose mode the backend does not
    claim is ``{"not_claimed": mode}``."""
    return {plot: {"not_claimed": part.mode} if name in part.not_claimed else {
        "dtype": part.dtypes.get(name, "none"), "gap": part.gaps.get(name),
        "curves": {c.label: [None if np.isnan(v) else float(v) for v in c.by_backend[name]]
                   for c in part.curves}} for plot, part in data.items()}


def add_series(data: Mapping[str, PlotData], name: str,
               document: Mapping[str, Any] | None, gap: str | None = None) -> None:
    """Add backend ``name``'s series to ``data``, from its :func:`series_document`, or as
    gaps everywhere with the reason ``gap`` when there is no document."""
    for plot, part in data.items():
        sent = (document or {}).get(plot) or {}
        if sent.get("not_claimed"):
            part.not_claimed.append(name)
            continue
        curves = sent.get("curves") or {}
        part.series.append(name)
        part.dtypes[name] = str(sent.get("dtype") or "none")
        reason = sent.get("gap") if document is not None else gap
        if reason:
            part.gaps[name] = str(reason)
        for curve in part.curves:
            got = curves.get(curve.label)
            values = np.full(len(curve.x), np.nan)
            if isinstance(got, list) and len(got) == len(curve.x):
                values = np.array([np.nan if v is None else float(v) for v in got])
            curve.by_backend[name] = values


# --- figures ------------------------------------------------------------------------------


def _legend_text(name: str, plot: PlotData) -> str:
    """A backend's legend entry: its name as text (no mathtext, not hidden by a leading
    underscore), its dtype when not float64, and a note when its series has gaps."""
    text = name if len(name) <= _LEGEND_CHARS else name[:_LEGEND_CHARS - 1] + "…"
    if plot.dtypes.get(name, "float64") != "float64":
        text += f" ({plot.dtypes[name]})"
    if name in plot.gaps:
        text += " (gaps)"
    return _plain(text + _departure_text(departure(plot, name), name in plot.gaps))


def _departure_text(seen: Departure, gaps: bool) -> str:
    """``, max rel. dev. 2e-16`` (``…: off the lines`` past :data:`OFF_LINES`), and where
    the backend answered NaN or ±inf, unless a gap explains the missing points."""
    text = ""
    if seen.non_finite and not gaps:
        text += f", NaN/inf at {seen.non_finite} of {seen.points} points"
    if seen.largest is not None:
        text += f", max rel. dev. {seen.largest:.1g}"
        if seen.largest > OFF_LINES:
            text += ": off the lines"
    return text


def _plain(text: str) -> str:
    """Legend text shown as typed: no mathtext, not hidden by a leading underscore."""
    text = text.replace("$", r"\$")
    return "\u200b" + text if text.startswith("_") else text


def _not_claimed_entries(ax: Axes, plot: PlotData) -> None:
    """One legend line per backend that does not claim the plot's mode (no series)."""
    for name in plot.not_claimed:
        short = name if len(name) <= _LEGEND_CHARS else name[:_LEGEND_CHARS - 1] + "…"
        ax.plot([], [], ls="none", label=_plain(f"{short}: {plot.mode} not claimed, no series"))


def _series(axes: Sequence[Axes], plot: PlotData, log: bool) -> None:
    """Each backend's points on every curve: one marker and colour per backend, one legend
    entry per backend (on the panel of the first curve), and one per backend that does not
    claim the plot's mode."""
    from matplotlib import colormaps

    colors = colormaps["tab10"]
    for i, name in enumerate(plot.series):
        style = {"marker": _MARKERS[i % len(_MARKERS)], "color": colors(i % 10), "ls": "none",
                 "ms": max(3.0, 7.0 - i), "mfc": "none", "mew": 1.1}
        for n, curve in enumerate(plot.curves):
            values = curve.by_backend.get(name, np.full(len(curve.x), np.nan))
            if log:
                values = np.where(np.abs(values) > 0, np.abs(values), np.nan)
            shown = np.isfinite(values)
            axes[curve.panel].plot(curve.x[shown], values[shown],
                                   **style,  # type: ignore[arg-type]
                                   markevery=max(1, int(shown.sum()) // _POINTS),
                                   label=_legend_text(name, plot) if n == 0 else None)
    if plot.curves:
        _not_claimed_entries(axes[plot.curves[0].panel], plot)


def _references(axes: Sequence[Axes], plot: PlotData, log: bool) -> None:
    """The exact or reference curves: dark lines, one line style each."""
    for n, curve in enumerate(plot.curves):
        draw = axes[curve.panel].semilogy if log else axes[curve.panel].plot
        draw(curve.x, np.abs(curve.reference) if log else curve.reference,
             _LINES[n % len(_LINES)], lw=1.2, color="0.25", label=curve.label)


def _gradient_by_depth_figure(plot: PlotData, xlabel: str, ylabel: str, title: str) -> Figure:
    """A gradient's or a tangent's size against depth on a log scale: reference curves and
    each backend's series (the retention, norm and forward-mode depth-law plots)."""
    fig = Figure(figsize=(7.5, 4.6))
    ax = fig.add_subplot()
    _references([ax], plot, log=True)
    _series([ax], plot, log=True)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def _retention_figure(plot: PlotData) -> Figure:
    return _gradient_by_depth_figure(
        plot, "depth k (layers the cotangent passed through)", "max|x̄| / max|ȳ| (log scale)",
        "Gradient retention by depth: plain vs residual linear stacks")


def _depth_law_figure(plot: PlotData) -> Figure:
    fig = Figure(figsize=(9.5, 4.2))
    heat, lines = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    _depth_heatmap(fig, heat)
    _references([heat, lines], plot, log=True)
    _series([heat, lines], plot, log=True)
    for a_exact, value in ((Fraction(-1, 2), Fraction(1, 8)), (Fraction(1), Fraction(8))):
        assert (1 + a_exact) ** 3 == value
        lines.plot([3], [float(value)], "k*", ms=9)
        lines.annotate(f"S25: a={a_exact}, L=3 → {value}", (3, float(value)),
                       textcoords="offset points", xytext=(8, -3), fontsize=7)
    lines.axhline(1.0, color="black", lw=0.8, ls=":")
    lines.set_xlabel("depth L")
    lines.set_ylabel("|(1+a)^L| (log scale)")
    lines.set_title("d x_L / d x_0 = (1+a)^L")
    lines.grid(True, which="both", alpha=0.3)
    lines.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _forward_depth_law_figure(plot: PlotData) -> Figure:
    return _gradient_by_depth_figure(
        plot, "depth L (blocks the tangent passed through)", "|J·t| (log scale)",
        f"Forward mode: J·t = (1+a)^L·t through the depth-law stack, t = {DEPTH_LAW_TANGENT}")


def _depth_heatmap(fig: Figure, ax: Axes) -> None:
    a = np.linspace(-3.0, 1.0, 401)
    depth = np.arange(1, 51)
    with np.errstate(divide="ignore"):
        grid = depth[:, None] * np.log10(np.abs(1.0 + a))[None, :]
    mesh = ax.pcolormesh(a, depth, np.clip(grid, -6, 6), cmap="RdBu_r", vmin=-6, vmax=6,
                         shading="auto")
    fig.colorbar(mesh, ax=ax, label="log10 |(1+a)^L| (clipped at ±6)")
    for boundary in (-2.0, 0.0):
        ax.axvline(boundary, color="black", lw=1.5)
    ax.axvline(-1.0, color="black", lw=0.8, ls="--")
    box = {"facecolor": "white", "alpha": 0.85, "lw": 0}
    ax.text(0.05, 48, "|1+a| = 1", fontsize=8, va="top", bbox=box)
    ax.text(-1.95, 48, "|1+a| = 1", fontsize=8, va="top", bbox=box)
    ax.text(-0.95, 12, "a = -1: exactly 0", fontsize=8, rotation=90, bbox=box)
    ax.set_xlabel("a (branch F = a·x)")
    ax.set_ylabel("depth L")
    ax.set_title("|(1+a)^L|: shrinks inside, grows outside")


def _variance_figure(plot: PlotData, width: int = 768) -> Figure:
    low, high = _chi2_band(width - 1)
    fig = Figure(figsize=(9.5, 4.2))
    grow, flat = fig.subplots(1, 2)
    path, finals = plot.curves
    for ax, curve, law in ((grow, path, path.x * 1.0), (flat, finals, np.ones(len(finals.x)))):
        ax.fill_between(curve.x, law * low, law * high, color="tab:orange", alpha=0.3,
                        label="99.9% band of the sample variance")
        ax.plot(curve.x, law, color="black", lw=1, label="law")
        ax.set_ylabel("sample variance")
        ax.grid(True, alpha=0.3)
    grow.plot(path.x, path.reference, color="tab:gray", lw=1.2, label="reference simulation")
    flat.plot(finals.x, finals.reference, color="tab:gray", lw=1.2)
    _series([grow, flat], plot, log=False)
    depth = int(path.x[-1])
    grow.text(0.97, 0.05, f"after {depth} layers: sample std {np.sqrt(path.reference[-1]):.2f} "
              f"(law {np.sqrt(depth):g})", transform=grow.transAxes, ha="right", fontsize=8)
    grow.set_xlabel(f"layer l of one {depth}-layer stream")
    grow.set_title("without scaling: variance grows like l·σ²", fontsize=10)
    seen = [v for v in finals.by_backend.values() if np.isfinite(v).any()]
    top = max([1.6] + [1.1 * float(np.nanmax(v)) for v in seen])  # a wrong point stays in view
    flat.set_ylim(0.0, top)
    flat.set_xlabel("total depth L (each update scaled by 1/√L)")
    flat.set_title("with 1/√L scaling: the output variance stays σ²", fontsize=10)
    grow.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Variance growth by depth ({width} components, N(0,1) updates)", fontsize=11)
    fig.tight_layout()
    return fig


def _norm_figure(plot: PlotData) -> Figure:
    return _gradient_by_depth_figure(
        plot, "depth k (blocks the cotangent passed through)", "‖x̄‖₂ / ‖ȳ‖₂ (log scale)",
        "Input gradient by depth: pre-norm vs post-norm layer_norm stacks")


FIGURES: dict[str, Callable[[PlotData], Figure]] = {
    "gradient_retention": _retention_figure, "depth_law": _depth_law_figure,
    "depth_law_jvp": _forward_depth_law_figure,
    "variance_growth": _variance_figure, "norm_depth": _norm_figure}


def render_plots(seed: int, backends: Sequence[Backend] | None = None,
                 data: Mapping[str, PlotData] | None = None) -> dict[str, bytes]:
    """Every plot as PNG bytes, by name (see :data:`PLOT_NAMES`): the reference curves and
    one series per backend (the NumPy reference when none is given); ``data`` when it was
    computed already (:func:`plot_data`)."""
    data = data if data is not None else plot_data(seed, backends)
    return {name: png(FIGURES[name](data[name])) for name in PLOT_NAMES}
