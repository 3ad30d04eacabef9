"""The paths law: the same block under torch.compile and on its library's inference fast path.

Why a law of its own: every other law judges the eager path with grad mode on, which is not
what a deployed block runs. ``nn.TransformerEncoderLayer`` in eval under ``no_grad`` or
``inference_mode`` (no hooks, heads even, ...) calls one fused kernel,
``torch._transformer_encoder_layer_fwd``; ``nn.MultiheadAttention`` calls
``torch._native_multi_head_attention`` there; ``torch.compile`` (inductor) generates its own
kernels. A skip dropped or a norm swapped on such a path is invisible to the eager laws.

What is judged, per path and example (eval; drop paths at probability 0):

- *zero branch, bitwise*: with every site's ``zero`` parameters zeroed, the path's output is
  eager's zeroed output, element for element. Both sums are ``x + 0``, exact on any path, so
  this needs no budget where the zero-branch map is the identity (pre-norm blocks) or where
  the path runs eager's own norm kernels (the fast path's fused kernel calls
  ``at::layer_norm``). Under torch.compile a post-norm block's zero-branch map is inductor's
  own layer norm, which is not eager's float (measured 1 to 2 ulp apart on
  ``nn.TransformerEncoderLayer(norm_first=False)``): there the difference is a figure, not a
  verdict (``max_zero_diff[compile]``).
- *live branch*: reported, not judged. A budget of a few ``u (|x| + |F|)`` would be sound
  only if both paths computed the same float F and differed in the one rounding of ``x + F``;
  the paths compute F with other kernels (fused attention, inductor's reductions in another
  order), and how far two orders of a reduction land apart is bounded by the sum of the
  terms' magnitudes inside F, not by ``|F|``: under cancellation no multiple of ``u |F|``
  bounds it. The figures are the largest ``|y_path - y_eager|`` (``max_diff[path]``) and the
  same in units of ``u (|x| + |y - x|)``, one rounding of the block's whole update added to
  its input (``max_units[path]``).

A path is claimed only when it ran: the fast path when a fused kernel was dispatched (a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` counts the calls without changing
them; ``fused[fastpath]`` is how many), torch.compile when a graph inductor compiled was
executed (a counting wrapper around the inductor backend; ``max_graphs[compile]``).
Otherwise the example is unjudged with the reason (no fused kernel for this block, no C++
compiler). Compile runs the block with grad mode on: under ``no_grad`` dynamo would trace
the fused inference kernel itself and inductor would only call it.

Why compile once: inductor takes 4 to 20 s per graph of the encoder layer on two busy cores.
One compiled copy of the block is kept per recipe, dtype and mode; each example's parameters
are copied into it, so inductor sees the same graph with new inputs, and the sizes are
dynamic from the first call, so a graph serves every batch and length above 1 (dynamo gives
a size of 1 a graph of its own: up to four for the drawn batch and length).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from resverify.blocks.recipe import Recipe
from resverify.blocks.trace import (
    UNIT_ROUNDOFF,
    Case,
    Unjudged,
    first_difference,
    no_drop,
    zeroed,
)

__all__ = []

FUSED_OPS = ("_transformer_encoder_layer_fwd", "_native_multi_head_attention")
"""torch's inference-only fused kernels: their dispatch is the evidence of the fast path."""


class Dispatched(TorchDispatchMode):
    """Counts dispatches of the ops named (by overload packet, e.g. :data:`FUSED_OPS`); runs
    every op as it came."""

    def __init__(self, names: Collection[str]) -> None:
        super().__init__()
        self.names = frozenset(names)
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name in self.names:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def fused_calls(recipe: Recipe, module: nn.Module, x: torch.Tensor,
                context: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Counter[str]]:
    """The block run as inference runs it (``inference_mode``), and the fused kernels that
    ran, by name."""
    counter = Dispatched(FUSED_OPS)
    with torch.inference_mode(), counter:
        y = recipe.run(module, x, context)
    return y.clone(), counter.calls


class CountingInductor:
    """The inductor backend, counting the runs of the graphs it compiled."""

    def __init__(self) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.inductor = lookup_backend("inductor")
        self.runs = 0
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        compiled: Any = self.inductor(gm, example_inputs)
        self.graphs += 1

        def run(*args: Any, **kwargs: Any) -> Any:  # called as dynamo calls ``compiled``
            self.runs += 1
            return compiled(*args, **kwargs)

        if getattr(compiled, "_boxed_call", False):
            run._boxed_call = True  # type: ignore[attr-defined]
        return run


@dataclass
class _Compiled:
    recipe: Recipe  # kept so the cache's id key is not reused
    template: nn.Module
    run: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]
    backend: CountingInductor


_COMPILED: dict[tuple[int, str, str], _Compiled] = {}
RECOMPILE_LIMIT = 256
"""Dynamo's limit on graphs per compiled function, raised while the law runs: every block's
compiled copy shares one function's cache, and a size of 1 is a graph of its own."""


def _compiled(case: Case) -> _Compiled:
    key = (id(case.recipe), case.dtype, case.mode)
    entry = _COMPILED.get(key)
    if entry is None or entry.recipe is not case.recipe:
        template = copy.deepcopy(case.pristine)
        backend = CountingInductor()
        recipe = case.recipe

        def run(x: torch.Tensor, context: dict[str, torch.Tensor]) -> torch.Tensor:
            return recipe.run(template, x, context)

        compiled = torch.compile(run, backend=backend, dynamic=True)
        entry = _Compiled(recipe, template, compiled, backend)
        _COMPILED[key] = entry
    return entry


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Around a run of a compiled block: torch's deprecations of its own internals, raised
    while inductor imports them, are not the block's (under -W error they would fail every
    compile), and a failure of inductor (they have no common root) is :class:`Unjudged`
    with its first two lines."""
    try:
        with warnings.catch_warnings():
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings("ignore", category=category, module=r"torch(\.|$)")
            yield
    except Exception as exc:
        said = " ".join([line.strip() for line in str(exc).splitlines() if line.strip()][:2])
        raise Unjudged(f"torch.compile failed: {type(exc).__name__}: {said}") from exc


def _run_compiled(case: Case, module: nn.Module) -> tuple[torch.Tensor, float]:
    """``module``'s parameters in the compiled copy, run with grad mode on (as training runs
    it, so torch's inference fast path is not what inductor compiles); with the number of
    graphs inductor has compiled for this recipe, dtype and mode so far."""
    entry = _compiled(case)
    entry.template.load_state_dict(module.state_dict())
    x = case.inputs.x.detach().clone()
    ctx = {k: v.detach().clone() for k, v in case.inputs.context.items()}
    before = entry.backend.runs
    with compiling(), no_drop(entry.template, case.recipe), torch.enable_grad(), \
            torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        y = entry.run(x, ctx).detach()
    if entry.backend.runs == before:
        raise Unjudged("torch.compile ran no compiled graph (it fell back to eager)")
    return y, float(entry.backend.graphs)


def _run_fast(case: Case, module: nn.Module) -> tuple[torch.Tensor, float]:
    """The block under inference mode, with how many fused kernels ran."""
    if case.mode != "eval":
        raise Unjudged("torch's inference fast paths are taken in eval only")
    x = case.inputs.x.detach().clone()
    with no_drop(module, case.recipe):
        y, calls = fused_calls(case.recipe, module, x, dict(case.inputs.context))
    if not calls:
        raise Unjudged(f"no fused inference kernel ({', '.join(FUSED_OPS)}) ran for this "
                       "block in eval under inference_mode: it has no fast path, or its "
                       "conditions are not met")
    return y, float(sum(calls.values()))


RUNS: dict[str, tuple[str, Callable[[Case, nn.Module], tuple[torch.Tensor, float]]]] = {
    "compile": ("max_graphs", _run_compiled),
    "fastpath": ("fused", _run_fast),
}
"""Each path: the name of its evidence figure, and how it runs a block."""
PATHS = tuple(RUNS)
"""The paths the law can judge besides eager, by the name the ``paths=`` option takes."""


def _eager(case: Case, module: nn.Module) -> torch.Tensor:
    with no_drop(module, case.recipe), torch.enable_grad():
        return case.recipe.run(module, case.inputs.x.detach().clone(),
                               case.inputs.context).detach()


def _identity_map(case: Case) -> bool:
    """Whether the block with every branch 0 is the identity (pre-norm, plain skips)."""
    return all(s.norm != "post" and s.activation is None and s.shortcut == "identity"
               for s in case.recipe.sites)


def _abs_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.to(torch.float64) - b.to(torch.float64)).abs()


def _units(case: Case, diff: torch.Tensor, y: torch.Tensor) -> float:
    """``diff`` in units of ``u (|x| + |y - x|)`` (of ``u |y|`` when the shapes differ)."""
    u = UNIT_ROUNDOFF[case.dtype]
    x, y64 = case.inputs.x.to(torch.float64), y.to(torch.float64)
    mag = x.abs() + (y64 - x).abs() if x.shape == y.shape else y64.abs()
    unit = u * mag + float(torch.finfo(y.dtype).tiny)
    return float((diff / unit).max())


def _judge_zero(case: Case, path: str, names: list[str]) -> dict[str, float]:
    """The zeroed block on ``path`` against eager's zeroed block: bitwise, or a figure where
    the path's norms are not eager's (a post-norm block under torch.compile)."""
    __tracebackhide__ = True
    evidence, run = RUNS[path]
    zero = zeroed(case.module, names)
    y0, seen = run(case, zero)
    e0 = _eager(case, zero)
    figures = {f"{evidence}[{path}]": seen}
    if y0.shape != e0.shape:
        case.fail("paths", f"{path}: zeroed, y has shape {list(y0.shape)}, eager "
                  f"{list(e0.shape)}")
    if path == "compile" and not _identity_map(case):
        figures[f"max_zero_diff[{path}]"] = float(_abs_diff(y0, e0).max())
        return figures
    diff = first_difference(y0, e0)
    if diff:
        rule = "the identity" if _identity_map(case) else "eager's zero-branch map"
        case.fail("paths", f"{path}: zeroing {', '.join(names)}: y{diff}: with every "
                  f"branch 0 the block on this path is {rule}, bitwise", None,
                  (case.inputs.x, torch.zeros_like(case.inputs.x)))
    return figures


def _judge_path(case: Case, path: str, names: list[str]) -> dict[str, float]:
    __tracebackhide__ = True
    figures = _judge_zero(case, path, names)
    y, _ = RUNS[path][1](case, case.module)
    e = _eager(case, case.module)
    if y.shape != e.shape:
        case.fail("paths", f"{path}: y has shape {list(y.shape)}, eager {list(e.shape)}")
    d = _abs_diff(y, e)
    figures[f"max_diff[{path}]"] = float(d.max())
    figures[f"max_units[{path}]"] = _units(case, d, e)
    return figures


def paths(case: Case) -> dict[str, float]:
    """On each path asked for (``torch.compile``, the library's inference fast path), with
    every branch zeroed the block is eager's zero-branch map bitwise; with a live branch the
    largest difference from eager is a figure (see the module doc for why not a verdict)."""
    __tracebackhide__ = True
    asked = tuple(case.extra.get("paths", ()))
    if not asked:
        raise Unjudged("no path asked for (paths=...)")
    names = [p for site in case.recipe.sites for p in site.zero]
    figures: dict[str, float] = {}
    for path in asked:
        figures.update(_judge_path(case, path, names))
    return figures
