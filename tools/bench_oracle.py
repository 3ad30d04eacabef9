"""Bench section ``oracle``: verifying one residual block against the exact specification.

The block is ``y = x + α·F(x)`` with ``F(x) = x W + b`` (linear) or ``tanh(x W + b)``, in
float64, ``α = 1/3``, at widths 16, 64, 256 and 1024 and batches 1 and 32. Verifying means
deciding, for the output and every element of every gradient (x, W, b) for one random
cotangent, whether the reference backend's value is within its error budget of the exact
value: with the fast oracle (:func:`resverify.spec.enclosure.verify`) and, where it takes
seconds rather than minutes, with the exact interpreter. Each is a cost in units of the
reference's own forward and backward pass, timed interleaved with it.

Beside it, on the same block: ``torch.autograd.gradcheck`` (float64, its default
tolerances ``atol=1e-5, rtol=1e-3``, perturbation ``eps=1e-6``), full (every Jacobian
element, by finite differences) and ``fast_mode=True`` (one random projection). Full
gradcheck is run where it takes under a minute; rows that need torch say so when it is
missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from tools.bench_timing import Row, interleaved, skipped

SECTION = "oracle"
ALPHA = Fraction(1, 3)
TARGET_FULL, TARGET_FAST = 100.0, 10.0


def block(width: int, batch: int, branch: str) -> Any:
    """The request: the block, seeded random x, W (scaled by 1/√width), b and cotangent."""
    from resverify.spec.ir import Input, Node, Program
    from resverify.spec.request import Request

    rng = np.random.default_rng(width * 100 + batch)
    f = [Node("t", "tanh", ("zb",))] if branch == "tanh" else []
    nodes = (Node("z", "linear", ("x", "w")), Node("zb", "add", ("z", "b")), *f,
             Node("s", "scale", (f[0].name if f else "zb",), ALPHA),
             Node("y", "residual_add", ("x", "s")))
    program = Program((Input("x", (batch, width)), Input("w", (width, width)),
                       Input("b", (width,))), nodes, "y")
    values = {"x": rng.standard_normal((batch, width)),
              "w": rng.standard_normal((width, width)) / math.sqrt(width),
              "b": rng.standard_normal(width)}
    return Request(program, values, "float64", rng.standard_normal((batch, width)))


def _answer(request: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    from resverify.impl import resolve_backend

    result = resolve_backend("numpy").run(request)
    output, grads = getattr(result, "output", None), getattr(result, "grads", None)
    if output is None or grads is None:
        raise AssertionError(f"the reference refused the block: {result}")
    return output, dict(grads)


def _reference(request: Any) -> Callable[[], object]:
    from resverify.impl import resolve_backend

    backend = resolve_backend("numpy")
    return lambda: backend.run(request)


def _exact(request: Any, output: np.ndarray, grads: dict[str, np.ndarray]) -> list[Any]:
    from resverify.spec.budget import error_budget
    from resverify.spec.exact import evaluate

    exact = evaluate(request)
    return error_budget(request, exact=exact).misses(exact, output, grads)


def _gradcheck(request: Any, branch: str, fast: bool) -> Callable[[], object] | None:
    try:
        import torch
    except ImportError:
        return None
    x, w, b = (torch.tensor(request.inputs[k], dtype=torch.float64, requires_grad=True)
               for k in ("x", "w", "b"))
    alpha = float(ALPHA)

    def f(x: Any, w: Any, b: Any) -> Any:
        z = x @ w + b
        return x + alpha * (torch.tanh(z) if branch == "tanh" else z)

    return lambda: torch.autograd.gradcheck(f, (x, w, b), fast_mode=fast)


def _tightness(verdict: Any, output: np.ndarray) -> str:
    """The budget's median relative size, to set beside gradcheck's tolerances."""
    bound = np.broadcast_to(verdict.budget.output, output.shape)
    rel = np.median(bound / np.maximum(np.abs(output), 1e-300))
    return f"our bound: median {rel:.1e} of |y| (gradcheck: atol 1e-5, rtol 1e-3)"


def case_rows(width: int, batch: int, branch: str, quick: bool) -> list[Row]:
    """Every row of one block: fast oracle (and exact, small widths) against the
    reference, and gradcheck full and fast against the fast oracle."""
    from resverify.spec.enclosure import verify

    request = block(width, batch, branch)
    output, grads = _answer(request)
    verdict = verify(request, output, grads)
    if verdict.misses or verdict.exact_path:
        raise AssertionError(f"the reference failed or the block was not enclosed: {verdict}")
    name = f"{branch} w={width} b={batch}"
    fns: dict[str, Callable[[], object]] = {
        "reference": _reference(request), "fast": lambda: verify(request, output, grads)}
    if width <= (16 if quick else 64):
        fns["exact"] = lambda: _exact(request, output, grads)
    full_ok = width * width * batch <= 256 * 256
    for mode, wanted in (("gradcheck fast", True), ("gradcheck full", full_ok)):
        check = _gradcheck(request, branch, fast=mode.endswith("fast")) if wanted else None
        if check is not None:
            fns[mode] = check
    timing = interleaved(fns, rounds=2 if quick or width >= 1024 else 3, target=0.05)
    t = timing.seconds
    rows = [Row(SECTION, f"{name}: fast oracle", "reference fwd+bwd", "fast oracle",
                t["reference"], t["fast"], t["fast"] / t["reference"], unit="x baseline",
                note=f"{verdict.decided_exactly} elements decided with Fractions; "
                     + _tightness(verdict, output))]
    if "exact" in t:
        rows.append(Row(SECTION, f"{name}: exact interpreter", "exact interpreter",
                        "fast oracle", t["exact"], t["fast"], timing.ratio("exact", "fast")))
    rows += _gradcheck_rows(name, t, width == 256 and batch == 1 and branch == "tanh")
    return rows


def _gradcheck_rows(name: str, t: dict[str, float], targeted: bool) -> list[Row]:
    rows = []
    if "gradcheck full" in t:
        ratio = t["gradcheck full"] / t["fast"]
        rows.append(Row(SECTION, f"{name}: vs gradcheck full", "gradcheck full",
                        "fast oracle", t["gradcheck full"], t["fast"], ratio,
                        f">= {TARGET_FULL:g}x faster" if targeted else "",
                        ratio >= TARGET_FULL if targeted else None))
    if "gradcheck fast" in t:
        ratio = t["fast"] / t["gradcheck fast"]
        rows.append(Row(SECTION, f"{name}: vs gradcheck fast_mode", "gradcheck fast_mode",
                        "fast oracle", t["gradcheck fast"], t["fast"], ratio,
                        f"<= {TARGET_FAST:g}x baseline" if targeted else "",
                        ratio <= TARGET_FAST if targeted else None, unit="x baseline"))
    return rows


def rows(quick: bool = False) -> list[Row]:
    """Every block size (``quick``: width 16, batch 1 only)."""
    out = []
    widths = (16,) if quick else (16, 64, 256, 1024)
    for width in widths:
        for batch in (1,) if quick else (1, 32):
            for branch in ("linear", "tanh"):
                out += case_rows(width, batch, branch, quick)
    if _gradcheck(block(2, 1, "tanh"), "tanh", fast=True) is None:
        out.append(skipped(SECTION, "gradcheck rows", "torch is not installed"))
    return out
