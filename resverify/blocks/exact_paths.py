"""Which path is wrong: the same block run on several paths, each judged against one exact answer.

Why: when eager and a compiled, fused or other attention path disagree, comparing them
with allclose cannot say which is wrong. Here the block is traced once
(:func:`resverify.blocks.exact.judge_module`, which judges the eager run) and every other
path is run on the *same* parameters, input and cotangent; its output, and its gradients
where the path has a backward, are judged element by element against the exact value of
the same traced program within the same budget. A path outside its budget is wrong on
these inputs, whatever the others say; eager is never taken as right.

The paths (:data:`PATHS`):

- ``fastpath``: the block in eval under ``inference_mode``, where ``nn.TransformerEncoderLayer``
  and ``nn.MultiheadAttention`` call torch's fused inference kernels (the output only: the
  path has no backward). Judged only when a fused kernel was dispatched.
- ``compile``: ``torch.compile`` with inductor, run with grad mode on, its backward run with
  the same cotangent: output and every gradient. Judged only when a compiled graph ran.
- ``sdpa-math`` and ``sdpa-flash``: the block with ``torch.nn.attention.sdpa_kernel``
  forcing scaled-dot-product attention's math or flash backend (on CPU the flash kernel is
  ``_scaled_dot_product_flash_attention_for_cpu``): output and every gradient. Judged only
  when the block called ``scaled_dot_product_attention``.

The budget is the whole program's (:func:`resverify.spec.enclosure.verify`): it charges
each sum and dot product ``gamma_n`` of its terms' magnitudes, which holds for any order of
summation, so a path that sums in another order (fused attention, inductor's reductions)
is held to the same bound and needs no allowance of its own; a path that accumulated in a
narrower dtype than the request declares would be outside it.

Beside the verdict, each path reports the fraction of output elements that differ from the
eager output (a difference in the dtype is at least one ulp): where the output is the
residual stream, that is how often the path's stream is not eager's.

The claim is pointwise, as every exact verdict: these parameters, input and cotangent.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from resverify.blocks.exact import (
    Judgement,
    element_ratios,
    judge_module,
    leaves_of,
    recipe_module,
)
from resverify.blocks.laws_paths import FUSED_OPS, CountingInductor, Dispatched, compiling
from resverify.blocks.lower import Lowered
from resverify.blocks.recipe import Recipe
from resverify.blocks.tightness import Tightness, numpy_of
from resverify.blocks.trace import TORCH_DTYPES, Unjudged
from resverify.spec.budget import Miss
from resverify.spec.enclosure import verify
from resverify.spec.errors import UsageError
from resverify.spec.request import Request

__all__: list[str] = []


@dataclass(frozen=True)
class Ran:
    """A path's answers: its output, its gradients by input name (None: the path has no
    backward) and the evidence it ran (``"2 fused kernels"``)."""

    output: torch.Tensor
    grads: Mapping[str, torch.Tensor] | None
    evidence: str


@dataclass(frozen=True)
class PathJudgement:
    """One path's answers judged against the traced program's exact answer."""

    path: str
    unjudged: str = ""
    """Why the path was not judged (it did not run here); empty when judged."""
    evidence: str = ""
    misses: tuple[Miss, ...] = ()
    elements: int = 0
    total: int = 0
    """Elements of what was judged; those beyond :attr:`elements` have no finite bound."""
    tightness: Tightness = field(default_factory=lambda: Tightness(0.0, 0.0, 0.0))
    gradients: bool = False
    """Whether the path's gradients were judged (a forward-only path: the output only)."""
    differs: float = 0.0
    """The fraction of output elements not bitwise the eager output."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.misses

    @property
    def verdict(self) -> str:
        """``unjudged`` (the path did not run here), ``fail``, ``partly judged`` or ``pass``."""
        if self.unjudged:
            return "unjudged"
        if self.misses:
            return "fail"
        return "partly judged" if self.elements < self.total else "pass"

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it (an exact judgement's ``paths``)."""
        return {"path": self.path, "verdict": self.verdict, "reason": self.unjudged,
                "evidence": self.evidence, "elements": self.elements, "total": self.total,
                "gradients": self.gradients, "differs": self.differs,
                "tightness": self.tightness.as_doc(), "outside": len(self.misses),
                "misses": [str(m) for m in self.misses[:5]], "time_seconds": self.seconds,
                "line": str(self).splitlines()[0]}

    def __str__(self) -> str:
        if self.unjudged:
            return f"path {self.path}: not judged, {self.unjudged}"
        verdict = {"fail": f"FAIL ({len(self.misses)} outside the budget)",
                   "partly judged": "PARTLY JUDGED"}.get(self.verdict, self.verdict)
        what = "the output and every gradient" if self.gradients else "the output"
        counted = f"{self.elements}" if self.elements == self.total else \
            f"{self.elements} of {self.total}"
        head = (f"path {self.path}: {verdict}, {counted} elements of {what}, "
                f"{self.tightness}; {self.evidence}; output not bitwise eager's on "
                f"{self.differs:.1%} of elements [{self.seconds:.2f} s]")
        return "\n".join([head, *(f"  {m}" for m in self.misses[:3])])


@dataclass(frozen=True)
class Paths:
    """The eager judgement and every other path's, on the same traced program and inputs."""

    eager: Judgement
    paths: tuple[PathJudgement, ...]

    @property
    def passed(self) -> bool:
        return self.eager.passed and all(p.passed for p in self.paths)

    def __str__(self) -> str:
        return "\n".join([str(self.eager), *(f"  {p}" for p in self.paths)])


@dataclass(frozen=True)
class _Setup:
    """What every path runs on: the block in the dtype, its inputs, the cotangent, and the
    trace judged (which names the inputs and the state the program reads)."""

    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    cotangent: torch.Tensor
    lowered: Lowered


def _backward(setup: _Setup, model: nn.Module, call: Callable[..., torch.Tensor]
              ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``call`` on fresh leaves (:func:`~resverify.blocks.exact.leaves_of`), its backward
    with the cotangent: output and gradients."""
    lowered = setup.lowered
    leaves = leaves_of(model, setup.inputs, lowered)
    output = call(*leaves[: len(setup.inputs)])
    output.backward(setup.cotangent)
    names = [*lowered.user_inputs, *lowered.state]
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t))
             for n, t in zip(names, leaves, strict=True) if n not in lowered.untrained}
    return output.detach(), grads


def _run_fastpath(setup: _Setup) -> Ran:
    model = copy.deepcopy(setup.model).eval()
    counter = Dispatched(FUSED_OPS)
    with torch.inference_mode(), counter:
        output = model(*[t.clone() for t in setup.inputs])
    calls = sum(counter.calls.values())
    if not calls:
        raise Unjudged(f"no fused inference kernel ({', '.join(FUSED_OPS)}) ran: the block "
                       "has no fast path, or its conditions are not met")
    return Ran(output.clone(), None, f"{calls} fused kernel call{'s' * (calls != 1)}")


def _run_compile(setup: _Setup) -> Ran:
    model = copy.deepcopy(setup.model)
    backend = CountingInductor()
    compiled = torch.compile(model, backend=backend)
    with compiling():
        output, grads = _backward(setup, model, compiled)
    if not backend.runs:
        raise Unjudged("torch.compile ran no compiled graph (it fell back to eager)")
    return Ran(output, grads, f"{backend.graphs} graph{'s' * (backend.graphs != 1)} "
               "compiled by inductor")


SDPA_KERNELS = {"MATH": "_safe_softmax",
                "FLASH_ATTENTION": "_scaled_dot_product_flash_attention_for_cpu"}
"""The op whose dispatch shows that ``scaled_dot_product_attention`` ran on each backend:
the math backend's own softmax (its other ops are the usual matmuls), the CPU flash kernel."""


def _sdpa(backend_name: str) -> Callable[[_Setup], Ran]:
    def run(setup: _Setup) -> Ran:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        model = copy.deepcopy(setup.model)
        counter = Dispatched([SDPA_KERNELS[backend_name]])
        try:
            with sdpa_kernel([getattr(SDPBackend, backend_name)]), counter:
                output, grads = _backward(setup, model, model)
        except RuntimeError as exc:  # "No available kernel": the backend cannot take it
            said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise Unjudged(f"the {backend_name.lower()} backend did not run: {said}") from exc
        calls = sum(counter.calls.values())
        if not calls:
            raise Unjudged("the block calls no scaled_dot_product_attention")
        return Ran(output, grads, f"{calls} {SDPA_KERNELS[backend_name]} call"
                   f"{'s' * (calls != 1)}")

    return run


def _run_hf_sdpa(setup: _Setup) -> Ran:
    """The Hugging Face block with its config's attention implementation set to ``sdpa``."""
    model = copy.deepcopy(setup.model)
    configs: dict[int, Any] = {}
    for m in model.modules():
        config = getattr(m, "config", None)
        if hasattr(config, "_attn_implementation"):
            configs[id(config)] = config
    if not configs:
        raise Unjudged("not a Hugging Face block (no config with an attention implementation)")
    for config in configs.values():
        config._attn_implementation = "sdpa"
    counter = Dispatched(SDPA_KERNELS.values())
    with counter:
        output, grads = _backward(setup, model, model)
    calls = sum(counter.calls.values())
    if not calls:
        raise Unjudged("attn_implementation='sdpa' called no scaled_dot_product_attention")
    ran = ", ".join(f"{n} {c}" for n, c in sorted(counter.calls.items()))
    return Ran(output, grads, f"attn_implementation='sdpa': {ran}")


RUNS: dict[str, Callable[[_Setup], Ran]] = {
    "fastpath": _run_fastpath,
    "compile": _run_compile,
    "sdpa-math": _sdpa("MATH"),
    "sdpa-flash": _sdpa("FLASH_ATTENTION"),
    "hf-sdpa": _run_hf_sdpa,
}
PATHS = tuple(RUNS)
"""The paths besides eager, by the name ``--paths`` takes."""


def _judge_ran(path: str, ran: Ran, request: Request, eager: torch.Tensor,
               skipped: Sequence[str]) -> PathJudgement:
    output = numpy_of(ran.output)
    grads = {n: numpy_of(g) for n, g in (ran.grads or {}).items()}
    verdict = verify(request, output, grads)
    keep = [m for m in verdict.misses if m.where.startswith("output")
            or (ran.grads is not None
                and not any(m.where.startswith(f"grad[{n}]") for n in skipped))]
    actual = {"output": output, **{f"grad[{n}]": g for n, g in grads.items()}}
    used = element_ratios(actual, verdict.nearest, verdict.budget)
    differs = float((ran.output != eager).float().mean()) if ran.output.shape == eager.shape \
        else 1.0
    total = sum(v.size for v in actual.values())
    return PathJudgement(path, "", ran.evidence, tuple(keep), used.size, total,
                         Tightness.of(used), ran.grads is not None, differs)


def _setup(module: nn.Module, judgement: Judgement) -> _Setup:
    request, lowered = judgement.request, judgement.lowered
    assert request is not None and lowered is not None
    kind = TORCH_DTYPES[judgement.dtype]
    inputs = tuple(_tensor(request.inputs[n], kind) for n in lowered.user_inputs)
    return _Setup(copy.deepcopy(module).to(kind), inputs, _tensor(request.cotangent, kind),
                  lowered)


def _tensor(values: np.ndarray, kind: torch.dtype) -> torch.Tensor:
    """A request's values as a tensor of ``kind`` (exact: they were rounded to it)."""
    return torch.from_numpy(np.array(values)).to(kind)


def judge_paths(module: nn.Module, example_args: Sequence[torch.Tensor], paths: Sequence[str],
                dtype: str = "float64", seed: int = 0) -> Paths:
    """:func:`~resverify.blocks.exact.judge_module` on ``module`` (the eager path), then each
    of ``paths`` run on the same parameters, input and cotangent and judged against the same
    exact answer and budget; a path that did not run here is named with the reason."""
    unknown = [p for p in paths if p not in RUNS]
    if unknown:
        raise UsageError(f"unknown path(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(PATHS)}")
    eager = judge_module(module, example_args, dtype, seed)
    assert eager.request is not None
    setup = _setup(module, eager)
    with torch.enable_grad():  # grad mode on: eager, not the inference fast path
        eager_output = copy.deepcopy(setup.model)(*setup.inputs).detach()
    skipped = (*eager.constants, *eager.untrained)
    judged = []
    for path in paths:
        started = time.perf_counter()
        try:
            ran = RUNS[path](setup)
        except Unjudged as exc:
            judged.append(PathJudgement(path, str(exc)))
            continue
        one = _judge_ran(path, ran, eager.request, eager_output, skipped)
        judged.append(replace(one, seconds=time.perf_counter() - started))
    return Paths(eager, tuple(judged))


def judge_recipe_paths(recipe: Recipe, paths: Sequence[str], dtype: str, seed: int = 0
                       ) -> Paths:
    """:func:`judge_paths` on a recipe's block as :func:`~resverify.blocks.exact.judge_recipe`
    builds and calls it."""
    module, examples = recipe_module(recipe, dtype, seed)
    return judge_paths(module, examples, paths, dtype, seed)
