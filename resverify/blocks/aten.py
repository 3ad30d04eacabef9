"""The table from an ATen op to IR nodes: one row per ATen overload.

Why a table: what a traced layer computes is written in core ATen after
``run_decompositions()``; each overload the IR can express exactly is one row here, a small
function that reads the FX node and emits IR nodes through a :class:`Lowering`. Nothing is
approximated: a row that cannot express its node exactly raises :class:`Unmapped` with the
reason, and an overload with no row is refused by :mod:`resverify.blocks.lower`, which lists
every such node. A row may name an IR op the table of :mod:`resverify.spec.ops` does not hold
yet: :meth:`Lowering.emit` refuses it by name (``needs the IR op 'group_norm'``) until the op
lands, when the row lights up unchanged. A row passes an op's attributes by name as
keywords: an exact rational (``alpha``, ``eps``) is a :class:`~resverify.spec.ir.Node` field,
integers (``shape``, ``perm``, ``axis`` ...) go to the node's ``params``.

The view and shape ops are exact moves: ``view``/``reshape``/``squeeze``/``unsqueeze`` are
``reshape`` to the node's own shape, ``permute``/``transpose``/``t`` are ``permute``,
``slice``/``select``/``split`` are ``slice`` s (``select`` then drops its axis by ``reshape``),
an n-way ``cat`` is a chain of two-way ``cat`` s, and ``clone``, ``alias`` and a copy to the
same dtype are the argument itself; a copy to another floating dtype is a ``cast``.
An elementwise op whose operands' floating dtypes differ (a bfloat16 weight times a float32
row inside ``torch.rms_norm``) casts the narrower ones to its result dtype first, as torch
promotes them.
``sub`` is ``add`` of ``neg``, ``x ** 2`` is ``mul(x, x)`` (``x ** 3`` one more ``mul``),
``addmm(b, x, w)`` is ``linear`` then the bias added, broadcast as torch expands it.

Constants are kept exact: a Python scalar ``c`` of ``x * c`` becomes ``scale`` by
``Fraction(c)``, the exact value of the float torch was given (the budget of ``scale``
covers its rounding to the dtype); ``x / c`` is ``scale`` by ``1 / Fraction(c)``; ``x + c``
is ``add`` of ``c`` lifted as an input of shape () (exact in the dtype, or refused). A tensor
that depends on no input, parameter or buffer (a causal mask, a rotary table) is never
lowered op by op: it is lifted as an input holding its realised value
(:mod:`resverify.blocks.constants`), ``where`` takes such a mask as 0/1, and ``embedding``
such integer indices as its attribute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from resverify.spec.errors import ResverifyError
from resverify.spec.ir import DTYPES
from resverify.spec.rounding import holds

__all__: list[str] = []


class Unmapped(ResverifyError, ValueError):
    """This node cannot be expressed exactly in the IR (the reason). Never leaves the walk
    of :mod:`resverify.blocks.lower`, which lists it in one
    :class:`~resverify.blocks.lower.NotInIR`."""


class Lowering(Protocol):
    """What a row sees of the walk over the graph."""

    def tensor(self, arg: Any) -> str:
        """The IR name holding an FX argument that is a tensor."""

    def mask(self, arg: Any) -> str:
        """The IR name of a constant mask (0/1 in the program's dtype); refused with
        :class:`Unmapped` where the mask depends on the data."""

    def constant(self, arg: Any) -> Any:
        """The realised value (a torch tensor) of a constant FX argument (one computed from
        no input, parameter or buffer: T5's position buckets); refused with
        :class:`Unmapped` where it depends on the data."""

    def kept(self, arg: Any) -> str:
        """The IR name of the 0/1 mask of where a constant additive mask is 0."""

    def number(self, value: float, operand: str | None = None) -> str:
        """The IR name of a Python number lifted as a constant of shape (): beside an
        ``operand`` in float32 or float64, rounded to nearest in it (as torch reads it);
        otherwise refused where it is not exact in the program's dtype."""

    def shape(self, arg: Any) -> tuple[int, ...]:
        """The shape of an FX argument that is a tensor."""

    def emit(self, op: str, args: Sequence[str], **attributes: Any) -> str:
        """A new IR node (refused with :class:`Unmapped` while ``op`` is not in the IR),
        its attributes by name: ``alpha``/``eps`` exact, integers (``perm=(1, 0)``) to its
        ``params``."""

    def untrained(self, arg: Any) -> None:
        """An input the library's autograd does not differentiate (batch norm's running
        statistics): its gradient is not judged."""

    def dtype_of(self, name: str) -> str:
        """The dtype the IR value ``name`` is computed in."""


Row = Callable[[Lowering, Any], "str | tuple[str | None, ...]"]
"""A row: the walk and the FX node -> the IR name of its value (a tuple for an op with
several outputs, None where an output is not expressed)."""


def _scalar(value: Any) -> Fraction | None:
    """The exact value of a Python number argument, None for anything else; an infinity or
    NaN is refused (no real number stands for it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        raise Unmapped(f"the number {value!r} is not a real number")
    return Fraction(value)


def _unit_alpha(node: Any) -> None:
    """Refuse ``add``/``sub``/``addmm`` with a multiplier other than 1."""
    for key in ("alpha", "beta"):
        if node.kwargs.get(key, 1) != 1:
            raise Unmapped(f"{key}={node.kwargs[key]} (only 1 is mapped)")


def _tensors(*args: Any) -> None:
    """Refuse a Python number operand of a sub (no IR op subtracts a constant)."""
    if any(_scalar(a) is not None for a in args):
        raise Unmapped("a Python number operand (no IR op subtracts a constant)")


def _promoted(g: Lowering, node: Any, names: Sequence[str]) -> list[str]:
    """The operands of an elementwise ``node`` in the dtype torch computes it in: each
    operand of a narrower floating dtype is ``cast`` to the node's result dtype (torch's
    type promotion, ``node.meta["val"]``), which is exact (it widens). Torch's CPU kernels
    do the same: TensorIterator casts every operand to the common dtype, then the op
    rounds once in it (``bf16 + f32`` is ``f32(a) + b`` rounded to float32, checked
    bitwise in tests/blocks/test_exact_promotion.py)."""
    result = _dtype_name(getattr(node.meta.get("val"), "dtype", None))
    if result is None:
        return list(names)
    out = []
    for name in names:
        source = g.dtype_of(name)
        if source != result:
            if not holds(result, source):
                raise Unmapped(f"an operand in {source} of a {result} result (torch narrows "
                               "it; only a widening promotion is mapped)")
            name = g.emit("cast", [name], source=source, target=result)
        out.append(name)
    return out


def _plus(g: Lowering, a: str, b: str, same: bool) -> str:
    """``a + b`` of two IR names: ``residual_add`` for equal shapes, ``add`` (NumPy
    broadcasting, which is torch's: an operand expanded to the other's shape) when not."""
    return g.emit("residual_add" if same else "add", [a, b])


def _add(g: Lowering, node: Any) -> str:
    """``a + b``; ``a + 0`` (x-transformers' ``gamma + float(unit_offset)``) is ``a`` itself,
    which is exactly what torch computes; ``a + c`` for another Python number is ``add`` of
    ``c`` lifted as a constant of shape () (refused where ``c`` is not exact in the dtype)."""
    _unit_alpha(node)
    a, b = node.args
    if _scalar(b) == 0:
        return g.tensor(a)
    if _scalar(b) is not None:  # GPT-2's gelu_new: tanh(...) + 1.0
        name = g.tensor(a)
        return g.emit("add", [name, g.number(float(b), g.dtype_of(name))])
    left, right = _promoted(g, node, [g.tensor(a), g.tensor(b)])
    return _plus(g, left, right, g.shape(a) == g.shape(b))


def _sub(g: Lowering, node: Any) -> str:
    """``a - b`` is ``a + neg(b)``: the negation rounds nothing, so the sum rounds as the
    difference does."""
    _unit_alpha(node)
    a, b = node.args
    _tensors(a, b)
    left, right = _promoted(g, node, [g.tensor(a), g.tensor(b)])
    return _plus(g, left, g.emit("neg", [right]), g.shape(a) == g.shape(b))


def _read(g: Lowering, name: str, number: Fraction) -> Fraction:
    """A Python number as torch's CPU kernel reads it beside the operand ``name``: in the
    operand's op math, float64 for a float64 operand and float32 for the others (rounded to
    nearest; ``x * 0.1`` in float32 multiplies by float32's 0.1, and scaling by float64's
    instead rounds differently on about one element in five, measured)."""
    if g.dtype_of(name) == "float64":
        return number
    return Fraction(float(np.float32(float(number))))


def _mul(g: Lowering, node: Any) -> str:
    """``a * b``; a Python number is ``scale`` by the number as torch reads it
    (:func:`_read`; in half precision the kernel multiplies in float32 and rounds to the
    dtype after, where ``scale`` rounds once: the two differ only where rounding twice
    differs from rounding once)."""
    a, b = node.args
    for tensor, number in ((a, b), (b, a)):
        value = _scalar(number)
        if value is not None:
            name = g.tensor(tensor)
            return g.emit("scale", [name], alpha=_read(g, name, value))
    return g.emit("mul", _promoted(g, node, [g.tensor(a), g.tensor(b)]))


def _div(g: Lowering, node: Any) -> str:
    """``a / c`` for a Python number ``c``: ``scale`` by the exact reciprocal of ``c`` as
    torch reads it (:func:`_read`), which rounds once as torch's division does in float32
    and float64; in half precision torch multiplies by ``1/c`` rounded to float32."""
    a, b = node.args
    divisor = _scalar(b)
    if divisor is None or divisor == 0:
        raise Unmapped("a tensor or zero divisor (only a nonzero Python number is mapped)")
    name = g.tensor(a)
    reciprocal = 1 / _read(g, name, divisor)
    if g.dtype_of(name) not in ("float32", "float64"):
        reciprocal = _read(g, name, reciprocal)
    return g.emit("scale", [name], alpha=reciprocal)


def _power(g: Lowering, node: Any) -> str:
    """``x ** 2`` is ``mul(x, x)`` and ``x ** 3`` is ``mul(mul(x, x), x)``, as torch computes
    them (ATen's ``pow`` kernel multiplies for these exponents); no other exponent."""
    x, exponent = node.args
    if isinstance(exponent, bool) or exponent not in (2, 3):
        raise Unmapped(f"exponent {exponent!r} (only 2 and 3 are mapped, as products)")
    name = g.tensor(x)
    square = g.emit("mul", [name, name])
    return square if exponent == 2 else g.emit("mul", [square, name])


def _mm(g: Lowering, node: Any) -> str:
    return g.emit("linear", [g.tensor(node.args[0]), g.tensor(node.args[1])])


def _addmm(g: Lowering, node: Any) -> str:
    """``addmm(b, x, w) = b + x @ w``: ``linear`` (``nn.Linear``'s transposed weight is the
    ``permute`` of its own ``t`` node), then the bias added, broadcast over the rows."""
    _unit_alpha(node)
    bias, x, w = node.args
    product = g.emit("linear", [g.tensor(x), g.tensor(w)])
    return _plus(g, product, g.tensor(bias), g.shape(bias) == g.shape(node))


def _bmm(g: Lowering, node: Any) -> str:
    """A batched product (``bmm``, a 3-D+ ``matmul``): the IR's ``matmul``."""
    return g.emit("matmul", [g.tensor(node.args[0]), g.tensor(node.args[1])])


def _matmul(g: Lowering, node: Any) -> str:
    """``matmul`` by a 2-D right operand is ``linear``; a batched one ``matmul``."""
    a, b = node.args
    return g.emit("linear" if len(g.shape(b)) == 2 else "matmul", [g.tensor(a), g.tensor(b)])


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


def _dtype_name(dtype: Any) -> str | None:
    """The IR's name of a floating torch dtype (``torch.bfloat16`` -> ``"bfloat16"``), None
    for any other."""
    name = str(dtype).removeprefix("torch.")
    return name if name in DTYPES else None


def _to_copy(g: Lowering, node: Any) -> str:
    """``_to_copy`` / ``to.dtype``: the argument itself when the dtype stays, a ``cast`` to
    another floating dtype (rounded once; exact when it widens)."""
    x = node.args[0]
    source = x.meta["val"].dtype
    wanted = node.kwargs.get("dtype", node.args[1] if len(node.args) > 1 else None)
    if wanted is None or wanted == source:
        return g.tensor(x)
    target = _dtype_name(wanted)
    if target is None or _dtype_name(source) is None:
        raise Unmapped(f"a cast from {source} to {wanted} (only floating dtypes are cast)")
    return g.emit("cast", [g.tensor(x)], source=_dtype_name(source), target=target)


def _reduced(g: Lowering, node: Any) -> tuple[str, int]:
    """``sum``/``mean`` over ``node.args[1]`` (none or ``[]``: every axis) with ``keepdim``:
    ``sum`` for every element into shape (), else ``sum_axes``; and how many were summed."""
    x, dims = node.args[0], node.args[1] if len(node.args) > 1 else None
    keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    shape = g.shape(x)
    axes = tuple(sorted({int(d) % max(len(shape), 1) for d in dims or range(len(shape))}))
    count = math.prod(shape[a] for a in axes)
    name = _in_dtype(g, g.tensor(x), node.kwargs.get("dtype"))
    if not keepdim and len(axes) == len(shape):
        return g.emit("sum", [name]), count
    return g.emit("sum_axes", [name], axes=axes, keepdim=keepdim), count


def _in_dtype(g: Lowering, name: str, dtype: Any) -> str:
    """``name`` cast to ``dtype`` (a torch dtype or its name) where it is another (a
    reduction's ``dtype=``, which torch applies to the input before the op); itself for
    None."""
    target = _dtype_name(dtype) if dtype is not None else g.dtype_of(name)
    if target is None:
        raise Unmapped(f"a result in dtype {dtype} (only floating dtypes are mapped)")
    if target == g.dtype_of(name):
        return name
    return g.emit("cast", [name], source=g.dtype_of(name), target=target)


def _sum(g: Lowering, node: Any) -> str:
    return _reduced(g, node)[0]


def _mean(g: Lowering, node: Any) -> str:
    """The sum, then ``scale`` by exactly ``1/n`` (its budget covers ``1/n``'s rounding)."""
    total, count = _reduced(g, node)
    if count == 0:
        raise Unmapped("a mean of no elements")
    return g.emit("scale", [total], alpha=Fraction(1, count))


def _softmax(g: Lowering, node: Any) -> str:
    """``_softmax(x, dim, half_to_float)``: ``softmax`` over ``axis``; with
    ``half_to_float`` a half-precision ``x`` is cast to float32 first (exact) and the
    softmax computed there, the flag's meaning (its result is float32)."""
    x, dim, half_to_float = node.args
    name = _in_dtype(g, g.tensor(x), "float32" if half_to_float else None)
    return g.emit("softmax", [name], axis=int(dim) % max(len(g.shape(x)), 1))


def _layer_norm(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """``native_layer_norm(x, shape, weight, bias, eps)`` over the last axis: ``layer_norm``,
    then ``mul`` by the weight and ``add`` of the bias where given, each broadcast to x's
    shape by ``expand_in_dtype`` (torch's CPU backward sums their gradients over the rows
    in x's dtype, not in float32: that op's budget). Its mean and 1/σ outputs are not
    expressed (the walk refuses a use of them)."""
    x, normalized, weight, bias, eps = node.args
    if len(normalized) != 1:
        raise Unmapped(f"normalized_shape {list(normalized)} (only the last axis is mapped)")
    out = g.emit("layer_norm", [g.tensor(x)], eps=Fraction(eps))
    shape = tuple(g.shape(x))
    if weight is not None:
        out = g.emit("mul", [out, g.emit("expand_in_dtype", [g.tensor(weight)], shape=shape)])
    if bias is not None:
        out = g.emit("add", [out, g.emit("expand_in_dtype", [g.tensor(bias)], shape=shape)])
    return (out, None, None)


def _pair(value: Sequence[int]) -> tuple[int, int]:
    """A convolution's (height, width) pair from torch's one or two ints."""
    both = [int(n) for n in value] * (2 if len(value) == 1 else 1)
    return both[0], both[1]


def _convolution(g: Lowering, node: Any) -> str:
    """``convolution(x, w, bias, stride, padding, dilation, transposed, output_padding,
    groups)``, 2-D and not transposed: ``conv2d``, then the bias reshaped to (O, 1, 1) and
    added, broadcast as torch adds it (as ``addmm``'s)."""
    x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
    if transposed:
        raise Unmapped("a transposed convolution")
    if len(g.shape(w)) != 4:
        raise Unmapped(f"a {len(g.shape(w)) - 2}-D convolution (only 2-D is mapped)")
    out = g.emit("conv2d", [g.tensor(x), g.tensor(w)], stride=_pair(stride),
                 padding=_pair(padding), dilation=_pair(dilation), groups=int(groups))
    if bias is None:
        return out
    column = g.emit("reshape", [g.tensor(bias)], shape=(g.shape(bias)[0], 1, 1))
    return g.emit("add", [out, column])


def _batch_norm(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """``_native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var,
    momentum, eps)``: ``batch_norm`` of x and the four per-channel rows stacked (each
    reshaped to (1, C), then ``cat``); the running statistics are inputs torch does not
    differentiate. Its saved mean and 1/σ outputs are not expressed."""
    x, weight, bias, mean, var, _, eps = node.args
    if weight is None or bias is None:
        raise Unmapped("a batch norm without weight or bias (the IR has no constant 1 or 0)")
    for stat in (mean, var):
        g.untrained(stat)
    rows = [g.emit("reshape", [g.tensor(t)], shape=(1, g.shape(t)[0]))
            for t in (weight, bias, mean, var)]
    stacked = rows[0]
    for row in rows[1:]:
        stacked = g.emit("cat", [stacked, row], axis=0)
    return (g.emit("batch_norm", [g.tensor(x), stacked], eps=Fraction(eps)), None, None)


def _group_norm(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """``native_group_norm(x, weight, bias, N, C, HxW, groups, eps)``: each group's
    statistics are a row's, so ``layer_norm`` of x reshaped to (N, groups, C/groups·HxW),
    reshaped back, then ``mul`` by the weight and ``add`` of the bias, each reshaped to
    (C, 1, ...), where given. Its mean and 1/σ outputs are not expressed."""
    x, weight, bias, n, c, hw, groups, eps = node.args
    shape = g.shape(x)
    rows = g.emit("reshape", [g.tensor(x)],
                  shape=(int(n), int(groups), int(c) // int(groups) * int(hw)))
    out = g.emit("reshape", [g.emit("layer_norm", [rows], eps=Fraction(eps))], shape=shape)
    column = (int(c), *(1,) * (len(shape) - 2))
    if weight is not None:
        out = g.emit("mul", [out, g.emit("reshape", [g.tensor(weight)], shape=column)])
    if bias is not None:
        out = g.emit("add", [out, g.emit("reshape", [g.tensor(bias)], shape=column)])
    return (out, None, None)


def _reshape(g: Lowering, node: Any) -> str:
    """``view``, ``reshape``, ``squeeze``, ``unsqueeze``: ``reshape`` to the node's shape."""
    return g.emit("reshape", [g.tensor(node.args[0])], shape=g.shape(node))


def _permuted(g: Lowering, x: Any, order: Sequence[int]) -> str:
    return g.emit("permute", [g.tensor(x)], perm=tuple(order))


def _permute(g: Lowering, node: Any) -> str:
    x, dims = node.args
    rank = len(g.shape(x))
    return _permuted(g, x, [int(d) % rank for d in dims])


def _transpose(g: Lowering, node: Any) -> str:
    x, i, j = node.args
    rank = len(g.shape(x))
    order = list(range(rank))
    order[int(i) % rank], order[int(j) % rank] = order[int(j) % rank], order[int(i) % rank]
    return _permuted(g, x, order)


def _t(g: Lowering, node: Any) -> str:
    """``t``: the axes reversed (a 0-D or 1-D argument is its own transpose)."""
    return _permuted(g, node.args[0], range(len(g.shape(node.args[0])))[::-1])


def _expand(g: Lowering, node: Any) -> str:
    return g.emit("expand", [g.tensor(node.args[0])], shape=g.shape(node))


def _taken(g: Lowering, x: Any, axis: int, start: int, stop: int) -> str:
    """Elements ``start`` to before ``stop`` of ``x`` along ``axis`` (step 1)."""
    return g.emit("slice", [g.tensor(x)], axis=axis, start=start, stop=stop, step=1)


def _slice(g: Lowering, node: Any) -> str:
    """``slice.Tensor(x, dim, start, end, step)``, its bounds as Python slices a list."""
    defaults: tuple[Any, ...] = (None, 0, None, None, 1)
    x, dim, start, stop, step = (*tuple(node.args), *defaults[len(node.args):])
    shape = g.shape(x)
    axis = int(dim) % len(shape)
    begin, end, stride = slice(start, stop, step).indices(shape[axis])
    if end < begin:  # an empty slice (Python's indices may end before it starts)
        end = begin
    return g.emit("slice", [g.tensor(x)], axis=axis, start=begin, stop=end, step=stride)


def _select(g: Lowering, node: Any) -> str:
    """``select.int(x, dim, index)``: the slice of length 1 there, reshaped without the axis."""
    x, dim, index = node.args
    shape = g.shape(x)
    axis = int(dim) % len(shape)
    at = int(index) % shape[axis]
    taken = _taken(g, x, axis, at, at + 1)
    return g.emit("reshape", [taken], shape=g.shape(node))


def _split(g: Lowering, node: Any) -> tuple[str | None, ...]:
    """``split`` / ``split_with_sizes``: one ``slice`` per piece (sizes read off the pieces)."""
    x = node.args[0]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    axis = int(dim) % len(g.shape(x))
    pieces, start = [], 0
    for size in (int(piece.shape[axis]) for piece in node.meta["val"]):
        pieces.append(_taken(g, x, axis, start, start + size))
        start += size
    return tuple(pieces)


def _cat(g: Lowering, node: Any) -> str:
    """``cat`` of n tensors: a chain of n - 1 two-argument ``cat`` s (one tensor: itself)."""
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    rank = len(g.shape(node))
    if any(len(g.shape(p)) != rank for p in parts):
        raise Unmapped("a part of another rank (torch's legacy empty 1-D tensor)")
    out = g.tensor(parts[0])
    for part in parts[1:]:
        out = g.emit("cat", [out, g.tensor(part)], axis=int(dim) % rank)
    return out


def _where(g: Lowering, node: Any) -> str:
    """``where(mask, a, b)`` with a constant mask (a causal mask, a folded masked-row
    guard): the IR's ``where``; a mask that depends on the data is refused. The 0/1 mask,
    lifted in the program's dtype, is cast with the operands where they are wider."""
    mask, a, b = node.args
    return g.emit("where", _promoted(g, node, [g.mask(mask), g.tensor(a), g.tensor(b)]))


def _embedding(g: Lowering, node: Any) -> str:
    """``embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False,
    sparse=False)`` with constant indices (T5's relative position buckets, computed from
    ``arange``): the IR's ``embedding``, the weight's rows at those indices. A padding row
    (whose gradient torch zeroes) or a gradient scaled by frequency is refused."""
    weight, indices, *rest = node.args
    if (rest and rest[0] != -1) or any(rest[1:]):
        raise Unmapped(f"padding_idx, scale_grad_by_freq or sparse set ({rest}); only the "
                       "plain gather is mapped")
    value = g.constant(indices)
    if value.is_floating_point() or bool((value < 0).any()):
        raise Unmapped(f"indices of {value.dtype} or negative (non-negative integers only)")
    return g.emit("embedding", [g.tensor(weight)],
                  indices=tuple(int(i) for i in value.reshape(-1).tolist()),
                  index_shape=tuple(int(n) for n in value.shape))


def _gelu(g: Lowering, node: Any) -> str:
    """``gelu``: ``approximate='none'`` is ``gelu_erf``, ``'tanh'`` is ``gelu_tanh``."""
    form = node.kwargs.get("approximate", "none")
    if form not in ("none", "tanh"):
        raise Unmapped(f"approximate={form!r}")
    return g.emit("gelu_tanh" if form == "tanh" else "gelu_erf", [g.tensor(node.args[0])])


ROWS: Mapping[str, Row] = {
    "aten.add.Tensor": _add,
    "aten.sub.Tensor": _sub,
    "aten.mul.Tensor": _mul,
    "aten.mul.Scalar": _mul,
    "aten.div.Tensor": _div,
    "aten.div.Scalar": _div,
    "aten.neg.default": _unary("neg"),
    "aten.pow.Tensor_Scalar": _power,
    "aten.mm.default": _mm,
    "aten.addmm.default": _addmm,
    "aten.bmm.default": _bmm,
    "aten.matmul.default": _matmul,
    "aten.relu.default": _unary("relu"),
    "aten.tanh.default": _unary("tanh"),
    "aten.sigmoid.default": _unary("sigmoid"),
    "aten.exp.default": _unary("exp"),
    "aten.rsqrt.default": _unary("rsqrt"),
    "aten.silu.default": _unary("silu"),
    "aten.gelu.default": _gelu,
    "aten._softmax.default": _softmax,
    "aten.sum.default": _sum,
    "aten.sum.dim_IntList": _sum,
    "aten.mean.default": _mean,
    "aten.mean.dim": _mean,
    "aten.native_layer_norm.default": _layer_norm,
    "aten.convolution.default": _convolution,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm,
    "aten.native_group_norm.default": _group_norm,
    "aten.clone.default": _same,
    "aten.alias.default": _same,
    "aten._to_copy.default": _to_copy,
    "aten.to.dtype": _to_copy,
    "aten._assert_tensor_metadata.default": _check_only,
    "aten.view.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.permute.default": _permute,
    "aten.t.default": _t,
    "aten.transpose.int": _transpose,
    "aten.expand.default": _expand,
    "aten.slice.Tensor": _slice,
    "aten.select.int": _select,
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.cat.default": _cat,
    "aten.where.self": _where,
    "aten.embedding.default": _embedding,
}
"""ATen overload (``str(node.target)``) -> its row."""
