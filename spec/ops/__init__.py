"""Every op of the IR, one module each: everything resverify knows about an op is its entry.

An entry is a small class (a subclass of :class:`~resverify.spec.ops.base.Op`, in its own
module of this package), one instance per op in :data:`OP_TABLE`, holding side by side:

* ``name``, ``arity`` and ``attribute``, the name of the op's one exact rational attribute
  if it takes one (``alpha`` for scale, ``eps`` for the norms; :meth:`Op.refuses` says
  which values it refuses), and :meth:`Op.shape`, the shape rule (raises
  :class:`~resverify.spec.errors.ShapeMismatch`);
* :meth:`Op.exact`, :meth:`Op.exact_vjp` and :meth:`Op.exact_jvp`, the exact forward, VJP
  (reverse mode, ``Jᵀ ȳ``) and JVP (forward mode, ``J t``) on object arrays of Fractions
  (or SymPy symbols), with ``rational`` saying whether they stay rational and ``smooth``
  whether the derivative is one formula everywhere. The JVP uses the same factors as the
  VJP (the carried output, the same enclosed ``1/sqrt``), so ``⟨ȳ, J t⟩ = ⟨Jᵀ ȳ, t⟩``
  holds exactly in the spec even where a value is enclosed;
* :meth:`Op.error`, :meth:`Op.error_vjp` and :meth:`Op.error_jvp`, how the exact
  interpreter's approximation error (non-zero only through tanh and the norms' ``1/sqrt``)
  passes through the op;
* :meth:`Op.budget`, :meth:`Op.budget_vjp` and :meth:`Op.budget_jvp`, the floating-point
  error budget rules (built from :mod:`resverify.spec.rounding`); the tangent's is a
  forward error analysis like the value's, since ``J t`` is computed alongside the value
  from products of values and tangents;
* :meth:`Op.enclose` and :meth:`Op.enclose_vjp`, the fast oracle's rules on balls (built
  from :mod:`resverify.spec.ball`; :mod:`resverify.spec.enclosure` runs them), and what
  that oracle's trace and slack need to know of the op (``exact_output_in_trace``,
  ``output_read_as_size``, ``budget_reads_args``, ``exact_args_in_trace``,
  ``slack_reads_lower``, :meth:`Op.slack_rules`);
* :meth:`Op.symbolic`, the forward value from SymPy primitives, which
  :mod:`resverify.spec.derive` differentiates to check the hand-written VJP;
* :meth:`Op.numpy`, the reference NumPy forward, returning its local VJP beside it (the
  Tensor graph of :mod:`resverify.impl.ops` calls it), and :meth:`Op.numpy_jvp`, its
  forward-mode rule (the output tangent from the argument tangents, in their dtype);
* :meth:`Op.array`, the op in any array library with NumPy operators (torch, jax, HIPS
  autograd), given the library's few functions as an :class:`ArrayNamespace`, which reads
  each by its name (by default the op is the library's function of its own name);
* what lists the op: ``families``, the branch families of the property suite's strategies
  it serves (:data:`resverify.properties.strategies.FAMILY_OPS`), and ``norm``, whether it
  is a normalisation (the built-in backends that lack norms claim every op but these);
* ``samples``: argument shapes the generic op tests (``tests/spec/ops/test_table.py``) run it on.

Every consumer reads these entries: the IR (:mod:`resverify.spec.ir`), the exact
interpreter (:mod:`resverify.spec.exact`), the budget (:mod:`resverify.spec.budget`), the
fast oracle (:mod:`resverify.spec.enclosure`), the SymPy derivation
(:mod:`resverify.spec.derive`), the protocol schema's op list
(:func:`resverify.spec.schema.protocol_schema`), the reference (:mod:`resverify.impl.ops`),
the array-library adapters (:mod:`resverify.impl.interpret`), the backends' claims
(:mod:`resverify.impl.registry`) and the strategies. Adding an op is one module here, its
line in :data:`OP_TABLE`, and its sample line in the tests.

Two bases state what a family of ops shares, so an entry states each rule once:
:class:`~resverify.spec.ops.elementwise.Elementwise`, for a smooth unary op, derives the VJP
and the JVP from one slope; :class:`~resverify.spec.ops.linear_map.LinearMap` (add,
residual_add, scale, sum) and :class:`~resverify.spec.ops.linear_map.Bilinear` (mul,
linear) derive the exact, symbolic, reference and array forms from one value function and
one transpose, and the forward-mode rules from the op's linear map (all but a bilinear op's
budget, which is its own arithmetic).

The reference NumPy rule sits here, in ``spec``, beside the exact rule it is checked
against, because ``spec`` may not import ``impl``: an entry can only be whole on this side.
It is plain NumPy on arrays; the autograd graph stays in :mod:`resverify.impl.tensor`.
"""

from __future__ import annotations

from collections.abc import Mapping

from resverify.spec.ops.add import Add
from resverify.spec.ops.attributes import Params, Sample
from resverify.spec.ops.base import (
    ArrayNamespace,
    Op,
    Pullback,
    Site,
    broadcast_shapes,
    same_shape,
    unbroadcast,
)
from resverify.spec.ops.batch_norm import BatchNorm
from resverify.spec.ops.cast import Cast
from resverify.spec.ops.cat import Cat
from resverify.spec.ops.conv2d import Conv2d
from resverify.spec.ops.embedding import Embedding
from resverify.spec.ops.exp import EXP_ULPS, Exp
from resverify.spec.ops.expand import Expand
from resverify.spec.ops.expand_in_dtype import ExpandInDtype
from resverify.spec.ops.gelu_erf import GELU_ERF_ULPS, GeluErf
from resverify.spec.ops.gelu_tanh import GELU_TANH_ULPS, GeluTanh
from resverify.spec.ops.layer_norm import SQRT_ULPS, LayerNorm
from resverify.spec.ops.linear import Linear
from resverify.spec.ops.masked_softmax import MaskedSoftmax
from resverify.spec.ops.matmul import Matmul
from resverify.spec.ops.mul import Mul
from resverify.spec.ops.neg import Neg
from resverify.spec.ops.permute import Permute
from resverify.spec.ops.relu import Relu
from resverify.spec.ops.reshape import Reshape
from resverify.spec.ops.residual_add import ResidualAdd
from resverify.spec.ops.rms_norm import RmsNorm
from resverify.spec.ops.rsqrt import Rsqrt
from resverify.spec.ops.scale import Scale
from resverify.spec.ops.sigmoid import SIGMOID_ULPS, Sigmoid
from resverify.spec.ops.silu import SILU_ULPS, Silu
from resverify.spec.ops.slice import Slice
from resverify.spec.ops.softmax import SOFTMAX_EXP_ULPS, Softmax
from resverify.spec.ops.sum import Sum
from resverify.spec.ops.sum_axes import SumAxes
from resverify.spec.ops.tanh import TANH_ULPS, Tanh
from resverify.spec.ops.where import Where

__all__ = [
    "EXP_ULPS",
    "GELU_ERF_ULPS",
    "GELU_TANH_ULPS",
    "OP_TABLE",
    "SIGMOID_ULPS",
    "SILU_ULPS",
    "SOFTMAX_EXP_ULPS",
    "SQRT_ULPS",
    "TANH_ULPS",
    "Add",
    "ArrayNamespace",
    "BatchNorm",
    "Cast",
    "Cat",
    "Conv2d",
    "Embedding",
    "Exp",
    "Expand",
    "ExpandInDtype",
    "GeluErf",
    "GeluTanh",
    "LayerNorm",
    "Linear",
    "MaskedSoftmax",
    "Matmul",
    "Mul",
    "Neg",
    "Op",
    "Params",
    "Permute",
    "Pullback",
    "Relu",
    "Reshape",
    "ResidualAdd",
    "RmsNorm",
    "Rsqrt",
    "Sample",
    "Scale",
    "Sigmoid",
    "Silu",
    "Site",
    "Slice",
    "Softmax",
    "Sum",
    "SumAxes",
    "Tanh",
    "Where",
    "broadcast_shapes",
    "same_shape",
    "unbroadcast",
]

OP_TABLE: Mapping[str, Op] = {
    op.name: op for op in (Add(), ResidualAdd(), Mul(), Scale(), Linear(), Relu(), Tanh(), Sum(),
                           LayerNorm(), RmsNorm(), Sigmoid(), Exp(), Silu(),
                           GeluErf(), GeluTanh(), Neg(),
                           Reshape(), Permute(), Expand(), ExpandInDtype(), Slice(), Cat(),
                           Matmul(), Softmax(), SumAxes(), Where(), Conv2d(), BatchNorm(), Cast(),
                           Embedding(), Rsqrt(),
                           MaskedSoftmax())
}
"""Every op of the IR by name; the order is the order the IR documents them in."""
