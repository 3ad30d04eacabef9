"""The local judgement: each op of a traced module judged on the module's own intermediate values.

Why: the whole-program budget of :mod:`resverify.blocks.exact` carries every rounding of
every op from the inputs to the output; in bfloat16 and float16 it grows until it says
nothing (Hugging Face's BertLayer: 16 of 2,480 elements with a finite bound), so a kernel
that rounds two or three times where it should round once passes. Here the exported program
(the same ``torch.export`` + ``run_decompositions()`` graph the IR was lowered from) runs on
the judged inputs and parameters under a :class:`torch.fx.Interpreter` that records every FX
node's value, in the module's dtype. Each FX node that was lowered (a pattern match,
such as an RMSNorm written out, as one unit) becomes a small IR program: the IR nodes
emitted for it, its inputs the *recorded* values of its FX arguments. Its recorded value is
judged against that program's exact value within its own one-step budget
(:func:`resverify.spec.budget.error_budget` of the small request, with the accumulation the
library declares). With exact inputs the budget is that op's own rounding alone: a bfloat16
matmul that accumulates in bfloat16 where float32 is declared, or a norm computed in
bfloat16, is outside it while the correct kernels are inside.

The one-step budget: in float64 and float32 it is the spec's budget of the small program.
In bfloat16 and float16, where the library declares float32 sums (torch's CPU matmul,
reduction, softmax and layer norm kernels, :data:`ROUNDS_ONCE`, compute a low-dtype op in
float32, ``at::opmath_type``, and round its result once), the
spec's per-node budget charges each rounding to the dtype on a magnitude bound (``u·|x|@|w|``
for a product, some ``√n`` times ``u·|x@w|``), which lets a kernel round three or four
times; the bound used is the smaller of it and that of the declared kernel, ``e + u(|y| + e)``
and one smallest subnormal (``e`` the unit's budget computed wholly in float32 on the same
inputs, ``y`` the exact value): one rounding of the float32 result.

Forward only: each small request carries a zero cotangent (no gradient is judged here;
:func:`resverify.spec.enclosure.enclose` runs without its reverse pass), so the budget of
its output is the one used; the gradients are the whole-program judgement's.

What is judged is the traced graph's run, kernel by kernel: a fused eager kernel that
differs from the decomposed graph (``nn.TransformerEncoderLayer``'s fast path, an SDPA
kernel) is judged by the whole-program check only, which compares the module's own eager
answers. :attr:`Local.faithful` says how the graph's output compares with the eager one.
The verdict names the first op in graph order that is out of its budget, so a failure
points at the layer and the kernel (``first op out of budget: addmm (aten.addmm.default),
12 of 64 elements, |error|/bound max 3.1``). The claim is pointwise: these inputs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from resverify.blocks.lower import Lowered
from resverify.blocks.tightness import Tightness, figure, numpy_of, ratios
from resverify.blocks.trace import TORCH_DTYPES
from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.compare import within
from resverify.spec.enclosure import Enclosed, NotEnclosed, decide, enclose, fast_budget
from resverify.spec.errors import InvalidRequest, UsageError
from resverify.spec.exact import evaluate, evaluate_exact
from resverify.spec.ir import Input, Node, Program, infer_dtypes
from resverify.spec.request import Request
from resverify.spec.rounding import INF, LARGEST, TINY, UNIT_ROUNDOFF, holds

__all__: list[str] = []


@dataclass(frozen=True)
class Unit:
    """One FX node (or pattern match) judged alone on its recorded arguments."""

    node: str
    target: str
    """The ATen overload (``aten.mm.default``), or the pattern's IR op for a match."""
    elements: int
    """Elements of its value with a finite bound."""
    outside: int
    worst: float
    """The largest ``|error| / bound`` of its elements (1: the edge of the budget)."""
    module: str = ""
    """The submodule that called it (``block.layers.1.mlp``: which layer), where the trace
    recorded one."""

    def __str__(self) -> str:
        where = f" in {self.module}" if self.module else ""
        return (f"{self.node} ({self.target}{where}), {self.outside} of {self.elements} "
                f"elements, |error|/bound max {self.worst:.3g}")

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it (the worst ratio ``"inf"`` where a bound is 0)."""
        return {"node": self.node, "target": self.target, "module": self.module,
                "elements": self.elements, "outside": self.outside,
                "worst": figure(self.worst)}


@dataclass(frozen=True)
class Local:
    """The local verdict: every unit judged, in graph order, and the tightness over all."""

    units: tuple[Unit, ...]
    tightness: Tightness
    faithful: str = ""
    """How the graph's recorded output compares with the module's eager output:
    ``bitwise``, or against the whole-program budget (filled in by the caller)."""
    unjudged: tuple[str, ...] = ()
    """The units not judged: an input the module computed is infinite or NaN (a ``-inf``
    mask), which no exact value of the IR's real arithmetic stands for."""
    backward: tuple[Unit, ...] = ()
    """The derivative kernels of the module's eager backward, each judged alone on its
    recorded arguments (:mod:`resverify.blocks.local_backward`), in call order."""

    @property
    def outside(self) -> tuple[Unit, ...]:
        return tuple(u for u in (*self.units, *self.backward) if u.outside)

    @property
    def first(self) -> Unit | None:
        """The first unit in graph order out of its budget, if any."""
        return next(iter(self.outside), None)

    @property
    def passed(self) -> bool:
        return not self.outside

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it: ``ops_judged``, ``out_of_budget`` (how many ops),
        ``backward_judged`` (derivative kernels), ``first`` (the first op out of its
        budget, forward ops before derivative kernels, :meth:`Unit.as_doc`, or None),
        ``not_judged`` (the units not judged), ``tightness`` and ``faithful``."""
        return {"ops_judged": len(self.units), "backward_judged": len(self.backward),
                "out_of_budget": len(self.outside),
                "first": None if self.first is None else self.first.as_doc(),
                "not_judged": list(self.unjudged), "tightness": self.tightness.as_doc(),
                "faithful": self.faithful, "line": str(self)}

    def __str__(self) -> str:
        head = f"local: {len(self.units)} ops judged on the module's own values, {self.tightness}"
        if self.backward:
            worst = max(u.worst for u in self.backward)
            head += (f"; {len(self.backward)} backward kernels judged alone, |error|/bound "
                     f"max {worst:.3g}")
        tail = f"; graph run vs eager: {self.faithful}" if self.faithful else ""
        if self.unjudged:
            tail = (f"; {len(self.unjudged)} not judged (an infinite input: "
                    f"{', '.join(self.unjudged[:3])}{' ...' if len(self.unjudged) > 3 else ''})"
                    + tail)
        if self.first is None:
            return f"{head}, none out of budget{tail}"
        return (f"{head}; {len(self.outside)} out of budget, first op out of budget: "
                f"{self.first}{tail}")


def judge_ops(lowered: Lowered, leaves: Mapping[str, torch.Tensor], dtype: str,
              accumulate: str | None) -> tuple[Local, torch.Tensor]:
    """Run the lowered module's exported graph on ``leaves`` (the values of the program's
    inputs, by IR name) and judge every op on the values recorded; also return the graph's
    output (for comparing with the eager run)."""
    recorded = record(lowered, leaves)
    values = {ir: recorded[fx] for fx, ir in lowered.names.items() if fx in recorded}
    values |= lowered.constants  # lifted to inputs: as the program holds them (a mask 0/1)
    values |= _widened(lowered.program, values)
    targets = _targets(lowered)
    owner = _owners(lowered)
    units = []
    skipped: list[str] = []
    found: list[np.ndarray] = []
    computed = infer_dtypes(lowered.program, dtype)
    for node in lowered.program.nodes:
        if owner.get(node.name) is None:
            continue
        program = _unit(lowered.program, node.name, values)
        fx, target, module = targets[owner[node.name]]
        if not all(bool(torch.isfinite(values[i.name]).all()) for i in program.inputs):
            skipped.append(fx)  # an infinity the module computed (a -inf mask): no real input
            continue
        # a unit is judged in the dtype its inputs are computed in (after a cast, float32
        # in a bfloat16 layer: there it sums in float32 itself, nothing wider declared)
        within = computed[program.inputs[0].name] if program.inputs else dtype
        unit, used = _judge(program, values, within, accumulate if within == dtype else None,
                            target in ROUNDS_ONCE)
        elements, outside, worst = unit
        units.append(Unit(fx, target, elements, outside, worst, module))
        found.append(used)
    spread = np.concatenate(found) if found else np.zeros(0)
    return (Local(tuple(units), Tightness.of(spread), unjudged=tuple(skipped)),
            values[lowered.program.output])


def _widened(program: Program, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The value of each exact ``cast`` the trace added with no node of torch's own (an
    operand promoted, a constant of another dtype): its argument's value widened, or a
    constant narrowed where every value survives (a float32 number lifted in a float64
    program). A unit then starts at it, and every input of a unit is in one dtype."""
    known = dict(values)
    for node in program.nodes:
        source, target = node.params.get("source"), node.params.get("target")
        if node.op != "cast" or node.name in known or node.args[0] not in known:
            continue
        value = known[node.args[0]]
        cast = value.to(TORCH_DTYPES[str(target)])
        if holds(str(target), str(source)) or bool((cast.to(value.dtype) == value).all()):
            known[node.name] = cast
    return {name: value for name, value in known.items() if name not in values}


def record(lowered: Lowered, leaves: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every tensor value of the exported graph's run on ``leaves``, by FX node name."""
    exported = lowered.exported
    if exported is None:
        raise UsageError("a Lowered without its exported program cannot be run: lower the "
                         "module with resverify.blocks.lower.lower")
    ir_of = lowered.names
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
    args = [leaves[ir_of[n.name]] if n.name in ir_of else _constant(exported, spec)
            for n, spec in zip(placeholders, exported.graph_signature.input_specs,
                               strict=True)]
    recorder = _Recorder(exported.graph_module)
    with torch.no_grad():
        recorder.run(*[a.detach() for a in args])
    return recorder.values


def _constant(exported: Any, spec: Any) -> Any:
    """A placeholder the IR does not read (a lifted constant, a buffer of another dtype)."""
    for table in (exported.constants, exported.state_dict):
        if spec.target in table:
            return table[spec.target]
    return None


ROUNDS_ONCE = frozenset({
    "aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten._softmax.default",
    "aten.native_layer_norm.default", "aten.sum.dim_IntList", "aten.mean.dim"})
"""The ATen kernels whose low-dtype CPU form computes in float32 and rounds its result
once (the matmuls and reductions of ``at::opmath_type``, softmax, layer norm): the bound of
:func:`_rounded_once` is theirs. Every other unit keeps the spec's per-node budget, one
rounding to the dtype per IR node: ``pow(x, 3)`` in bfloat16 multiplies twice, rounding to
bfloat16 after each product (measured on GPT-2's ``gelu_new``: 44 of 512 elements up to
1.36 times the one-rounding bound), and a pattern such as RMSNorm spans several kernels."""


class _Recorder(torch.fx.Interpreter):
    """An FX interpreter that keeps each node's tensor value."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.values: dict[str, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        if isinstance(value, torch.Tensor):
            self.values[n.name] = value
        return value


def _targets(lowered: Lowered) -> dict[str, tuple[str, str, str]]:
    """Each call node's name, ATen overload and calling submodule as a unit is named: an
    output picked from a node of several outputs (``native_layer_norm``'s) by that node, a
    pattern's root as ``<op> pattern``."""
    found = {}
    for node in lowered.exported.graph.nodes:
        source = node.args[0] if node.target is operator.getitem else node
        found[node.name] = (source.name, str(source.target), _module(source))
    for match in lowered.matched:
        op, _, root = match.partition(" at ")
        found[root] = (root, f"{op} pattern", found.get(root, ("", "", ""))[2])
    return found


def _module(node: Any) -> str:
    """The innermost submodule an exported node was called from (its ``state_dict`` path),
    or ``""`` where the trace recorded none."""
    stack = node.meta.get("nn_module_stack") or {}
    return str(list(stack.values())[-1][0]) if stack else ""


def _owners(lowered: Lowered) -> dict[str, str]:
    """The IR nodes whose value torch's run records, each with the FX node that gives it
    (the first, where a copy passes its argument's IR name on)."""
    inputs = set(lowered.program.input_names)
    owner: dict[str, str] = {}
    for fx, ir in lowered.names.items():
        if ir not in inputs:
            owner.setdefault(ir, fx)
    return owner


def _unit(program: Program, name: str, recorded: Mapping[str, Any]) -> Program:
    """The IR nodes computing ``name`` from the nearest recorded values (or inputs), as a
    program whose inputs are those values."""
    by_name = {n.name: n for n in program.nodes}
    nodes: dict[str, Node] = {}
    inputs: dict[str, Input] = {}
    pending = [name]
    while pending:
        node = by_name[pending.pop()]
        nodes[node.name] = node
        for arg in node.args:
            if arg in recorded or arg not in by_name:
                inputs.setdefault(arg, Input(arg, tuple(recorded[arg].shape)))
            elif arg not in nodes:
                pending.append(arg)
    return Program(tuple(inputs.values()), tuple(reversed(nodes.values())), name)


def _judge(program: Program, recorded: Mapping[str, torch.Tensor], dtype: str,
           accumulate: str | None, once: bool) -> tuple[tuple[int, int, float], np.ndarray]:
    """``(elements with a finite bound, elements outside, worst ratio)`` of one unit's
    recorded value against its exact value, and the ratios of the elements with a non-zero
    bound (those of a value that must be exact are not a budget's tightness)."""
    actual = numpy_of(recorded[program.output])
    inputs = {i.name: numpy_of(recorded[i.name]) for i in program.inputs}
    request = Request(program, inputs, dtype, np.zeros(actual.shape, actual.dtype),
                      accumulate=accumulate)
    outside, bound, nearest = _outside(request, actual, once)
    rounds = bound > 0  # an exact move (reshape, permute ...) has no budget to use
    used = ratios(actual[rounds], nearest[rounds], bound[rounds])
    every = ratios(actual, nearest, bound)
    worst = float(every.max()) if every.size else 0.0
    return (int(np.isfinite(bound).sum()), int(outside.sum()), worst), used


def _outside(request: Request, actual: np.ndarray, once: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which elements of ``actual`` are outside the output budget, the bound, and a float64
    value near the exact one: float64 enclosures decide, the exact interpreter where they
    cannot (or where the unit has an op without an enclosure rule)."""
    try:
        enclosed = enclose(request, reverse=False)
    except NotEnclosed:
        return _outside_exactly(request, actual, np.ones(actual.shape, dtype=bool))
    bound = np.broadcast_to(fast_budget(request, enclosed).output, actual.shape)
    if once and request.accumulate is not None:
        bound = np.minimum(bound, _rounded_once(request, enclosed))
    inside, unsure = decide(actual, enclosed.output, bound)
    nearest = enclosed.output.mid + enclosed.output.lo
    if unsure.any():
        exactly, _, _ = _outside_exactly(request, actual, unsure, bound)
        return (~inside & ~unsure) | exactly, bound, nearest
    return ~inside, bound, nearest


@np.errstate(over="ignore", invalid="ignore")
def _rounded_once(request: Request, enclosed: Enclosed) -> np.ndarray:
    """The bound of a kernel that computes the unit in the accumulation dtype and rounds its
    result once to the request's dtype: ``e + u (|y| + e)`` and one smallest subnormal, ``e``
    the unit's budget in the wide dtype (whose inputs are the same values, exact there), ``y``
    the exact value; infinite where the value may overflow the dtype."""
    assert request.accumulate is not None
    wide = Request(request.program, request.inputs, request.accumulate, request.cotangent)
    return once_bound(fast_budget(wide, enclosed).output, enclosed.output, request.dtype)


@np.errstate(over="ignore", invalid="ignore")
def once_bound(e: np.ndarray, ball: Ball, dtype: str) -> np.ndarray:
    """``e + u (|y| + e)`` and one smallest subnormal of ``dtype``, rounded up: the bound of
    a value computed with error ``e`` in a wider dtype and rounded once to ``dtype``, ``y``
    the exact value (``ball`` encloses it); infinite where it may overflow ``dtype``."""
    size = np.abs(ball.mid) + np.abs(ball.lo) + ball.rad
    u, tiny = float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype])
    bound = np.nextafter((e + u * (size + e) + tiny) * (1 + 2.0**-50), INF)
    return np.where(size + e >= LARGEST[dtype], INF, bound)


def _outside_exactly(request: Request, actual: np.ndarray, asked: np.ndarray,
                     bound: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact interpreter's verdict on the ``asked`` elements (its budget where no
    ``bound`` is given)."""
    # with a bound given only the exact output is read: no reverse pass (its cotangent is 0)
    exact = evaluate(request) if bound is None else \
        evaluate_exact(request.program, request.inputs, None)
    if exact.output is None:
        raise InvalidRequest(f"the exact interpreter rejects a unit of the trace: {exact.error}")
    if bound is None:
        bound = np.broadcast_to(error_budget(request, exact=exact).output, actual.shape)
    want = np.asarray(exact.output, dtype=object).reshape(actual.shape)
    outside = exactly_outside(actual, want, bound, asked)
    nearest = np.vectorize(_near, otypes=[np.float64])(want) if want.size else \
        np.zeros(actual.shape)
    return outside, bound, nearest


def exactly_outside(actual: np.ndarray, want: np.ndarray, bound: np.ndarray,
                    asked: np.ndarray) -> np.ndarray:
    """Which of the ``asked`` elements of ``actual`` lie outside ``bound`` of the exact
    values ``want`` (:func:`~resverify.spec.compare.within`); False elsewhere."""
    outside = np.zeros(actual.shape, dtype=bool)
    for index in zip(*np.nonzero(asked), strict=True):
        outside[index] = not within(float(actual[index]), want[index], float(bound[index]))
    return outside


def _near(value: Any) -> float:
    """A float64 near an exact value: the value rounded, infinite beyond float64's range."""
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf

