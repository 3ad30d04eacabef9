"""PyTensor adapter (``--backend pytensor``): a symbolic graph, rewritten and compiled.

A PyTensor user declares typed symbolic inputs, builds the expression, asks
``pytensor.grad`` for the gradients and compiles it all with ``pytensor.function``; the
graph rewriter (canonicalisation, stabilisation, elementwise fusion) runs before the
default Numba backend compiles it. This adapter does exactly that, with the cotangent as
one more input (``pytensor.grad(None, inputs, known_grads={out: cotangent})`` is the
VJP), and keeps each compiled function per program and dtype, since compiling costs far
more than running.

The ops are each entry's array form from :mod:`resverify.spec.ops`, with PyTensor's
``tanh`` and ``sum`` and, for ``relu``, ``maximum(x, 0)``: PyTensor has no relu of its
own, and ``maximum`` is what its users write. ``maximum`` passes the gradient of a tie to
its first argument, so relu's derivative at 0 is 1 here, not the 0 of the declared
convention (docs/findings.md).

PyTensor has no normalization function (``pytensor.tensor`` has no layer_norm; PyMC and
its users compose it), so ``layer_norm`` and ``rms_norm`` are composed the way its users
write them: ``c = x - x.mean(axis=-1, keepdims=True)``, then
``c / pt.sqrt(pt.mean(c**2, axis=-1, keepdims=True) + eps)`` (rms_norm: c = x). ε is a
constant of the request's dtype. The ops' shared array form is not used for them: it reads
``x.shape[-1]`` as a number, which a symbolic shape is not; the static shape is known here.

Two adapter choices, with their reasons:

* the graph is built under ``config.change_flags(floatX=dtype)``, as PyTensor's
  documentation tells float32 users to: under the default ``floatX=float64`` a float32
  input times a Python float that float32 cannot hold exactly (α = 1/3) becomes float64,
  and the block's output silently changes dtype (docs/findings.md);
* only float64 and float32 are claimed: the default Numba backend cannot compile float16,
  and PyTensor has no bfloat16.

Install with ``pip install 'resverify[pytensor]'``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Hashable
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.impl.about import distribution_version
from resverify.impl.backend import Capabilities
from resverify.impl.compile_cache import CompiledCache
from resverify.impl.interpret import interpret, node_alpha
from resverify.spec.errors import UsageError
from resverify.spec.ir import Node, Program, infer_shapes
from resverify.spec.ops import OP_TABLE, ArrayNamespace
from resverify.spec.request import Request, Result, Value

CLAIMED_OPS = ("add", "residual_add", "mul", "scale", "linear", "relu", "tanh", "sum",
               "layer_norm", "rms_norm", "sigmoid", "exp", "neg")
"""Every op of the IR but the layout ops, silu and the GELUs (checked in both claimed dtypes:
docs/findings.md)."""

NORMS = {"layer_norm": True, "rms_norm": False}
"""The normalization ops, and whether each centres its rows."""

class PytensorBackend:
    """Runs requests as compiled PyTensor functions (the default mode: Numba)."""

    name = "pytensor"
    capabilities = Capabilities(dtypes=("float64", "float32"), ops=CLAIMED_OPS)

    def __init__(self) -> None:
        try:
            self.pytensor = importlib.import_module("pytensor")
            self.pt = importlib.import_module("pytensor.tensor")
        except ImportError:
            raise UsageError(
                "the pytensor backend needs PyTensor: pip install 'resverify[pytensor]'"
            ) from None
        self.xp = ArrayNamespace(self.pt, relu=self.relu)
        self.cache: CompiledCache[Any] = CompiledCache()

    def about(self) -> dict[str, str]:
        config = self.pytensor.config
        return {"library": "pytensor", "version": distribution_version("pytensor"),
                "device": "cpu", "mode": str(config.mode), "linker": str(config.linker),
                "floatX": "the request's dtype (config.change_flags)",
                "cast_policy": str(config.cast_policy)}

    def relu(self, a: Any) -> Any:
        """``maximum(a, 0)``: PyTensor users' relu (derivative 1 at 0, see the module)."""
        return self.pt.maximum(a, 0)

    def norm(self, x: Any, eps: Fraction, centred: bool) -> Any:
        """layer_norm (``centred``) or rms_norm over the last axis, as PyTensor users compose
        it; empty rows (static last axis 0) are returned as they are."""
        pt = self.pt
        if x.type.shape[-1] == 0:
            return x
        c = x - x.mean(axis=-1, keepdims=True) if centred else x
        e = pt.constant(np.asarray(float(eps), dtype=x.dtype))
        return c / pt.sqrt(pt.mean(c**2, axis=-1, keepdims=True) + e)

    def _apply(self, node: Node, args: list[Any]) -> Any:
        """The entry's array form (the norms: :meth:`norm`); shapes were checked beforehand
        on the program (:func:`~resverify.spec.ir.infer_shapes`), since symbolic ``.shape``
        is not a tuple."""
        if node.op in NORMS:
            assert node.eps is not None
            return self.norm(args[0], node.eps, NORMS[node.op])
        return OP_TABLE[node.op].array(self.xp, args, node_alpha(node))

    def _build(self, program: Program, dtype: str) -> Any:
        pytensor, pt = self.pytensor, self.pt
        with pytensor.config.change_flags(floatX=dtype):
            symbols = [pt.tensor(i.name, dtype=dtype, shape=i.shape) for i in program.inputs]
            out = interpret(program, dict(zip(program.input_names, symbols, strict=True)),
                            self._apply)
            seed = pt.tensor("cotangent", dtype=dtype, shape=infer_shapes(program)[program.output])
            grads = pytensor.grad(None, symbols, known_grads={out: seed},
                                  disconnected_inputs="ignore", return_disconnected="zero")
            return pytensor.function([*symbols, seed], [out, *grads])

    def run(self, request: Request) -> Result:
        refused = self.capabilities.refusal(request, self.name)
        if refused is not None:
            return refused
        program, dtype = request.program, request.dtype
        key: Hashable = (program, dtype)
        names = program.input_names
        values = [np.array(request.inputs[n], dtype=dtype, copy=True) for n in names]
        with warnings.catch_warnings():
            # Numba compiles lazily, on the first call, and advises that np.dot or np.vdot is faster
            # on contiguous arrays; advice on speed is not an answer, and a run whose
            # warnings are errors (pytest's -W error) must not fail on it
            warnings.filterwarnings("ignore", message=r".* is faster on contiguous arrays")
            function = self.cache.get(key, lambda: self._build(program, dtype))
            out, *grads = function(*values, np.array(request.cotangent, dtype=dtype, copy=True))
        return Value(np.array(out, copy=True),
                     grads={n: np.array(g, copy=True) for n, g in zip(names, grads, strict=True)})
