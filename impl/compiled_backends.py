"""Compiled variants of the torch and JAX adapters: ``torch-compile`` and ``jax-jit``.

Eager engines run one kernel per op; a compiler sees the whole residual block and may fuse
the ops, reorder a sum, contract ``a*b + c`` into one fused multiply-add or pick other
kernels. That is where real numerical differences live, so each compiled variant is its
own backend, with exactly its eager twin's capabilities: the same requests, checked
against the same exact spec and the same budgets (docs/findings.md says what the budgets
allow a compiler to change, and what they do not).

* ``torch-compile``: ``torch.compile(fullgraph=True, dynamic=False)`` with the inductor
  backend (C++ kernels on the CPU), then ``backward`` through the compiled graph, as a
  training loop runs a compiled module. ``fullgraph`` makes a graph break an error instead
  of a silent fall-back to eager code, so an answer always comes from compiled code.
* ``jax-jit``: one ``jax.jit`` around the forward and its VJP together, as a jitted
  training step is written; for a forward-mode request the same jitted step also runs
  ``jax.jvp``, so the output tangent comes from compiled code too.

* forward mode in ``torch-compile``: ``torch.func.jvp`` of the program, itself under
  ``torch.compile(fullgraph=True)`` (dynamo traces the functorch transform), a second
  compiled function per program and dtype, made only when a forward-mode request comes.

Compiling costs seconds (inductor) or tens of milliseconds (XLA) per program, so each
variant keeps its compiled functions per program, input order and dtype (and, through the
compilers' own caches, per shape) in a small LRU cache: examples that repeat a program
structure do not compile again. Every cached torch function gets its own code object,
because dynamo caches compiled frames per code object and falls back after a few
recompilations of one.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from itertools import count
from typing import Any

import numpy as np

from resverify.impl.about import jax_about, torch_about
from resverify.impl.compile_cache import CompiledCache
from resverify.impl.functional_backends import JaxBackend
from resverify.impl.interpret import interpret
from resverify.impl.torch_backend import TorchBackend, torch_deprecations_ignored
from resverify.spec.ir import Program
from resverify.spec.request import Request, Result, Value, storage_dtype

_serial = count()


def program_function(program: Program, apply: Callable[[Any, list[Any]], Any]) -> Any:
    """``f(*inputs) -> output`` for ``program`` in its input order, with a code object of
    its own (named after the program) so that a tracing compiler caches it separately."""
    names = program.input_names

    def resverify_program(*values: Any) -> Any:
        return interpret(program, dict(zip(names, values, strict=True)), apply)

    return own_code(resverify_program)


def own_code(function: Any) -> Any:
    """A copy of ``function`` with a code object of its own (a new serial number in its
    name): a closure made per program would otherwise share one code object with every
    other program's, and dynamo gives up on a code object after a few recompilations."""
    code = function.__code__.replace(co_name=f"{function.__name__}_{next(_serial)}")
    return types.FunctionType(code, function.__globals__, code.co_name, None,
                              function.__closure__)


class TorchCompileBackend(TorchBackend):
    """``--backend torch-compile``: torch's eager adapter, with the program compiled by
    ``torch.compile`` (inductor) before its forward and backward run."""

    def __init__(self, device: str = "cpu", compiler_backend: str = "inductor") -> None:
        super().__init__(device)
        self.name = "torch-compile" if device == "cpu" else f"torch-compile-{device}"
        self.compiler_backend = compiler_backend
        self.cache: CompiledCache[Any] = CompiledCache()

    def about(self) -> dict[str, str]:
        return {**torch_about(self), "compiler": "torch.compile",
                "compiler_backend": self.compiler_backend, "fullgraph": "True",
                "dynamic": "False"}

    def _compiled(self, request: Request) -> Any:
        import torch

        def build() -> Any:
            return torch.compile(program_function(request.program, self._apply),
                                 backend=self.compiler_backend, fullgraph=True, dynamic=False)

        return self.cache.get((request.program, request.dtype), build)

    def _compiled_jvp(self, request: Request) -> Any:
        import torch

        def build() -> Any:
            program = program_function(request.program, self._apply)

            def resverify_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
                return torch.func.jvp(program, primals, tangents)[1]

            return torch.compile(own_code(resverify_jvp), backend=self.compiler_backend,
                                 fullgraph=True, dynamic=False)

        return self.cache.get((request.program, request.dtype, "jvp"), build)

    def _jvp(self, request: Request) -> np.ndarray | None:
        """``J·t`` by the compiled ``torch.func.jvp``, or None for a reverse-mode request."""
        if request.tangents is None:
            return None
        import torch

        names = request.program.input_names
        primals = tuple(self._tensor(request.inputs[n], request.dtype, False) for n in names)
        tangents = tuple(self._tensor(request.tangents[n], request.dtype, False) for n in names)
        with torch_deprecations_ignored():
            tangent = self._compiled_jvp(request)(primals, tangents)
        # as in eager torch: a rank-0 tangent may come back float64 (docs/findings.md)
        return self._numpy(tangent.to(getattr(torch, request.dtype)))

    def run(self, request: Request) -> Result:
        refused = self.capabilities.refusal(request, self.name)
        if refused is not None:
            return refused
        names = request.program.input_names
        leaves = [self._tensor(request.inputs[n], request.dtype, True) for n in names]
        with torch_deprecations_ignored():
            out = self._compiled(request)(*leaves)
        if out.requires_grad:
            out.backward(self._tensor(request.cotangent, request.dtype, False))
        grads = {n: self._numpy(t.grad) if t.grad is not None
                 else np.zeros(t.shape, storage_dtype(request.dtype))
                 for n, t in zip(names, leaves, strict=True)}
        return Value(self._numpy(out), grads=grads, tangent=self._jvp(request))


class JaxJitBackend(JaxBackend):
    """``--backend jax-jit``: the JAX adapter with the forward and the VJP under one
    ``jax.jit``."""

    name = "jax-jit"

    def __init__(self) -> None:
        super().__init__()
        self.cache: CompiledCache[Any] = CompiledCache()

    def about(self) -> dict[str, str]:
        return {**jax_about(self), "compiler": "jax.jit",
                "compiler_backend": "xla"}

    def _compiled(self, program: Program, forward_mode: bool) -> Any:
        jax = self.jax

        def build() -> Any:
            forward = program_function(program, self._apply)

            def step(primals: list[Any], cotangent: Any,
                     tangents: list[Any] | None) -> tuple[Any, Any, Any]:
                out, pullback = jax.vjp(forward, *primals)
                tangent = None
                if tangents is not None:
                    _, tangent = jax.jvp(forward, tuple(primals), tuple(tangents))
                return out, pullback(cotangent), tangent

            return jax.jit(step)

        return self.cache.get((program, forward_mode), build)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.refusal(request, self.name)
        if refused is not None:
            return refused
        names = request.program.input_names
        primals = [self.array(request.inputs[n], request.dtype) for n in names]
        cotangent = self.array(request.cotangent, request.dtype)
        tangents = None if request.tangents is None else [
            self.array(request.tangents[n], request.dtype) for n in names]
        out, grads, tangent = self._compiled(request.program, request.forward_mode)(
            primals, cotangent, tangents)
        return Value(self.numpy(out),
                     grads={n: self.numpy(g) for n, g in zip(names, grads, strict=True)},
                     tangent=None if tangent is None else self.numpy(tangent))
