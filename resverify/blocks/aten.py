"""The table from an ATen op to IR nodes: one row per ATen overload.

Why a table: what a traced layer computes is written in core ATen after
``run_decompositions()``; each overload the IR can express exactly is one row here, a small
function that reads the FX node and emits IR nodes through a :class:`Lowering`. Nothing is
approximated: a row that cannot express its node exactly raises :class:`Unmapped` with the
reason, and an overload with no row is refused by :mod:`resverify.blocks.lower`, which lists
every such node. A row may name an IR op the table of :mod:`resverify.spec.ops` does not hold
yet (the layout ops ``reshape``, ``permute``, ``expand``, ``slice``, ``cat``; the smooth ops
``exp``, ``silu``, ``gelu_erf``, ``gelu_tanh``): :meth:`Lowering.emit` refuses it by name
until the op lands, when the row lights up unchanged (its keyword attributes are then the
op's own :class:`~resverify.spec.ir.Node` fields; a row whose guess differs is fixed there).

Constants are kept exact: a Python scalar ``c`` of ``x * c`` becomes ``scale`` by
``Fraction(c)``, the exact value of the float torch was given (the budget of ``scale``
covers its rounding to the dtype); ``x / c`` is ``scale`` by ``1 / Fraction(c)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol

from resverify.spec.errors import ResverifyError

__all__: list[str] = []


class Unmapped(ResverifyError, ValueError):
    """This node cannot be expressed exactly in the IR (the reason). Never leaves the walk
    of :mod:`resverify.blocks.lower`, which lists it in one
    :class:`~resverify.blocks.lower.NotInIR`."""


class Lowering(Protocol):
    """What a row sees of the walk over the graph."""

    def tensor(self, arg: Any) -> str:
        """The IR name holding an FX argument that is a tensor."""

    def shape(self, arg: Any) -> tuple[int, ...]:
        """The shape of an FX argument that is a tensor."""

    def emit(self, op: str, args: Sequence[str], **attributes: Any) -> str:
        """A new IR node (refused with :class:`Unmapped` while ``op`` is not in the IR)."""


Row = Callable[[Lowering, Any], "str | tuple[str | None, ...]"]
"""A row: the walk and the FX node -> the IR name of its value (a tuple for an op with
several outputs, None where an output is not expressed)."""


def _scalar(value: Any) -> Fraction | None:
    """The exact value of a Python number argument, None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return Fraction(value)


def _unit_alpha(node: Any) -> None:
    """Refuse ``add``/``sub``/``addmm`` with a multiplier other than 1."""
    for key in ("alpha", "beta"):
        if node.kwargs.get(key, 1) != 1:
            raise Unmapped(f"{key}={node.kwargs[key]} (only 1 is mapped)")


def _sum(g: Lowering, a: Any, b: Any) -> str:
    """``a + b`` of two tensors: ``residual_add`` for equal shapes, ``add`` when it broadcasts."""
    if _scalar(a) is not None or _scalar(b) is not None:
        raise Unmapped("a Python number operand (no IR op adds a constant)")
    op = "residual_add" if g.shape(a) == g.shape(b) else "add"
    return g.emit(op, [g.tensor(a), g.tensor(b)])


def _add(g: Lowering, node: Any) -> str:
    _unit_alpha(node)
    return _sum(g, node.args[0], node.args[1])


def _sub(g: Lowering, node: Any) -> str:
    _unit_alpha(node)
    a, b = node.args
    if _scalar(a) is not None or _scalar(b) is not None:
        raise Unmapped("a Python number operand (no IR op adds a constant)")
    negated = g.emit("scale", [g.tensor(b)], alpha=Fraction(-1))
    op = "residual_add" if g.shape(a) == g.shape(b) else "add"
    return g.emit(op, [g.tensor(a), negated])


def _mul(g: Lowering, node: Any) -> str:
    a, b = node.args
    for tensor, number in ((a, b), (b, a)):
        if _scalar(number) is not None:
            return g.emit("scale", [g.tensor(tensor)], alpha=_scalar(number))
    return g.emit("mul", [g.tensor(a), g.tensor(b)])


def _div(g: Lowering, node: Any) -> str:
    a, b = node.args
    divisor = _scalar(b)
    if divisor is None or divisor == 0:
        raise Unmapped("a tensor or zero divisor (only a nonzero Python number is mapped)")
    return g.emit("scale", [g.tensor(a)], alpha=1 / divisor)


def _neg(g: Lowering, node: Any) -> str:
    return g.emit("scale", [g.tensor(node.args[0])], alpha=Fraction(-1))


def _mm(g: Lowering, node: Any) -> str:
    return g.emit("linear", [g.tensor(node.args[0]), g.tensor(node.args[1])])


def _addmm(g: Lowering, node: Any) -> str:
    _unit_alpha(node)
    bias, x, w = node.args
    product = g.emit("linear", [g.tensor(x), g.tensor(w)])
    op = "residual_add" if g.shape(bias) == g.shape(node) else "add"
    return g.emit(op, [product, g.tensor(bias)])


def _unary(op: str) -> Row:
    def row(g: Lowering, node: Any) -> str:
        return g.emit(op, [g.tensor(node.args[0])])
    return row


def _same(g: Lowering, node: Any) -> str:
    """An op that returns its argument's values unchanged (a copy)."""
    return g.tensor(node.args[0])


def _check_only(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """A check torch inserts (``_assert_tensor_metadata``): no value, nothing computed."""
    return ()


def _to_copy(g: Lowering, node: Any) -> str:
    """A copy, as long as it keeps the dtype (a cast is not in the IR yet)."""
    wanted = node.kwargs.get("dtype")
    if wanted is not None and wanted != node.args[0].meta["val"].dtype:
        raise Unmapped(f"a cast to {wanted} (no cast op in the IR)")
    return g.tensor(node.args[0])


def _sum_all(g: Lowering, node: Any) -> str:
    dims = node.args[1] if len(node.args) > 1 else None
    rank = len(g.shape(node.args[0]))
    if dims and sorted(d % rank for d in dims) != list(range(rank)):  # [] is every dim
        raise Unmapped(f"a sum over dims {list(dims)} (only the sum of all elements is mapped)")
    if node.kwargs.get("dtype") is not None or (len(node.args) > 2 and node.args[2]):
        raise Unmapped("keepdim or a dtype (only the plain sum of all elements is mapped)")
    return g.emit("sum", [g.tensor(node.args[0])])


def _layer_norm(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """``native_layer_norm(x, shape, weight, bias, eps)`` over the last axis: ``layer_norm``,
    then ``mul`` by the weight and ``add`` of the bias where given. Its mean and 1/σ
    outputs are not expressed (the walk refuses a use of them)."""
    x, normalized, weight, bias, eps = node.args
    if len(normalized) != 1:
        raise Unmapped(f"normalized_shape {list(normalized)} (only the last axis is mapped)")
    out = g.emit("layer_norm", [g.tensor(x)], eps=Fraction(eps))
    if weight is not None:
        out = g.emit("mul", [out, g.tensor(weight)])
    if bias is not None:
        out = g.emit("add", [out, g.tensor(bias)])
    return (out, None, None)


def _reshape(g: Lowering, node: Any) -> str:
    return g.emit("reshape", [g.tensor(node.args[0])], shape=g.shape(node))


def _permute(g: Lowering, node: Any) -> str:
    rank = len(g.shape(node.args[0]))
    if "transpose" in str(node.target):
        order = list(range(rank))
        i, j = (d % rank for d in node.args[1:3])
        order[i], order[j] = order[j], order[i]
    elif "permute" in str(node.target):
        order = [d % rank for d in node.args[1]]
    else:  # aten.t
        order = list(range(rank))[::-1]
    return g.emit("permute", [g.tensor(node.args[0])], perm=tuple(order))


def _expand(g: Lowering, node: Any) -> str:
    return g.emit("expand", [g.tensor(node.args[0])], shape=g.shape(node))


def _slice(g: Lowering, node: Any) -> str:
    defaults: tuple[Any, ...] = (None, 0, None, None, 1)
    x, dim, start, stop, step = (*tuple(node.args), *defaults[len(node.args):])
    shape = g.shape(x)
    axis = int(dim) % len(shape)
    begin, end, stride = slice(start, stop, step).indices(shape[axis])
    return g.emit("slice", [g.tensor(x)], dim=axis, start=begin, stop=end, step=stride)


def _cat(g: Lowering, node: Any) -> str:
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    rank = len(g.shape(node))
    return g.emit("cat", [g.tensor(p) for p in parts], dim=dim % rank)


def _gelu(g: Lowering, node: Any) -> str:
    form = node.kwargs.get("approximate", "none")
    return g.emit("gelu_tanh" if form == "tanh" else "gelu_erf", [g.tensor(node.args[0])])


ROWS: Mapping[str, Row] = {
    "aten.add.Tensor": _add,
    "aten.sub.Tensor": _sub,
    "aten.mul.Tensor": _mul,
    "aten.mul.Scalar": _mul,
    "aten.div.Tensor": _div,
    "aten.div.Scalar": _div,
    "aten.neg.default": _neg,
    "aten.mm.default": _mm,
    "aten.addmm.default": _addmm,
    "aten.relu.default": _unary("relu"),
    "aten.tanh.default": _unary("tanh"),
    "aten.sigmoid.default": _unary("sigmoid"),
    "aten.sum.default": _sum_all,
    "aten.sum.dim_IntList": _sum_all,
    "aten.native_layer_norm.default": _layer_norm,
    "aten.clone.default": _same,
    "aten.alias.default": _same,
    "aten._to_copy.default": _to_copy,
    "aten._assert_tensor_metadata.default": _check_only,
    "aten.view.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.permute.default": _permute,
    "aten.t.default": _permute,
    "aten.transpose.int": _permute,
    "aten.expand.default": _expand,
    "aten.slice.Tensor": _slice,
    "aten.cat.default": _cat,
    "aten.exp.default": _unary("exp"),
    "aten.silu.default": _unary("silu"),
    "aten.gelu.default": _gelu,
}
"""ATen overload (``str(node.target)``) -> its row."""
