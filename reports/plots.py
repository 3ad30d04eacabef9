"""The report's four plots, drawn with matplotlib's Agg canvas (no pyplot, no display).

Every plotted number comes from the reference implementation or an exact formula:

* ``gradient_retention.png``: the input gradient's size relative to the cotangent's (max
  norm), by depth, for plain and residual linear stacks run through
  :class:`impl.NumpyBackend`: the S11 stack ``W = diag(-1/4, -1/4)`` (plain ``(-1/4)^L``,
  residual ``(3/4)^L``) and a few stacks with seeded random weights.
* ``depth_law.png``: ``|(1+a)^L|`` over ``a`` and ``L`` (exact powers), with the
  ``|1+a| = 1`` boundary (``a = 0`` and ``a = -2``) marked and the S25 values shown.
* ``variance_growth.png``: seeded S26/S27 simulations (768 components, unit normal updates
  merged with :func:`resverify.impl.ops.residual_add`):
  left, the sample variance after each layer of
  one unscaled 100-layer stack against the law ``l·σ²``; right, the final sample variance of
  stacks of depth L = 1..100 whose updates are scaled by ``1/√L``, against ``σ²``. Both with
  a 99.9% band for a sample variance of 768 values (Wilson–Hilferty quantiles of χ²).

* ``norm_depth.png``: the input gradient's size relative to the cotangent's (2-norm), by
  depth, for pre-norm stacks ``h + F(LN(h))`` and post-norm stacks ``LN(h + F(h))`` with
  seeded random linear branches, computed by the exact interpreter (every value an exact
  rational or an enclosure 2**-200 wide): the pre-norm identity path keeps the gradient's
  size, the post-norm stack passes it through one normalization Jacobian per block.

PNG output is byte-for-byte repeatable for the same seed and versions: the Software
metadata stamp is dropped and nothing depends on the clock.
"""

from __future__ import annotations

import functools
import io
from fractions import Fraction

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from resverify.impl import NumpyBackend, Tensor
from resverify.impl.ops import residual_add, scale
from resverify.spec.exact import evaluate
from resverify.spec.fixtures import STACK_W, stack_program
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Value

__all__ = ["PLOT_NAMES", "depth_law", "gradient_retention", "norm_depth", "norm_gradient_curve",
           "norm_stack", "render_plots", "retention_curve", "scaled_finals", "variance_growth",
           "variance_path"]

PLOT_NAMES = ("gradient_retention", "depth_law", "variance_growth", "norm_depth")
NORM_EPS = Fraction(1, 10**5)
Z_999 = 3.2905  # two-sided 99.9% normal quantile


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def retention_curve(weights: list[np.ndarray], residual: bool) -> np.ndarray:
    """max|x̄₀| / max|ȳ| for depth 0..len(weights), each depth one request on the backend.

    The max-norm keeps the S11 values exact: there x̄₀ = f^L ȳ with ȳ = [1, 1].
    """
    backend = NumpyBackend()
    width = weights[0].shape[0]
    x = np.linspace(1.0, -1.0, width) if width > 2 else np.array([2.0, -1.0])
    cot = np.ones(width)
    out = []
    for depth in range(len(weights) + 1):
        values: dict[str, np.ndarray] = {"x": x}
        values.update({f"w{i}": weights[i] for i in range(depth)})
        request = Request(stack_program(depth, residual, width), values, "float64", cot)
        result = backend.run(request)
        assert isinstance(result, Value), result
        out.append(np.max(np.abs(result.grads["x"])) / np.max(np.abs(cot)))
    return np.array(out)


def gradient_retention(seed: int) -> Figure:
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    s11 = [np.array(STACK_W)] * 12
    depths = np.arange(13)
    ax.semilogy(depths, retention_curve(s11, True), "o-", color="tab:blue",
                label="S11 residual: 0.75^L")
    ax.semilogy(depths, retention_curve(s11, False), "o--", color="tab:red",
                label="S11 plain: |-0.25|^L")
    rng = np.random.default_rng(seed)
    width, depth = 8, 30
    for gain, shade in ((0.5, 0.55), (0.9, 0.85)):
        weights = [rng.normal(0.0, gain / np.sqrt(width), (width, width)) for _ in range(depth)]
        for residual, color in ((True, "Blues"), (False, "Reds")):
            curve = retention_curve(weights, residual)
            kind = "residual" if residual else "plain"
            ax.semilogy(np.arange(depth + 1), curve, "-", lw=1.2,
                        color=_shade(color, shade), label=f"random {kind}, gain {gain}")
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("max|x̄₀| / max|ȳ| (log scale)")
    ax.set_title("Gradient retention by depth: plain vs residual stacks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def _shade(cmap: str, level: float) -> tuple[float, float, float, float]:
    from matplotlib import colormaps

    rgba = colormaps[cmap](level)
    return (float(rgba[0]), float(rgba[1]), float(rgba[2]), float(rgba[3]))


def depth_law() -> Figure:
    fig = Figure(figsize=(9.5, 4.0))
    heat, lines = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    _depth_heatmap(fig, heat)
    for a, color in ((-2.5, "tab:purple"), (-0.5, "tab:red"), (0.1, "tab:green"),
                     (1.0, "tab:blue")):
        depth = np.arange(0, 31)
        lines.semilogy(depth, np.abs(1.0 + a) ** depth, color=color, label=f"a = {a}")
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


def variance_path(seed: int, width: int = 768, depth: int = 100) -> np.ndarray:
    """Sample variance after each layer of one unscaled residual stream (S26)."""
    rng = np.random.default_rng(seed)
    stream = Tensor(np.zeros(width))
    out = [0.0]
    for _ in range(depth):
        stream = residual_add(stream, Tensor(rng.standard_normal(width)))
        out.append(float(np.var(stream.value, ddof=1)))
    return np.array(out)


def scaled_finals(seed: int, width: int = 768, max_depth: int = 100) -> np.ndarray:
    """Final sample variance of stacks of depth L = 1..max_depth, each update scaled by 1/√L
    (S27)."""
    rng = np.random.default_rng([seed, 1])
    out = []
    for depth in range(1, max_depth + 1):
        stream = Tensor(np.zeros(width))
        factor = 1.0 / np.sqrt(depth)
        for _ in range(depth):
            stream = residual_add(stream, scale(Tensor(rng.standard_normal(width)), factor))
        out.append(float(np.var(stream.value, ddof=1)))
    return np.array(out)


def _chi2_band(dof: int) -> tuple[float, float]:
    """Wilson–Hilferty 99.9% quantiles of χ²_dof / dof (the sample variance over σ²)."""
    def quantile(z: float) -> float:
        c = 2.0 / (9.0 * dof)
        return float((1.0 - c + z * np.sqrt(c)) ** 3)
    return quantile(-Z_999), quantile(Z_999)


def variance_growth(seed: int, width: int = 768, depth: int = 100) -> Figure:
    low, high = _chi2_band(width - 1)
    fig = Figure(figsize=(9.5, 4.0))
    grow, flat = fig.subplots(1, 2)
    layers = np.arange(depth + 1)
    path = variance_path(seed, width, depth)
    _band_plot(grow, layers, path, layers * 1.0, (low, high), "law l·σ²")
    grow.text(0.97, 0.05, f"after {depth} layers: sample std {np.sqrt(path[-1]):.2f} "
              f"(law {np.sqrt(depth):g})", transform=grow.transAxes, ha="right", fontsize=8)
    grow.set_xlabel("layer l of one 100-layer stack")
    grow.set_title("without scaling: variance grows like l·σ²", fontsize=10)
    total = np.arange(1, depth + 1)
    _band_plot(flat, total, scaled_finals(seed, width, depth), np.ones(depth), (low, high),
               "law σ² = 1")
    flat.set_ylim(0.0, 1.6)
    flat.set_xlabel("total depth L (each update scaled by 1/√L)")
    flat.set_title("with 1/√L scaling: the output variance stays σ²", fontsize=10)
    fig.suptitle(f"Variance growth by depth ({width} components, N(0,1) updates, seed {seed})",
                 fontsize=11)
    fig.tight_layout()
    return fig


def _band_plot(ax: Axes, x: np.ndarray, sample: np.ndarray, law: np.ndarray,
               band: tuple[float, float], law_label: str) -> None:
    ax.fill_between(x, law * band[0], law * band[1], color="tab:orange", alpha=0.3,
                    label="99.9% band of the sample variance")
    ax.plot(x, law, color="black", lw=1, label=law_label)
    ax.plot(x, sample, color="tab:blue", lw=1.2, label="simulation (impl residual_add)")
    ax.set_ylabel("sample variance")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def norm_stack(placement: str, depth: int, width: int) -> Program:
    """``depth`` blocks ``h + F_l(LN(h))`` (pre) or ``LN(h + F_l(h))`` (post), ``F_l = ·W_l``."""
    inputs = [Input("x", (width,))] + [Input(f"w{i}", (width, width)) for i in range(depth)]
    nodes, h = [], "x"
    for i in range(depth):
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


@functools.cache  # exact stacks cost seconds; the curve depends on its arguments alone
def norm_gradient_curve(placement: str, max_depth: int, seed: int, width: int = 4,
                        gain: float = 1.0) -> tuple[float, ...]:
    """``‖x̄‖₂ / ‖ȳ‖₂`` for depth 0..max_depth, exactly (seeded x, ȳ and W_l ~ N(0, gain²/d);
    gain 0: zero branches)."""
    rng = np.random.default_rng(seed)
    x, cot = rng.standard_normal(width), rng.standard_normal(width)
    weights = [rng.normal(0.0, gain / np.sqrt(width), (width, width)) for _ in range(max_depth)]
    out = []
    for depth in range(max_depth + 1):
        values = {"x": x, **{f"w{i}": weights[i] for i in range(depth)}}
        exact = evaluate(Request(norm_stack(placement, depth, width), values, "float64", cot))
        assert exact.grads is not None
        grad = np.array([float(v) for v in exact.grads["x"]])
        out.append(float(np.linalg.norm(grad) / np.linalg.norm(cot)))
    return tuple(out)


def norm_depth(seed: int, max_depth: int = 6) -> Figure:
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    depths = np.arange(max_depth + 1)
    for gain, level in ((0.5, 0.55), (1.0, 0.85)):
        for placement, cmap, style in (("pre", "Blues", "o-"), ("post", "Oranges", "s--")):
            curve = norm_gradient_curve(placement, max_depth, seed, gain=gain)
            ax.semilogy(depths, curve, style, color=_shade(cmap, level), lw=1.2,
                        label=f"{placement}-norm, gain {gain}")
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel("‖x̄‖₂ / ‖ȳ‖₂ (exact, log scale)")
    ax.set_title("Input gradient by depth: pre-norm vs post-norm layer_norm stacks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def render_plots(seed: int) -> dict[str, bytes]:
    """Every plot as PNG bytes, by name (see :data:`PLOT_NAMES`)."""
    return {
        "gradient_retention": _png(gradient_retention(seed)),
        "depth_law": _png(depth_law()),
        "variance_growth": _png(variance_growth(seed)),
        "norm_depth": _png(norm_depth(seed)),
    }
