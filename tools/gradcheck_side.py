"""``torch.autograd.gradcheck`` beside the exact judgement on the same float64 cases.

Why: gradcheck is what a PyTorch user reaches for to test a backward; the exact judgement
(:func:`resverify.blocks.exact.judge_module`) claims to catch what it cannot. Each planted
backward bug of ``tests/blocks/planted_rows.py`` (one per kind of ATen row, inside
``x + ½·op(x W1) W2``) and its correct twin is judged both ways on the same module, input
and parameters in float64: gradcheck with its defaults (central differences, ``eps=1e-6``,
``atol=1e-5``, ``rtol=1e-3``, every input and parameter a checked input) and the exact
judgement (every element of the output and every gradient against the exact oracle). The
slope bugs are run at two sizes, a factor ``1 + 2⁻³⁰`` and ``1 + 2⁻¹⁰``; a layout bug moves
elements (its size is not a parameter). Prints a Markdown table: per case, caught or not by
each, and the seconds each took (on a shared machine: read the ratio, not the seconds).

``--speed 64,128`` times both instead on the correct residual MLP ``x + ½·tanh(x W1) W2``
(``tests.blocks.exact_modules.ResidualMLP``) at batch 32 and each width, full gradcheck
over the input and both weights against the judgement of every element, in one run.
Not part of the test suite (it measures resverify against a baseline):

    .venv/bin/python tools/gradcheck_side.py [--kinds exp,permute] [--speed 64,128,256]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script

OFFS = (2.0**-30, 2.0**-10)
"""The slope bugs' relative sizes."""


def full_gradcheck(module: Any, x: Any) -> tuple[bool, float]:
    """gradcheck of ``module`` over its input and every parameter (defaults), and seconds."""
    import torch
    from torch.func import functional_call

    names = [n for n, _ in module.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in module.named_parameters())

    def f(h: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return functional_call(module, dict(zip(names, ps, strict=True)), (h,))

    start = time.perf_counter()
    passed = torch.autograd.gradcheck(f, (x.detach().clone().requires_grad_(True), *params),
                                      raise_exception=False)
    return bool(passed), time.perf_counter() - start


def _case(kind: str, right: bool, off: float) -> tuple[str, str, float, str, float]:
    import torch

    from resverify.blocks.exact import judge_module
    from tests.blocks.planted_rows import Planted

    module = Planted(kind, right=right, off=off).double()
    judged = judge_module(module, (torch.zeros(4, 8),), "float64", seed=4)
    # the judge's own draw of x, so both judge the same input
    x = torch.randn((4, 8), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    passed, spent = full_gradcheck(module, x)
    caught = "caught" if not judged.passed else "passed"
    return (caught, f"{len(judged.misses)} elements" if not judged.passed else "",
            sum(judged.seconds.values()), "caught" if not passed else "passed", spent)


SLOPES = ("square", "exp", "silu", "gelu_erf", "gelu_tanh")
"""The kinds whose planted backward is the slope off by a factor ``1 + off``; in the others
the bug moves elements, a sign or a count (its size is not a parameter)."""


def _cases(kinds: Sequence[str]) -> list[tuple[str, bool, float]]:
    out: list[tuple[str, bool, float]] = []
    for kind in kinds:
        out.append((kind, True, 0.0))
        out += [(kind, False, off) for off in (OFFS if kind in SLOPES else OFFS[:1])]
    return out


def _speed(width: int) -> str:
    import torch

    from resverify.blocks.exact import judge_module
    from tests.blocks.exact_modules import ResidualMLP

    module = ResidualMLP(width).double()
    judged = judge_module(module, (torch.zeros(32, width),), "float64", seed=0)
    x = torch.randn((32, width), generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    passed, spent = full_gradcheck(module, x)
    judge_s = judged.seconds["judge"]
    return (f"| {width} | {judged.elements} | {judged.verdict} | {judge_s:.2f} | "
            f"{judged.seconds['trace']:.2f} | {'pass' if passed else 'FAIL'} | {spent:.1f} | "
            f"{spent / judge_s:.0f}x |")


def main(argv: Sequence[str] | None = None) -> int:
    from tests.blocks.planted_rows import KINDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    parser.add_argument("--speed", default="", help="comma-separated widths: time both on "
                        "the correct residual MLP at batch 32 instead")
    args = parser.parse_args(argv)
    if args.speed:
        print("| width | elements | exact judgement | judge s | trace s (one-off) | "
              "gradcheck | gradcheck s | gradcheck / judge |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for width in (int(w) for w in args.speed.split(",")):
            print(_speed(width), flush=True)
        return 0
    kinds = [k for k in args.kinds.split(",") if k] or sorted(KINDS)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {sorted(KINDS)}")
    print("| kind | backward | exact judgement | s | gradcheck | s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, right, off in _cases(kinds):
        caught, misses, judge_s, grad, grad_s = _case(kind, right, off)
        what = "right" if right else (f"planted (off 2^{round(math.log2(off))})"
                                      if kind in SLOPES else "planted")
        print(f"| {kind} | {what} | {caught} {misses} | {judge_s:.2f} | {grad} | "
              f"{grad_s:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
