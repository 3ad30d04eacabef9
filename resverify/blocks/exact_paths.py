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
  ``_scaled_dot_product_flash_attention_for_cpu``), a Hugging Face block's attention set to
  ``sdpa`` first (its default, ``eager``, calls none): output and every gradient. Judged only
  when the block called ``scaled_dot_product_attention``.
- ``hf-sdpa``: a Hugging Face block with its attention set to ``sdpa``, the backend left to
  torch (on CPU the flash kernel where it applies).

The budget is the whole program's (:func:`resverify.spec.enclosure.verify`): it charges
each sum and dot product ``gamma_n`` of its terms' magnitudes, which holds for any order of
summation, so a path that sums in another order (inductor's reductions) is held to the same
bound; a path that accumulated in a narrower dtype than the request declares would be
outside it. Reordering is not all a fused kernel does: the CPU flash kernel's online softmax
rescales its running sums across blocks of keys, roundings no budget of the traced program
charges, so the flash path has its own rule, judged only where each flash call took its
keys in one block (:mod:`resverify.blocks.attention_kernels`). Its backward recomputes the
weights from the logsumexp (``exp(x - lse)``), whose argument's rounding grows with
``|lse|``: judged here at the sizes drawn, not claimed for large logits.

Beside the verdict, each path reports the stream law (:mod:`.exact_stream`): the
fraction of *stream* elements (the block's output and, where the recipe names them, the
inputs of the later sites' pre-norms) not bitwise the eager path's, and whether what each
norm consumes is the declared stream dtype (the path fails otherwise, naming the site).
The fraction of output elements not bitwise eager's is kept beside it.

The claim is pointwise, as every exact verdict: these parameters, input and cotangent.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from resverify.blocks.attention_kernels import SDPA_KERNELS, Attention, hf_sdpa
from resverify.blocks.exact import (
    Judgement,
    element_ratios,
    judge_module,
    leaves_of,
    recipe_module,
)
from resverify.blocks.exact_stream import (
    OUTPUT,
    Seen,
    Stream,
    differs,
    dtype_failure,
    seen_with,
    watched,
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
    stream: Seen
    """The stream as the path stored it (:mod:`.exact_stream`)."""
    consumed: str = ""
    """Where the path's norm consumed a value its stream does not store, found by the run
    (the compile path's); empty when none was."""


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
    stream_differs: float = 0.0
    """The fraction of stream elements (:attr:`stream_sites`) not bitwise eager's."""
    stream_elements: int = 0
    stream_sites: tuple[str, ...] = ()
    """Where the stream was observed on this path: the norms that ran, then ``output``."""
    stream_failure: str = ""
    """Where a norm consumed (or the block returned) another dtype than the declared
    stream's; empty when none did. The path fails on it."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.misses and not self.stream_failure

    @property
    def verdict(self) -> str:
        """``unjudged`` (the path did not run here), ``fail``, ``partly judged`` or ``pass``."""
        if self.unjudged:
            return "unjudged"
        if self.misses or self.stream_failure:
            return "fail"
        return "partly judged" if self.elements < self.total else "pass"

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it (an exact judgement's ``paths``)."""
        return {"path": self.path, "verdict": self.verdict, "reason": self.unjudged,
                "evidence": self.evidence, "elements": self.elements, "total": self.total,
                "gradients": self.gradients, "differs": self.differs,
                "stream": {"differs": self.stream_differs, "elements": self.stream_elements,
                           "sites": list(self.stream_sites), "failure": self.stream_failure},
                "tightness": self.tightness.as_doc(), "outside": len(self.misses),
                "misses": [str(m) for m in self.misses[:5]], "time_seconds": self.seconds,
                "line": str(self).splitlines()[0]}

    def __str__(self) -> str:
        if self.unjudged:
            return f"path {self.path}: not judged, {self.unjudged}"
        outside = f"{len(self.misses)} outside the budget" if self.misses else \
            "the stream law"
        verdict = {"fail": f"FAIL ({outside})",
                   "partly judged": "PARTLY JUDGED"}.get(self.verdict, self.verdict)
        what = "the output and every gradient" if self.gradients else "the output"
        counted = f"{self.elements}" if self.elements == self.total else \
            f"{self.elements} of {self.total}"
        head = (f"path {self.path}: {verdict}, {counted} elements of {what}, "
                f"{self.tightness}; {self.evidence}; {self.stream_text()} "
                f"[{self.seconds:.2f} s]")
        failed = [self.stream_failure] if self.stream_failure else []
        return "\n".join([head, *(f"  {m}" for m in [*failed, *self.misses[:3]])])

    def stream_text(self) -> str:
        """``stream not bitwise eager's on 12.5% of 256 elements (block.ln_2, output);
        output on 9.4%``."""
        return (f"stream not bitwise eager's on {self.stream_differs:.1%} of "
                f"{self.stream_elements} elements ({', '.join(self.stream_sites)}); output on "
                f"{self.differs:.1%}")


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
    stream: Stream


def _backward(setup: _Setup, model: nn.Module, call: Callable[..., torch.Tensor],
              evidence: str = "", watch: bool = True) -> Ran:
    """``call`` on fresh leaves (:func:`~resverify.blocks.exact.leaves_of`), its stream
    watched (``watch``; else the output alone), its backward with the cotangent: output,
    gradients and stream."""
    lowered = setup.lowered
    leaves = leaves_of(model, setup.inputs, lowered)
    with watched(model, setup.stream if watch else replace(setup.stream, norms=())) as captured:
        output = call(*leaves[: len(setup.inputs)])
    output.backward(setup.cotangent)
    names = [*lowered.user_inputs, *lowered.state]
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t))
             for n, t in zip(names, leaves, strict=True) if n not in lowered.untrained}
    return Ran(output.detach(), grads, evidence, seen_with(captured, output))


def _fused(setup: _Setup, stream: Stream) -> tuple[Seen, Counter[str]]:
    """The block in eval under ``inference_mode``, ``stream``'s norms watched: its stream
    (the output last) and the fused kernels that ran, by name."""
    model = copy.deepcopy(setup.model).eval()
    counter = Dispatched(FUSED_OPS)
    with torch.inference_mode(), counter, watched(model, stream) as captured:
        output = model(*[t.clone() for t in setup.inputs])
    return seen_with(captured, output.clone()), counter.calls


def _run_fastpath(setup: _Setup) -> Ran:
    """The fused path as deployed, judged; its stream watched in a second run where the
    hooks leave the same fused kernels running (a hook on a submodule takes
    ``nn.TransformerEncoderLayer`` off its whole-layer kernel), else at the output only."""
    seen, calls = _fused(setup, replace(setup.stream, norms=()))
    count = sum(calls.values())
    if not count:
        raise Unjudged(f"no fused inference kernel ({', '.join(FUSED_OPS)}) ran: the block "
                       "has no fast path, or its conditions are not met")
    ran = Ran(seen.values[OUTPUT], None, f"{count} fused kernel call{'s' * (count != 1)}",
              seen)
    if not setup.stream.norms:
        return ran
    watched_seen, watched_calls = _fused(setup, setup.stream)
    if watched_calls == calls:
        return replace(ran, stream=watched_seen)
    other = ", ".join(f"{n} {c}" for n, c in sorted(watched_calls.items())) or "none"
    return replace(ran, evidence=f"{ran.evidence}; a hook on the stream's norms changes the "
                   f"fused kernels ({other}), so the stream is observed at the output only")


def _run_compile(setup: _Setup) -> Ran:
    """The compiled block as deployed (no hook: a hook's copy of the stream makes inductor
    store it, which changes what its fused kernels read), judged; then compiled again with
    the stream watched, for the stream law (:func:`_stored`)."""
    model = copy.deepcopy(setup.model)
    backend = CountingInductor()
    compiled = torch.compile(model, backend=backend)
    with compiling():
        ran = _backward(setup, model, compiled, watch=False)
    if not backend.runs:
        raise Unjudged("torch.compile ran no compiled graph (it fell back to eager)")
    evidence = f"{backend.graphs} graph{'s' * (backend.graphs != 1)} compiled by inductor"
    if not setup.stream.norms:
        return replace(ran, evidence=evidence)
    watched_model = copy.deepcopy(setup.model)
    with compiling():
        seen = _backward(setup, watched_model, torch.compile(watched_model)).stream
    moved, consumed = _stored(setup.stream, ran.output, seen)
    return replace(ran, evidence=f"{evidence}; storing the stream changes its output on "
                   f"{moved:.1%} of elements", stream=seen, consumed=consumed)


def _stored(stream: Stream, deployed: torch.Tensor, seen: Seen) -> tuple[float, str]:
    """The compile path's stream law: the fraction of output elements that change when the
    stream at the norms is stored (watched), and, where they change and the stream is
    narrower than the float32 inductor computes in, the failure: the norm consumed the sum
    before its rounding to the stream's dtype (``emulate_precision_casts`` off)."""
    stored = seen.values[OUTPUT]
    moved = float((stored != deployed).float().mean()) if stored.shape == deployed.shape \
        else 1.0
    if not moved or torch.finfo(stream.dtype).bits >= 32:
        return moved, ""
    return moved, (f"under torch.compile the output changes on {moved:.1%} of elements when "
                   f"the stream at the input of the pre-norm {', '.join(stream.norms)} is "
                   f"stored: the fused kernel feeds the norm the sum before it is rounded to "
                   f"the declared {stream.dtype} (inductor's emulate_precision_casts is off), "
                   "a value the stream does not store")


def _sdpa(backend_name: str) -> Callable[[_Setup], Ran]:
    def run(setup: _Setup) -> Ran:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        model = copy.deepcopy(setup.model)
        hf = " (attn_implementation='sdpa')" if hf_sdpa(model) else ""
        counter = Attention([SDPA_KERNELS[backend_name]])
        try:
            with sdpa_kernel([getattr(SDPBackend, backend_name)]), counter:
                ran = _backward(setup, model, model)
        except RuntimeError as exc:  # "No available kernel": the backend cannot take it
            said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise Unjudged(f"the {backend_name.lower()} backend did not run: {said}") from exc
        calls = sum(counter.calls.values())
        if not calls:
            raise Unjudged("the block calls no scaled_dot_product_attention")
        counter.flash_rule()
        return replace(ran, evidence=f"{calls} {SDPA_KERNELS[backend_name]} call"
                       f"{'s' * (calls != 1)}{hf}")

    return run


def _run_hf_sdpa(setup: _Setup) -> Ran:
    """The Hugging Face block with its config's attention implementation set to ``sdpa``."""
    model = copy.deepcopy(setup.model)
    if not hf_sdpa(model):
        raise Unjudged("not a Hugging Face block (no config with an attention implementation)")
    counter = Attention(SDPA_KERNELS.values())
    with counter:
        ran = _backward(setup, model, model)
    if not counter.calls:
        raise Unjudged("attn_implementation='sdpa' called no scaled_dot_product_attention")
    counter.flash_rule()
    return replace(ran, evidence=f"attn_implementation='sdpa': {counter.evidence()}")


RUNS: dict[str, Callable[[_Setup], Ran]] = {
    "fastpath": _run_fastpath,
    "compile": _run_compile,
    "sdpa-math": _sdpa("MATH"),
    "sdpa-flash": _sdpa("FLASH_ATTENTION"),
    "hf-sdpa": _run_hf_sdpa,
}
PATHS = tuple(RUNS)
"""The paths besides eager, by the name ``--paths`` takes."""


def _judge_ran(path: str, ran: Ran, request: Request, eager: Seen, stream: Stream,
               skipped: Sequence[str]) -> PathJudgement:
    output = numpy_of(ran.output)
    grads = {n: numpy_of(g) for n, g in (ran.grads or {}).items()}
    # a path that computes no gradients is judged on its output alone
    unjudged = skipped if ran.grads is not None else request.program.input_names
    verdict = verify(request, output, grads, unjudged=unjudged)
    actual = {"output": output, **{f"grad[{n}]": g for n, g in grads.items()}}
    used = element_ratios(actual, verdict.nearest, verdict.budget)
    out_differs, _ = differs(seen_with({}, ran.output), eager)
    stream_differs, elements = differs(ran.stream, eager)
    total = sum(v.size for v in actual.values())
    return PathJudgement(path, "", ran.evidence, tuple(verdict.misses), used.size, total,
                         Tightness.of(used), ran.grads is not None, out_differs,
                         stream_differs, elements, tuple(ran.stream.values),
                         dtype_failure(ran.stream, stream) or ran.consumed)


def _setup(module: nn.Module, judgement: Judgement, stream: Stream) -> _Setup:
    request, lowered = judgement.request, judgement.lowered
    assert request is not None and lowered is not None
    kind = TORCH_DTYPES[judgement.dtype]
    inputs = tuple(_tensor(request.inputs[n], kind) for n in lowered.user_inputs)
    return _Setup(copy.deepcopy(module).to(kind), inputs, _tensor(request.cotangent, kind),
                  lowered, stream)


def _tensor(values: np.ndarray, kind: torch.dtype) -> torch.Tensor:
    """A request's values as a tensor of ``kind`` (exact: they were rounded to it)."""
    return torch.from_numpy(np.array(values)).to(kind)


def judge_paths(module: nn.Module, example_args: Sequence[torch.Tensor], paths: Sequence[str],
                dtype: str = "float64", seed: int = 0, stream: Stream | None = None) -> Paths:
    """:func:`~resverify.blocks.exact.judge_module` on ``module`` (the eager path), then each
    of ``paths`` run on the same parameters, input and cotangent and judged against the same
    exact answer and budget, its stream (``stream``: the norms reading it between sites and
    its declared dtype; default the output alone, in ``dtype``) against eager's; a path that
    did not run here is named with the reason."""
    unknown = [p for p in paths if p not in RUNS]
    if unknown:
        raise UsageError(f"unknown path(s) {', '.join(unknown)}: choose from "
                         f"{', '.join(PATHS)}")
    eager = judge_module(module, example_args, dtype, seed)
    assert eager.request is not None
    setup = _setup(module, eager, stream or Stream((), TORCH_DTYPES[dtype]))
    model = copy.deepcopy(setup.model)
    with torch.enable_grad(), watched(model, setup.stream) as captured:
        # grad mode on: eager, not the inference fast path
        eager_seen = seen_with(captured, model(*setup.inputs))
    skipped = (*eager.constants, *eager.untrained)
    judged = []
    for path in paths:
        started = time.perf_counter()
        try:
            ran = RUNS[path](setup)
        except Unjudged as exc:
            judged.append(PathJudgement(path, str(exc)))
            continue
        one = _judge_ran(path, ran, eager.request, eager_seen, setup.stream, skipped)
        judged.append(replace(one, seconds=time.perf_counter() - started))
    return Paths(eager, tuple(judged))


def judge_recipe_paths(recipe: Recipe, paths: Sequence[str], dtype: str, seed: int = 0
                       ) -> Paths:
    """:func:`judge_paths` on a recipe's block as :func:`~resverify.blocks.exact.judge_recipe`
    builds and calls it, its stream watched where the recipe's sites name it
    (:meth:`~resverify.blocks.exact_stream.Stream.of`)."""
    module, examples = recipe_module(recipe, dtype, seed)
    return judge_paths(module, examples, paths, dtype, seed, Stream.of(recipe, dtype))
