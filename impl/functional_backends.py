"""Adapters for functional autodiff libraries: JAX (``jax.vjp``, ``jax.jvp``) and HIPS
autograd (``make_vjp``, ``make_jvp``).

Both see the program as a pure function of its inputs, written against a NumPy-like
module, and pull the cotangent back through it; a forward-mode request also pushes its
tangents forward through the same function with the library's own JVP. Each op is
written once for every array library in its entry in :mod:`resverify.spec.ops`; only the
array module, the :class:`ArrayNamespace` (relu is each library's own, with derivative 0
at 0) and the VJP and JVP calls differ. The norms are JAX's two-pass composition (below)
and, for autograd, the op entries' own composition.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.interpret import array_apply, interpret
from resverify.spec.errors import ShapeMismatch, UsageError
from resverify.spec.ir import Node
from resverify.spec.ops import ArrayNamespace
from resverify.spec.ops.cast import rounded_to
from resverify.spec.request import Request, Result, ResultError, Value

Pullback = Callable[[Any], Sequence[Any]]


def _load(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"this backend needs {module}: pip install 'resverify[{extra}]'") from None


def _autograd_sigmoid() -> Callable[[Any], Any]:
    """SciPy's ``expit`` as an autograd primitive with both rules, ``ans (1 - ans)`` times
    the cotangent or the tangent: ``autograd.scipy.special.expit`` has no JVP (autograd
    1.9), and ``1/(1 + exp(-x))`` composed would differentiate to NaN where ``exp``
    overflows."""
    extend = _load("autograd.extend", "autograd")
    expit = _load("scipy.special", "autograd").expit
    sigmoid = extend.primitive(lambda x: expit(x))
    extend.defvjp(sigmoid, lambda ans, x: lambda g: g * ans * (1 - ans))
    extend.defjvp(sigmoid, lambda g, ans, x: g * ans * (1 - ans))
    return sigmoid


def _autograd_cast() -> Callable[[Any, str], Any]:
    """A cast as an autograd primitive (autograd 1.9's ``astype`` has no JVP): the value
    rounded to the target dtype, the cotangent rounded back to the argument's, the tangent
    rounded as the value."""
    extend = _load("autograd.extend", "autograd")
    cast = extend.primitive(lambda x, dtype: rounded_to(x, dtype))
    extend.defvjp(cast, lambda ans, x, dtype: lambda g: np.asarray(g).astype(x.dtype))
    extend.defjvp(cast, lambda g, ans, x, dtype: rounded_to(g, dtype))
    return cast


def _autograd_gelu_erf() -> Callable[[Any], Any]:
    """autograd has no GELU, and its ``scipy.special.erf`` no JVP (autograd 1.9): SciPy's
    ``a (1 + erf(a/√2))/2``, as torch writes it, as a primitive with both rules, the slope
    ``(1 + erf(a/√2))/2 + a exp(-a²/2)/√(2π)`` times the cotangent or the tangent."""
    extend = _load("autograd.extend", "autograd")
    erf = _load("scipy.special", "autograd").erf
    gelu = extend.primitive(lambda x: x * (1 + erf(x / math.sqrt(2))) / 2)

    def slope(x: Any) -> Any:
        return (1 + erf(x / math.sqrt(2))) / 2 + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)

    extend.defvjp(gelu, lambda ans, x: lambda g: g * slope(x))
    extend.defjvp(gelu, lambda g, ans, x: g * slope(x))
    return gelu


def _autograd_softmax() -> Callable[[Any, int], Any]:
    """autograd has no softmax: ``exp(x - max x) / Σ`` as libraries compute it, as a
    primitive with both rules, ``ans (g - Σ g ans)`` over the axis (composed, the max's
    path would add its own roundings to the gradient)."""
    extend = _load("autograd.extend", "autograd")

    def value(x: Any, axis: int) -> Any:
        with np.errstate(under="ignore"):
            e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
        return e / np.sum(e, axis=axis, keepdims=True)

    def rule(g: Any, ans: Any, axis: int) -> Any:
        return ans * (g - np.sum(g * ans, axis=axis, keepdims=True))

    softmax = extend.primitive(value)
    extend.defvjp(softmax, lambda ans, x, axis: lambda g: rule(g, ans, axis))
    extend.defjvp(softmax, lambda g, ans, x, axis: rule(g, ans, axis))
    return softmax


class _Functional:
    """Interpret the program with ``xp`` (a NumPy-like module) and pull back with ``vjp``."""

    name = ""
    capabilities = Capabilities()
    xp: Any
    namespace: ArrayNamespace

    def vjp(self, fn: Callable[..., Any], primals: list[Any]) -> tuple[Any, Pullback]:
        raise NotImplementedError

    def jvp(self, fn: Callable[..., Any], primals: list[Any], tangents: list[Any]) -> Any:
        """The output tangent of ``fn`` at ``primals`` along ``tangents``."""
        raise NotImplementedError

    def array(self, values: np.ndarray, dtype: str) -> Any:
        return self.xp.asarray(np.array(values, copy=True), dtype=dtype)

    def _apply(self, node: Node, args: list[Any]) -> Any:
        return array_apply(self.namespace, node, args)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        names = list(request.inputs)
        primals = [self.array(request.inputs[n], request.dtype) for n in names]

        def fn(*values: Any) -> Any:
            return interpret(request.program, dict(zip(names, values, strict=True)), self._apply)

        try:
            out, pullback = self.vjp(fn, primals)
        except ShapeMismatch as exc:
            return ResultError.mismatch(exc)
        # the cotangent in the output's dtype (a program may end in a cast)
        grads = pullback(self.array(request.cotangent, request.dtype).astype(out.dtype))
        tangent = None
        if request.tangents is not None:
            tangents = [self.array(request.tangents[n], request.dtype) for n in names]
            tangent = self.numpy(self.jvp(fn, primals, tangents))
        return Value(self.numpy(out),
                     grads={n: self.numpy(g) for n, g in zip(names, grads, strict=True)},
                     tangent=tangent)

    @staticmethod
    def numpy(value: Any) -> np.ndarray:
        """A NumPy copy in the library's own dtype (bfloat16 widened exactly to float32)."""
        array = np.array(value, copy=True)
        return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


class JaxBackend(_Functional):
    """``--backend jax``: ``jax.vjp`` on the CPU (64-bit floats switched on for float64)."""

    name = "jax"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16", "bfloat16"),
                                modes=("vjp", "jvp"))

    def __init__(self) -> None:
        self.jax = _load("jax", "jax")
        self.jax.config.update("jax_enable_x64", True)
        self.xp = _load("jax.numpy", "jax")
        gelu = self.jax.nn.gelu
        self.namespace = ArrayNamespace(self.xp, self.jax.nn, layer_norm=self.layer_norm,
                                        rms_norm=self.rms_norm,
                                        cast=lambda a, dtype: a.astype(getattr(self.xp, dtype)),
                                        rsqrt=self.jax.lax.rsqrt,
                                        gelu_erf=lambda a: gelu(a, approximate=False),
                                        gelu_tanh=lambda a: gelu(a, approximate=True))

    def layer_norm(self, x: Any, eps: float) -> Any:
        return self._norm(x, eps, centred=True)

    def rms_norm(self, x: Any, eps: float) -> Any:
        return self._norm(x, eps, centred=False)

    def _norm(self, x: Any, eps: float, centred: bool) -> Any:
        """JAX has no normalization of its own (``jax.nn.standardize`` takes the variance as
        ``mean(x²) - mean(x)²``, which cancels for shifted rows): two passes, the statistics
        of float16 and bfloat16 rows in float32 as Flax and PyTorch do (in float16 the
        VJP's ``r³`` overflows for a variance below about 6e-4), rounded back once."""
        wide = x.astype(self.xp.promote_types(x.dtype, self.xp.float32))
        c = wide - wide.mean(axis=-1, keepdims=True) if centred else wide
        r = self.jax.lax.rsqrt((c * c).mean(axis=-1, keepdims=True) + eps)
        return (c * r).astype(x.dtype)

    def vjp(self, fn: Callable[..., Any], primals: list[Any]) -> tuple[Any, Pullback]:
        out, pullback = self.jax.vjp(fn, *primals)
        return out, pullback

    def jvp(self, fn: Callable[..., Any], primals: list[Any], tangents: list[Any]) -> Any:
        _, tangent = self.jax.jvp(fn, tuple(primals), tuple(tangents))
        return tangent


class AutogradBackend(_Functional):
    """``--backend autograd``: HIPS autograd's ``make_vjp`` over ``autograd.numpy``."""

    name = "autograd"
    capabilities = Capabilities(dtypes=("float64", "float32"), modes=("vjp", "jvp"))

    def __init__(self) -> None:
        self.autograd = _load("autograd", "autograd")
        self.xp = _load("autograd.numpy", "autograd")
        sigmoid = _autograd_sigmoid()
        self.namespace = ArrayNamespace(self.xp, relu=self.relu, sigmoid=sigmoid,
                                        silu=lambda a: a * sigmoid(a),
                                        gelu_erf=_autograd_gelu_erf(),
                                        gelu_tanh=self.gelu_tanh,
                                        softmax=_autograd_softmax(),
                                        cast=_autograd_cast(),
                                        take=lambda a, i, axis: a[(slice(None),) * axis + (i,)],
                                        rsqrt=lambda a: 1 / self.xp.sqrt(a),
                                        permute_dims=self.xp.transpose,
                                        concat=self.xp.concatenate,
                                        broadcast_to=self.broadcast_to, where=self.where)

    def gelu_tanh(self, a: Any) -> Any:
        """``a (1 + tanh(√(2/π)(a + 0.044715 a³)))/2``, as torch writes it."""
        return a * (1 + self.xp.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) / 2

    def relu(self, a: Any) -> Any:
        """autograd has no relu of its own: ``a`` times the mask ``a > 0``, derivative 0 at
        0. The values are bit for bit those of ``where(a > 0, a, 0.0 * a)`` (both give
        ``0·a`` off the mask, NaN for -inf), but ``where``'s JVP in autograd 1.9 pads with
        ``anp.zeros(g.shape)``, float64, and would widen a float32 tangent to float64."""
        return a * (a > 0)

    def broadcast_to(self, a: Any, shape: tuple[int, ...]) -> Any:
        """``a`` times ones of ``shape`` in its dtype (each element times 1, exactly):
        autograd's own ``broadcast_to`` has no VJP for added leading axes ("Can't handle
        extra leading dims") nor for an axis stretched to length 0; its product's VJP
        sums the copies back as add's does."""
        return a * self.xp.ones(shape, dtype=a.dtype)

    def where(self, mask: Any, a: Any, b: Any) -> Any:
        """``where`` with both sides broadcast first (:meth:`broadcast_to`): autograd's own
        VJP of ``where`` does not sum a broadcast side's gradient back to its shape."""
        shape = self.xp.broadcast(mask, a, b).shape
        return self.xp.where(mask, self.broadcast_to(a, shape), self.broadcast_to(b, shape))

    def vjp(self, fn: Callable[..., Any], primals: list[Any]) -> tuple[Any, Pullback]:
        pullback, out = self.autograd.make_vjp(lambda values: fn(*values))(list(primals))
        return out, pullback

    def jvp(self, fn: Callable[..., Any], primals: list[Any], tangents: list[Any]) -> Any:
        push = self.autograd.make_jvp(lambda values: fn(*values))(list(primals))
        _, tangent = push(list(tangents))
        return tangent
