"""The backward kernels judged alone: each derivative kernel the module's own eager backward
calls, judged on its own recorded arguments against its forward op's exact VJP.

Why: the op-by-op judgement of :mod:`resverify.blocks.local` runs the traced graph forward,
and the whole-program budget of a gradient carries every rounding from the inputs on. A
derivative kernel off by a factor ``1 + 2⁻¹⁰`` (a SiLU backward) hides in the second: a
"float64" Hugging Face Llama layer computes its RMSNorms in float32, so its gradients'
budgets carry float32 roundings and such a bug uses about half of them. Judged alone, on
its own arguments, the kernel has only its own roundings to spend.

How: a :class:`Recorder` (a ``TorchDispatchMode``) is active while the module runs forward
and backward, in eager mode, as the whole-program judgement runs it. It keeps every call of
the derivative kernels of :data:`KERNELS` (their arguments and result, copied) and, for
those whose arguments name a saved forward result instead of its input (``sigmoid``,
``tanh``, ``softmax``: their result; a layer norm: its mean and ``1/σ``), the forward call
that made it, found by the result's storage. Each call becomes a one-op IR program (the
forward op on the recorded forward input, the recorded incoming gradient as its
cotangent), whose exact VJP and one-op budget judge the kernel's result element by
element (:func:`resverify.spec.enclosure.verify`; a layer norm's weight and bias
gradients too). Kernels the IR has no op for are not recorded; the forward kernels that a
backward reuses (``mm``, ``mul``, ``sum``) are judged by the whole-program check only.

Where a bug is planted by another dispatch mode entered before the recorder, the recorder
sees the planted kernel's result (it dispatches below itself). The claim is pointwise: the
recorded arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode

from resverify.blocks.local import Local, Unit, exactly_outside, once_bound
from resverify.blocks.tightness import numpy_of, ratios
from resverify.blocks.trace import TORCH_DTYPES
from resverify.spec.enclosure import Enclosed, NotEnclosed, decide, enclose, fast_budget, verify
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops.attributes import Params
from resverify.spec.request import Request

__all__: list[str] = []

aten = torch.ops.aten

SAVED_BY = {aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh",
            aten._softmax.default: "softmax", aten.native_layer_norm.default: "layer_norm"}
"""Forward kernels whose result a derivative kernel reads instead of their input."""


SEEN_IN = frozenset({aten.silu.default, aten.gelu.default, aten.relu.default, *SAVED_BY})
"""Forward kernels whose saved tensors (input or result) name, for the derivative kernel
that reads them, the submodule that called the forward."""


@dataclass(frozen=True)
class Call:
    """One recorded kernel call: its overload, arguments and result (tensors copied), and
    the submodule whose forward made the tensors it reads (``""`` where none is known)."""

    func: Any
    args: tuple[Any, ...]
    result: Any
    module: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """A derivative kernel call as a one-op IR unit: the program, its inputs, the incoming
    gradient (cotangent), and the kernel's results by the input whose gradient they are."""

    program: Program
    inputs: Mapping[str, torch.Tensor]
    cotangent: torch.Tensor
    grads: Mapping[str, torch.Tensor]
    once: bool = False
    """Whether the kernel computes from the forward's input alone, in the accumulation
    dtype, rounding its result once (SiLU's and GELU's: :func:`_rounded_once` bounds it);
    a kernel that reads the forward's rounded result, or sums rows in the dtype (a layer
    norm's weight and bias), is held to the dtype's own budget."""
    lifted: frozenset[str] = frozenset()
    """Inputs that are data the unit reads, not the kernel's (a mask): their gradient,
    0, is given to the judge but is not the kernel's result, so it is not counted."""


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    return value


def _key(t: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...], torch.dtype]:
    """Which tensor ``t`` is while it lives: its storage, offset, shape, strides and dtype
    (a saved forward tensor lives until the backward has read it)."""
    return (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape),
            tuple(t.stride()), t.dtype)


class Recorder(TorchDispatchMode):
    """Keeps the calls of :data:`KERNELS` and the forward calls whose results they read;
    with a ``root`` module, the submodule (its path under ``root``) each forward kernel of
    :data:`SEEN_IN` ran in, so a derivative kernel is charged to it."""

    def __init__(self, root: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.made: dict[tuple[Any, ...], Call] = {}
        self.seen: dict[tuple[Any, ...], str] = {}
        self.names = {} if root is None else {id(m): n for n, m in root.named_modules()}
        self.stack: list[str] = []
        self.hooks: list[Any] = []

    def __enter__(self) -> Recorder:
        if self.names:
            self.hooks = [register_module_forward_pre_hook(self._enter_module),
                          register_module_forward_hook(self._leave_module)]
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        for hook in self.hooks:
            hook.remove()
        super().__exit__(*exc)

    def _enter_module(self, module: torch.nn.Module, args: Any) -> None:
        self.stack.append(self.names.get(id(module), self.stack[-1] if self.stack else ""))

    def _leave_module(self, module: torch.nn.Module, args: Any, result: Any) -> None:
        if self.stack:
            self.stack.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if func in SEEN_IN and self.stack:
            for t in (*args, *(result if isinstance(result, tuple) else (result,))):
                if isinstance(t, torch.Tensor):
                    self.seen[_key(t)] = self.stack[-1]
        if func in SAVED_BY:
            call = Call(func, _copy(tuple(args)), _copy(result))
            for out in result if isinstance(result, tuple) else (result,):
                self.made[_key(out)] = call
        elif func in KERNELS:
            module = self.seen.get(_key(args[1]), "") if isinstance(args[1], torch.Tensor) \
                else ""
            self.calls.append(Call(func, (*_copy(tuple(args)), self._source(func, args)),
                                   _copy(result), module, dict(kwargs or {})))
        return result

    def _source(self, func: Any, args: Sequence[Any]) -> Call | None:
        """The forward call whose result the kernel reads (its saved output, mean or 1/σ)."""
        read = args[3] if func is aten.native_layer_norm_backward.default else args[1]
        return self.made.get(_key(read)) if isinstance(read, torch.Tensor) else None


def _one(op: str, x: torch.Tensor, **params: Any) -> Program:
    return Program((Input("x", tuple(x.shape)),),
                   (Node("y", op, ("x",), params=Params(params)),), "y")


def _silu(call: Call) -> Case | None:
    """``silu_backward(grad, self)``: the VJP of ``silu`` at ``self``."""
    grad, x = call.args[0], call.args[1]
    return Case(_one("silu", x), {"x": x}, grad, {"x": call.result}, once=True)


def _gelu(call: Call) -> Case | None:
    """``gelu_backward(grad, self, approximate)``: of ``gelu_erf`` or ``gelu_tanh``."""
    grad, x = call.args[0], call.args[1]
    approximate = str(call.kwargs.get("approximate", "none"))
    op = {"none": "gelu_erf", "tanh": "gelu_tanh"}.get(approximate)
    if op is None:
        return None
    return Case(_one(op, x), {"x": x}, grad, {"x": call.result}, once=True)


def _from_result(op: str) -> Callable[[Call], Case | None]:
    """``<op>_backward(grad, result)``: the VJP of ``op`` at the input that made ``result``."""
    def case(call: Call) -> Case | None:
        grad, source = call.args[0], call.args[-1]
        if source is None:
            return None
        x = source.args[0]
        return Case(_one(op, x), {"x": x}, grad, {"x": call.result})
    return case


def _threshold(call: Call) -> Case | None:
    grad, x, threshold = call.args[0], call.args[1], call.args[2]
    if threshold != 0:
        return None
    return Case(_one("relu", x), {"x": x}, grad, {"x": call.result})


MASKED = -1e30
"""A score at or below this (``-inf``, ``finfo.min``: an additive mask) is read as masked:
its exp underflows to exactly 0 beside any kept score below ``1e29``, so the kernel's value
is the softmax over the kept scores, 0 on the masked (:mod:`resverify.spec.ops.masked_softmax`)."""


def _softmax(call: Call) -> Case | None:
    """``_softmax_backward_data(grad, result, dim, input_dtype)``: the VJP of ``softmax``
    over ``dim`` at the input that made ``result``; of ``masked_softmax`` where an additive
    mask put scores at or below :data:`MASKED` (the mask an input, its gradient 0)."""
    grad, dim, source = call.args[0], call.args[2], call.args[-1]
    if source is None or source.args[0].dtype != grad.dtype:
        return None  # a half-to-float softmax: the unit spans two dtypes
    x = source.args[0]
    axis = int(dim) % max(x.dim(), 1)
    kept = x > MASKED
    if bool(kept.all()):
        return Case(_one("softmax", x, axis=axis), {"x": x}, grad, {"x": call.result})
    if bool(torch.isnan(x).any()) or bool((x[kept].abs() >= 1e29).any()):
        return None
    mask = kept.to(x.dtype)
    program = Program((Input("x", tuple(x.shape)), Input("m", tuple(x.shape))),
                      (Node("y", "masked_softmax", ("x", "m"), params=Params({"axis": axis})),),
                      "y")
    return Case(program, {"x": torch.where(kept, x, torch.zeros_like(x)), "m": mask}, grad,
                {"x": call.result, "m": torch.zeros_like(x)}, lifted=frozenset({"m"}))


def _layer_norm(call: Call) -> Case | None:
    """``native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias, mask)``: the
    VJP of ``layer_norm`` (ε from the forward call), times the weight, plus the bias, each
    broadcast as the lowering broadcasts them (``expand_in_dtype``)."""
    grad, x, shape, *_, weight, bias, _, source = call.args
    if source is None or len(shape) != 1:
        return None
    full = tuple(x.shape)
    nodes = [Node("n", "layer_norm", ("x",), eps=Fraction(source.args[4]))]
    inputs: dict[str, torch.Tensor] = {"x": x}
    grads: dict[str, torch.Tensor] = {"x": call.result[0]}
    last = "n"
    for name, op, tensor, result in (("w", "mul", weight, call.result[1]),
                                     ("b", "add", bias, call.result[2])):
        if tensor is None:
            continue
        inputs[name] = tensor
        grads[name] = result
        nodes += [Node(f"{name}_", "expand_in_dtype", (name,), params=Params({"shape": full})),
                  Node(f"{last}{name}", op, (last, f"{name}_"))]
        last = f"{last}{name}"
    program = Program(tuple(Input(n, tuple(t.shape)) for n, t in inputs.items()),
                      tuple(nodes), last)
    return Case(program, inputs, grad, grads)


KERNELS: Mapping[Any, Callable[[Call], Case | None]] = {
    aten.silu_backward.default: _silu,
    aten.gelu_backward.default: _gelu,
    aten.sigmoid_backward.default: _from_result("sigmoid"),
    aten.tanh_backward.default: _from_result("tanh"),
    aten.threshold_backward.default: _threshold,
    aten._softmax_backward_data.default: _softmax,
    aten.native_layer_norm_backward.default: _layer_norm,
}
"""The derivative kernels judged, each with how its call becomes a one-op unit."""


@dataclass(frozen=True)
class Judged:
    """One derivative kernel call's verdict: elements with a finite bound, elements
    outside, the worst ``|error| / bound``, the ratios of the elements it judged, and the
    submodule its forward ran in."""

    target: str
    elements: int
    outside: int
    worst: float
    used: np.ndarray
    module: str = ""


def judge_backward(recorder: Recorder, dtype: str, accumulate: str | None
                   ) -> list[Judged]:
    """Every recorded derivative kernel call judged on its own arguments (calls the IR
    cannot state, such as a softmax whose result is in another dtype than its input, are
    left out)."""
    found = []
    for call in recorder.calls:
        case = KERNELS[call.func](call)
        if case is None or not all(bool(torch.isfinite(t).all()) for t in case.inputs.values()):
            continue
        found.append(replace(_judge(str(call.func), case, dtype, accumulate),
                             module=call.module))
    return found


def _judge(target: str, case: Case, dtype: str, accumulate: str | None) -> Judged:
    """The kernel's results against the unit's exact VJP within its one-op budget, in the
    dtype of the unit's input (the declared accumulation only where that is ``dtype``).
    Where a wider accumulation is declared, the bound of a kernel that reads only the
    forward's input (:attr:`Case.once`) is also at most that of one rounding of the result
    computed in the wider dtype (:func:`_rounded_once`): torch's CPU SiLU and GELU
    derivative kernels compute a bfloat16 or float16 element in float32 and round it once."""
    within = next(n for n, t in TORCH_DTYPES.items() if t == case.inputs["x"].dtype)
    inputs = {n: numpy_of(t) for n, t in case.inputs.items()}
    request = Request(case.program, inputs, within, numpy_of(case.cotangent),
                      accumulate=accumulate if within == dtype else None)
    grads = {n: numpy_of(t) for n, t in case.grads.items() if n not in case.lifted}
    try:
        enclosed = enclose(request)
    except NotEnclosed:
        return _judged_exactly(target, request, grads)
    budget = fast_budget(request, enclosed)
    elements, outside, worst, used = 0, 0, 0.0, []
    for name, actual in grads.items():
        ball = enclosed.grads[name]
        bound = np.broadcast_to(budget.grads[name], actual.shape)
        if case.once and request.accumulate not in (None, request.dtype):
            bound = np.minimum(bound, _rounded_once(request, enclosed, name))
        inside, unsure = decide(actual, ball, bound)
        out = ~inside & ~unsure
        if unsure.any():
            out |= _outside_exactly(request, name, actual, bound, unsure)
        nearest = ball.mid + ball.lo
        every = ratios(actual, nearest, bound)
        elements += int(np.isfinite(bound).sum())
        outside += int(out.sum())
        worst = max(worst, float(every.max()) if every.size else 0.0)
        rounds = bound > 0
        used.append(ratios(actual[rounds], nearest[rounds], bound[rounds]))
    return Judged(target, elements, outside, worst, np.concatenate(used))


def _rounded_once(request: Request, enclosed: Enclosed, name: str) -> np.ndarray:
    """The bound of ``name``'s gradient computed in the accumulation dtype and rounded once
    to the request's (:func:`~resverify.blocks.local.once_bound`), ``e`` the unit's gradient
    budget in the wide dtype (the same inputs and cotangent, exact there)."""
    assert request.accumulate is not None
    wide = Request(request.program, request.inputs, request.accumulate, request.cotangent)
    return once_bound(fast_budget(wide, enclosed).grads[name], enclosed.grads[name],
                      request.dtype)


def _outside_exactly(request: Request, name: str, actual: np.ndarray, bound: np.ndarray,
                     asked: np.ndarray) -> np.ndarray:
    """The exact interpreter's verdict on the ``asked`` elements of ``name``'s gradient."""
    exact = evaluate(request)
    if exact.grads is None:
        raise InvalidRequest(f"the exact interpreter rejects a derivative unit: {exact.error}")
    want = np.asarray(exact.grads[name], dtype=object).reshape(actual.shape)
    return exactly_outside(actual, want, bound, asked)


def _judged_exactly(target: str, request: Request, grads: Mapping[str, np.ndarray]
                    ) -> Judged:
    """A unit the balls cannot enclose, judged by :func:`~resverify.spec.enclosure.verify`
    (the exact interpreter) within the dtype's own budget (its output, not the kernel's
    result, given as zeros and not counted)."""
    output = np.zeros(np.shape(request.cotangent), dtype=request.cotangent.dtype)
    verdict = verify(request, output, grads)
    outside = sum(1 for m in verdict.misses if m.where[5:-1] in grads)
    elements = sum(int(np.isfinite(verdict.budget.grads[n]).sum()) for n in grads)
    worst = max((float(m.bound and abs(m.actual - float(m.expected)) / m.bound)
                 for m in verdict.misses if m.where[5:-1] in grads), default=0.0)
    return Judged(target, elements, outside, worst, np.zeros(0))


def with_backward(local: Local, judged: Sequence[Judged]) -> Local:
    """``local`` with the derivative kernels judged alone, each a unit named by its call
    (``silu_backward #2``: the second call of it in the backward)."""
    seen: dict[str, int] = {}
    units = []
    for kernel in judged:
        short = kernel.target.split(".")[1]
        seen[short] = seen.get(short, 0) + 1
        units.append(Unit(f"{short} #{seen[short]}", kernel.target, kernel.elements,
                          kernel.outside, kernel.worst, kernel.module))
    return replace(local, backward=tuple(units))
