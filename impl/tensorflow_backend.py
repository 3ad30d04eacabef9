"""TensorFlow adapter (``--backend tensorflow``): the program under a ``tf.GradientTape``.

Written the way a Keras user's residual block runs: eager tensors on the CPU, the forward
recorded by a ``GradientTape`` and pulled back with ``tape.gradient(out, inputs,
output_gradients=cotangent)``. Every op but one is its entry's array form in
:mod:`resverify.spec.ops` with TensorFlow's ``nn.relu``, ``math.tanh`` and
``reduce_sum``, and Keras' normalizations (statistics in at least float32, as Keras
computes them for half-precision inputs); ``linear`` is ``tf.tensordot(x, w, axes=1)``, which is how
``keras.layers.Dense`` multiplies an input of any rank (``tf.matmul``, behind ``@``,
refuses a vector and needs batch ranks to match). An input the output does not depend on
gets a zero gradient (``UnconnectedGradients.ZERO``), as in every other adapter.

Forward mode: the forward runs inside a ``tf.autodiff.ForwardAccumulator`` watching the
inputs with their tangents (itself inside the tape, so one forward pass gives the output,
the output tangent ``acc.jvp(out)`` and, through the tape, the gradients), which is how
TensorFlow's own guide computes a JVP.

Install with ``pip install 'resverify[tensorflow]'`` (the ``tensorflow-cpu`` build).
TensorFlow logs C++ start-up messages at import; the adapter quiets everything below
errors unless ``TF_CPP_MIN_LOG_LEVEL`` is already set. Numerics settings that the report
records (:meth:`TensorflowBackend.about`): TF32 execution (on by default, used only on
GPUs), op determinism, and oneDNN's custom CPU kernels (``TF_ENABLE_ONEDNN_OPTS``), which
TensorFlow itself warns "may give slightly different numerical results".
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.interpret import array_apply, interpret
from resverify.spec.errors import ShapeMismatch, UsageError
from resverify.spec.ir import Node
from resverify.spec.ops import ArrayNamespace
from resverify.spec.request import Request, Result, ResultError, Value


def _import_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return importlib.import_module("tensorflow")
    except ImportError:
        raise UsageError(
            "the tensorflow backend needs TensorFlow: pip install 'resverify[tensorflow]'"
        ) from None




class TensorflowBackend:
    """Runs requests eagerly on the CPU with ``tf.GradientTape``."""

    name = "tensorflow"
    capabilities = Capabilities(dtypes=("float64", "float32", "float16", "bfloat16"),
                                modes=("vjp", "jvp"))

    def __init__(self) -> None:
        self.tf = _import_tensorflow()
        self.xp = ArrayNamespace(self.tf.math, self.tf.nn, sum=self.tf.reduce_sum,
                                 matmul=self.matmul, layer_norm=self.layer_norm,
                                 rms_norm=self.rms_norm, reshape=self.tf.reshape,
                                 permute_dims=self.tf.transpose,
                                 broadcast_to=self.tf.broadcast_to, concat=self.tf.concat,
                                 cast=lambda x, dtype: self.tf.cast(x, getattr(self.tf, dtype)),
                                 take=lambda x, i, axis: self.tf.gather(x, i, axis=axis),
                                 gelu_erf=lambda a: self.tf.nn.gelu(a, approximate=False),
                                 gelu_tanh=lambda a: self.tf.nn.gelu(a, approximate=True))

    def about(self) -> dict[str, str]:
        tf = self.tf
        determinism = getattr(importlib.import_module("tensorflow.python.framework.config"),
                              "is_op_determinism_enabled", None)
        return {
            "library": "tensorflow", "version": tf.__version__, "device": "cpu",
            "tensor_float_32_execution": str(
                tf.config.experimental.tensor_float_32_execution_enabled()),
            "op_determinism": "unknown" if determinism is None else str(determinism()),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        }

    def layer_norm(self, x: Any, eps: float) -> Any:
        """As ``keras.layers.LayerNormalization`` (no affine part): ``tf.nn.moments`` over the
        last axis and ``rsqrt``, computed in at least float32 and rounded back once."""
        tf = self.tf
        wide = self._wide(x)
        mean, variance = tf.nn.moments(wide, axes=[-1], keepdims=True)
        return tf.cast((wide - mean) * tf.math.rsqrt(variance + eps), x.dtype)

    def rms_norm(self, x: Any, eps: float) -> Any:
        """As ``keras.ops.rms_normalization``: ``x · rsqrt(mean(x²) + ε)``, in at least
        float32."""
        tf = self.tf
        wide = self._wide(x)
        mean_square = tf.reduce_mean(tf.square(wide), axis=-1, keepdims=True)
        return tf.cast(wide * tf.math.rsqrt(mean_square + eps), x.dtype)

    def _wide(self, x: Any) -> Any:
        return x if x.dtype == self.tf.float64 else self.tf.cast(x, self.tf.float32)

    def array(self, values: np.ndarray, dtype: str) -> Any:
        """A TensorFlow tensor in ``dtype`` (bfloat16 arrives in float32 storage: exact)."""
        return self.tf.cast(self.tf.constant(np.array(values, copy=True)), dtype)

    def numpy(self, value: Any) -> np.ndarray:
        """A NumPy copy in TensorFlow's dtype (bfloat16 widened exactly to float32)."""
        if value.dtype == self.tf.bfloat16:
            value = self.tf.cast(value, self.tf.float32)
        return np.array(value.numpy(), copy=True)

    def matmul(self, x: Any, w: Any) -> Any:
        """``linear``: ``tf.tensordot(x, w, axes=1)``, as ``keras.layers.Dense`` multiplies
        (see the module docstring)."""
        return self.tf.tensordot(x, w, axes=1)

    def _apply(self, node: Node, args: list[Any]) -> Any:
        return array_apply(self.xp, node, args)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        tf = self.tf
        names = request.program.input_names
        with tf.device("/CPU:0"):
            leaves = [self.array(request.inputs[n], request.dtype) for n in names]
            tangents = None if request.tangents is None else [
                self.array(request.tangents[n], request.dtype) for n in names]
            with tf.GradientTape() as tape, self._accumulator(leaves, tangents) as acc:
                tape.watch(leaves)
                try:
                    out = interpret(request.program, dict(zip(names, leaves, strict=True)),
                                    self._apply)
                except ShapeMismatch as exc:
                    return ResultError.mismatch(exc)
            grads = tape.gradient(out, leaves,
                                  output_gradients=self.array(request.cotangent, request.dtype),
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            tangent = None if acc is None else self.numpy(
                acc.jvp(out, unconnected_gradients=tf.UnconnectedGradients.ZERO))
        return Value(self.numpy(out),
                     grads={n: self.numpy(g) for n, g in zip(names, grads, strict=True)},
                     tangent=tangent)

    def _accumulator(self, leaves: list[Any], tangents: list[Any] | None) -> Any:
        """A ``ForwardAccumulator`` of the leaves' tangents, or a null context (yielding
        None) for a reverse-mode request."""
        if tangents is None:
            return contextlib.nullcontext()
        return self.tf.autodiff.ForwardAccumulator(leaves, tangents)
