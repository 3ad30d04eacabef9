"""Judge what ran: a real module's own eager answers against the exact oracle of its trace.

Why: the block laws check a module's *structure* from its own answers, so a module whose
autodiff is consistent with its own mistakes (a backward off by a small factor, a forward
constant that its hand-written backward does not share) passes them. Here the module is
traced into the IR (:mod:`resverify.blocks.lower`), its parameters and a drawn input and
cotangent are rounded to the dtype, the module runs eagerly (its output, the input's
gradient and every parameter's gradient), and every element is judged against the exact
value of the traced program within the budget the spec derives for the dtype
(:func:`resverify.spec.enclosure.verify`: float64 enclosures, the exact interpreter only
where they cannot decide).

The claim is pointwise: the verdict is about *these* inputs, parameters and cotangent, not
every input of a box. :class:`Judgement` says so when printed, and reports how tight the
budgets were: the median, 99th percentile and maximum of ``|error| / bound`` over all the
elements judged (1 is the edge of the budget).

Mixed precision: torch on CPU carries out bfloat16 and float16 matmuls and reductions in
float32 and rounds once at the end (ATen's CPU kernels accumulate in ``at::opmath_type``,
float for both). On CUDA the notes ``docs/source/notes/numerical_accuracy.rst`` ("Reduced
Precision Reduction in FP16 GEMMs", and its BF16 twin) say cuBLAS may reduce in the low
dtype unless ``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`` or
``allow_bf16_reduced_precision_reduction`` is False: there the declaration holds only with
those set. The request declares float32 accumulation (:data:`ACCUMULATE`), so the budget
charges float32's gamma and one rounding for each sum and dot product, and a kernel that
accumulates in the low dtype is caught (without the declaration a bfloat16 dot of width 16
was allowed 16·2⁻⁸ ≈ 6 % of its size).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from resverify.blocks.local import Local, judge_ops
from resverify.blocks.local_backward import Recorder, judge_backward, with_backward
from resverify.blocks.lower import Lowered, NotInIR, lower
from resverify.blocks.recipe import Recipe
from resverify.blocks.tightness import Tightness, numpy_of, ratios
from resverify.blocks.trace import TORCH_DTYPES
from resverify.spec.budget import Budget, Miss
from resverify.spec.enclosure import Verdict, outside_output, verify
from resverify.spec.errors import UsageError
from resverify.spec.ir import Program
from resverify.spec.request import Request

__all__ = ["judge_module", "judge_recipe"]

ACCUMULATE = {"bfloat16": "float32", "float16": "float32"}
"""The dtype torch on CPU accumulates each dtype's sums and dot products in, where it is
not the dtype itself (the request's ``accumulate``)."""


MISSES_SHOWN = 5
"""The elements outside their budget a judgement's line and report entry show."""


@dataclass(frozen=True)
class Judgement:
    """The verdict on one module in one dtype, for one drawn input (pointwise)."""

    dtype: str
    program: Program
    misses: tuple[Miss, ...]
    elements: int
    """Elements judged (those with a finite bound) of the output and every gradient (input,
    parameters, buffers)."""
    tightness: Tightness
    decided_exactly: int
    """Elements the enclosures could not decide, decided by the exact interpreter."""
    seconds: Mapping[str, float]
    """``trace`` (export and lowering), ``module`` (its own forward and backward), ``judge``,
    ``local`` (the graph's recorded run and each op judged alone)."""
    matched: tuple[str, ...] = ()
    """The composites the trace mapped to one IR op (``"rms_norm at mul"``)."""
    accumulate: str | None = None
    """The dtype the budget took sums and dot products to accumulate in (None: ``dtype``)."""
    total: int = 0
    """Elements of the output and every gradient; those beyond :attr:`elements` have an
    infinite bound in this dtype (nothing is claimed of them)."""
    request: Request | None = None
    """The request judged: the traced program with the module's parameters, the drawn input
    and the cotangent, which any engine can answer as a vector (``resverify replay``)."""
    constants: tuple[str, ...] = ()
    """The constants lifted to inputs (their FX node names): given the module's value,
    their gradients not judged."""
    local: Local | None = None
    """Each op judged alone on the module's own intermediate values, within its own one-step
    budget (:mod:`resverify.blocks.local`); None where it was not run."""
    untrained: tuple[str, ...] = ()
    """Inputs whose gradient torch does not compute (batch norm's running statistics), so
    none is judged."""
    tied: Mapping[str, str] = field(default_factory=dict)
    """Parameters that are one tensor under two names (tied embeddings), each to the name
    judged: one input, its gradient the sum over every use."""
    ratios: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    """``|error| / bound`` of each element, by where (``output``, ``grad[<name>]``), in its
    array's shape, NaN where the bound is infinite (nothing claimed): what
    :mod:`resverify.blocks.layer_rows` groups per layer. Not a verdict (the misses are)."""
    lowered: Lowered | None = field(default=None, repr=False, compare=False)
    """The trace judged: pass it back to :func:`judge_module` (``lowered=``) to judge the
    same module with other parameters or inputs without tracing it again."""

    @property
    def passed(self) -> bool:
        """No element outside its whole-program budget and no op outside its own."""
        return not self.misses and (self.local is None or self.local.passed)

    @property
    def verdict(self) -> str:
        """``fail`` (an element outside its budget), ``partly judged`` (none outside, but
        some elements had no finite bound), or ``pass`` (every element judged, none outside)."""
        if not self.passed:
            return "fail"
        return "partly judged" if self.elements < self.total else "pass"

    def as_doc(self) -> dict[str, Any]:
        """The judgement as the report's ``exact`` section holds it (plain data): the
        verdict, elements judged of ``total``, the tightness, ``decided_exactly``, the
        patterns ``matched``, ``constants`` lifted, ``untrained`` inputs, the first
        ``misses`` (at most :data:`MISSES_SHOWN`, with their count), the ``local`` judgement
        (None where it was not run), the ``line`` printed, and the seconds of each stage
        (keys ending ``_seconds``) and in all (``time_seconds``)."""
        seconds = {f"{stage}_seconds": round(spent, 3) for stage, spent in self.seconds.items()}
        return {"dtype": self.dtype, "accumulate": self.accumulate, "verdict": self.verdict,
                "elements": self.elements, "total": self.total,
                "tightness": self.tightness.as_doc(), "decided_exactly": self.decided_exactly,
                "matched": list(self.matched), "constants": list(self.constants),
                "untrained": list(self.untrained), "outside": len(self.misses),
                "misses": [str(m) for m in self.misses[:MISSES_SHOWN]],
                "local": None if self.local is None else self.local.as_doc(),
                "line": str(self).splitlines()[0], "stage_seconds": seconds,
                "time_seconds": round(sum(self.seconds.values()), 3)}

    def _failed(self) -> str:
        if self.local is None:
            return f"FAIL ({len(self.misses)} outside the budget)"
        ops = len(self.local.outside)
        return (f"FAIL ({len(self.misses)} outside the budget, {ops} "
                f"{'op' if ops == 1 else 'ops'} outside {'its' if ops == 1 else 'their'} own)")

    def __str__(self) -> str:
        verdict = {"fail": self._failed(),
                   "partly judged": "PARTLY JUDGED"}.get(self.verdict, self.verdict)
        dtype = self.dtype if self.accumulate is None else \
            f"{self.dtype} (sums in {self.accumulate})"
        counted = f"{self.elements} elements of the output and every gradient"
        if self.elements < self.total:
            counted = (f"{self.elements} of {self.total} elements of the output and every "
                       "gradient judged (the rest have no finite bound)")
        head = f"{dtype}: {verdict}, {counted}, {self.tightness} (pointwise: these inputs)"
        if self.matched:
            head += f"; matched {', '.join(self.matched)}"
        if self.constants:
            head += f"; constants lifted: {', '.join(self.constants)}"
        if self.untrained:
            head += f"; no gradient judged of {', '.join(self.untrained)} (torch computes none)"
        if self.tied:
            head += "; tied: " + ", ".join(f"{a} is {b}" for a, b in self.tied.items())
        local = [] if self.local is None else [f"  {self.local}"]
        return "\n".join([head, *local, *(f"  {m}" for m in self.misses[:MISSES_SHOWN])])


def judge_module(module: nn.Module, example_args: Sequence[torch.Tensor],
                 dtype: str = "float64", seed: int = 0, lowered: Lowered | None = None
                 ) -> Judgement:
    """Trace ``module`` (a copy of it, in ``dtype``), run it on inputs of ``example_args``'
    shapes drawn from ``seed``, and judge its output and every gradient element by element
    against the exact oracle (raises :class:`~resverify.blocks.lower.NotInIR` listing what
    the IR cannot express), and each op of its traced graph alone on the module's own
    intermediate values (:attr:`Judgement.local`, :mod:`resverify.blocks.local`).
    ``lowered``: a trace of the same module class and shapes in ``dtype`` (a judgement's
    :attr:`Judgement.lowered`), reused instead of tracing again: the program reads the
    parameters as inputs and the lifted constants read none, so only they change.

        >>> print(judge_module(block, (x,), "float32"))  # doctest: +SKIP
        float32: pass, 8448 elements of the output and every gradient, |error|/bound ...
    """
    kind = TORCH_DTYPES[dtype]
    generator = torch.Generator().manual_seed(seed)
    model = copy.deepcopy(module).to(kind)
    args = [torch.randn(tuple(a.shape), generator=generator, dtype=torch.float64).to(kind)
            for a in example_args]
    started = time.perf_counter()
    if lowered is None:
        lowered = lower(model, args)
    traced = time.perf_counter()
    leaves = leaves_of(model, args, lowered)
    recorder = Recorder(model)
    with recorder:
        output = model(*leaves[: len(args)])
        cotangent = torch.randn(tuple(output.shape), generator=generator,
                                dtype=torch.float64).to(kind)
        output.backward(cotangent)
    ran = time.perf_counter()
    names = [*lowered.user_inputs, *lowered.state]
    values = {n: numpy_of(t) for n, t in zip(names, leaves, strict=True)}
    values |= {n: numpy_of(t) for n, t in lowered.constants.items()}
    request = Request(lowered.program, values, dtype, numpy_of(cotangent),
                      accumulate=ACCUMULATE.get(dtype))
    grads = {n: numpy_of(t.grad if t.grad is not None else torch.zeros_like(t))
             for n, t in zip(names, leaves, strict=True) if n not in lowered.untrained}
    scores = [lowered.names[c.scores] for c in lowered.conditions]
    # no gradient to judge: of a lifted constant, or one torch computes none of
    skipped = (*lowered.constants, *lowered.untrained)
    verdict = verify(request, numpy_of(output), grads, sizes=scores, unjudged=skipped)
    _check_masks(lowered, verdict.sizes)
    judged = time.perf_counter()
    local, graph_output = judge_ops(lowered, dict(zip(names, leaves, strict=True)), dtype,
                                    request.accumulate)
    local = with_backward(local, judge_backward(recorder, dtype, request.accumulate))
    local = replace(local, faithful=_faithful(request, verdict, graph_output, output,
                                                grads))
    actual = {"output": numpy_of(output), **{f"grad[{n}]": g for n, g in grads.items()}}
    used = element_ratios(actual, verdict.nearest, verdict.budget)
    each = {where: element_ratios(actual, verdict.nearest, verdict.budget, where)
            for where in actual}
    seconds = {"trace": traced - started, "module": ran - traced, "judge": judged - ran,
               "local": time.perf_counter() - judged}
    total = sum(values.size for values in actual.values())
    return Judgement(dtype, lowered.program, tuple(verdict.misses), used.size, Tightness.of(used),
                     verdict.decided_exactly, seconds, lowered.matched, request.accumulate,
                     total, request=request, constants=tuple(lowered.constants), local=local,
                     untrained=lowered.untrained, tied=lowered.tied, ratios=each,
                     lowered=lowered)


def _check_masks(lowered: Lowered, sizes: Mapping[str, np.ndarray]) -> None:
    """Refuse, by the ``add`` of its mask, a ``masked_softmax`` whose scores are not small
    enough beside the mask for it to stand for ``softmax(s + m)``
    (:class:`~resverify.blocks.patterns.MaskCondition`)."""
    refused = []
    for condition in lowered.conditions:
        size = sizes[lowered.names[condition.scores]]
        largest = float(size.max()) if size.size else 0.0
        if not largest <= condition.limit:
            refused.append(("aten.add.Tensor", condition.add,
                            f"an additive mask read as masked_softmax while every score "
                            f"is at most {condition.limit:.4g} in size; {condition.scores} "
                            f"reaches {largest:.4g}"))
    if refused:
        raise NotInIR(refused)


def _faithful(request: Request, verdict: Verdict, graph: torch.Tensor, eager: torch.Tensor,
              grads: Mapping[str, np.ndarray]) -> str:
    """The traced graph's output against the module's eager output: ``bitwise``, or judged
    against the whole program's budget like the eager one (``verdict``'s, reused)."""
    if torch.equal(graph, eager.detach()):
        return "bitwise"
    outside = outside_output(request, verdict, numpy_of(graph), grads)
    if outside:
        return f"not bitwise, {outside} elements outside the whole-program budget"
    return "not bitwise, within the whole-program budget"


SIZES = {"batch": 2, "seq": 4}
"""The sizes a recipe's ``"batch"`` and ``"seq"`` take when its block is judged."""


class Called(nn.Module):
    """A recipe's block called as the recipe calls it, its context inputs positional."""

    def __init__(self, recipe: Recipe, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.recipe = recipe

    def forward(self, x: torch.Tensor, *context: torch.Tensor) -> torch.Tensor:
        return self.recipe.run(self.block, x, dict(zip(self.recipe.context, context,
                                                       strict=True)))


def judge_recipe(recipe: Recipe, dtype: str, seed: int = 0, lowered: Lowered | None = None
                 ) -> Judgement:
    """:func:`judge_module` on a recipe's block, built in ``dtype`` under ``seed`` and put in
    eval mode, called as the recipe calls it (its parameters named ``block.<name>``), at
    batch 2 and sequence 4 (``lowered``: an earlier judgement's trace of it, reused)."""
    return judge_module(*recipe_module(recipe, dtype, seed), dtype, seed, lowered)


def recipe_module(recipe: Recipe, dtype: str, seed: int = 0
                  ) -> tuple[nn.Module, list[torch.Tensor]]:
    """``recipe``'s block built in ``dtype`` under ``seed``, in eval mode, called as the
    recipe calls it, and example inputs of its shapes (batch 2, sequence 4)."""
    torch.manual_seed(seed)
    block = recipe.factory(TORCH_DTYPES[dtype]).eval()
    shapes = [recipe.shape, *recipe.context.values()]
    examples = [torch.zeros([d if isinstance(d, int) else SIZES[d] for d in dims])
                for dims in shapes]
    return Called(recipe, block), examples


def leaves_of(model: nn.Module, args: Sequence[torch.Tensor], lowered: Lowered
              ) -> list[torch.Tensor]:
    """The module's inputs, then each parameter and buffer the program reads, in the
    program's order, each a leaf that records its gradient."""
    inputs = [a.detach().clone().requires_grad_(True) for a in args]
    if len(inputs) != len(lowered.user_inputs):
        raise UsageError(f"the trace has {len(lowered.user_inputs)} tensor inputs, "
                         f"{len(inputs)} were given: pass every input as a tensor")
    state = dict(model.named_parameters(remove_duplicate=False)) | dict(
        model.named_buffers(remove_duplicate=False))
    for name in lowered.state:
        state[name].requires_grad_(name not in lowered.untrained)
    return inputs + [state[name] for name in lowered.state]


def element_ratios(actual: Mapping[str, np.ndarray], nearest: Mapping[str, np.ndarray],
                   budget: Budget, where: str | None = None) -> np.ndarray:
    """:func:`~resverify.blocks.tightness.ratios` of the output and every gradient; of
    ``where`` alone (``output``, ``grad[<name>]``) in its array's shape, NaN where the bound
    is infinite, when it is given."""
    if where is not None:
        bound = budget.output if where == "output" else budget.grads[where[5:-1]]
        return ratios(actual[where], nearest[where], bound, keep_shape=True)
    found = [ratios(values, nearest[where],
                    budget.output if where == "output" else budget.grads[where[5:-1]])
             for where, values in actual.items()]
    return np.concatenate(found) if found else np.zeros(0)
