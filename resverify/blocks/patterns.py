"""Known composites of ATen ops mapped to one IR op, where the IR has it.

Why: ``run_decompositions()`` writes ``nn.RMSNorm`` (and Hugging Face's RMSNorm) as
``x * rsqrt(mean(x ** 2, -1, keepdim) + eps)``; ``pow``, ``mean`` and ``rsqrt`` have no IR
op, but the whole is exactly the IR's ``rms_norm(x, eps)``, whose budget is also tighter
than a chain of its parts would be; ``x * sigmoid(x)`` is ``nn.SiLU``'s decomposition, the
IR's ``silu``; an additive mask of 0 and ``finfo.min`` added to attention scores just before
their softmax is the IR's ``masked_softmax`` (:func:`_masked_softmax`). A pattern names the
node its value ends at (the
*root*, here the ``mul``) and the nodes it absorbs; the walk of
:mod:`resverify.blocks.lower` emits the pattern's row at the root and skips the absorbed
nodes, and :class:`~resverify.blocks.lower.Lowered` lists what was matched. A node is
absorbed only when its one user is the next node of the pattern, so nothing else reads a
value the program no longer computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from resverify.blocks.aten import Lowering
from resverify.spec.ir import DTYPES

__all__: list[str] = []

MASKED = 4096
"""How far below 0 every masked entry of an additive mask must be for it to be read as
``masked_softmax`` (``finfo.min`` of every dtype but float16's is; ``-1.0`` is not)."""

UNDERFLOW = 1100
"""How far below the row's largest a masked score must be, exactly and in the float run:
``e^-1100`` is under float64's smallest subnormal, so every dtype's exp gives 0 there."""


@dataclass(frozen=True)
class MaskCondition:
    """An additive mask read as ``masked_softmax`` holds while every score is at most
    ``limit`` in size: ``limit = (|m| - 1100) / 8``, ``m`` the masked entry nearest 0.

    Then each masked entry's exact ``s + m - max s`` is below ``-1100`` (its softmax term
    under ``e^-1100``, where ``masked_softmax`` has 0), and so is the float one of any run
    whose scores are within ``|s| + 1`` of the exact ones, through a cast too: with ``|ŝ|
    <= 2 limit + 1`` it is at most ``-0.98 |m| + 2.02 |ŝ| < -1100`` for ``|m| >=``
    :data:`MASKED`, so its exp underflows to exactly 0 in every dtype, as the op's float
    semantics say."""

    add: str
    """The FX node of the mask's ``add`` (the node a refusal names)."""
    scores: str
    """The FX node of the scores the mask is added to."""
    limit: float


@dataclass(frozen=True)
class Match:
    """A composite found: its IR op, the root node, the nodes it absorbs, and its row."""

    op: str
    root: str
    absorbed: frozenset[str]
    emit: Callable[[Lowering], str]
    condition: MaskCondition | None = None
    """What the judge checks on the judged inputs before the match stands for the nodes it
    absorbs (an additive mask's, :class:`MaskCondition`)."""


def _single(arg: Any, *targets: str) -> Any:
    """``arg`` when it is a node of one of ``targets`` with exactly one user, else None."""
    if not hasattr(arg, "users") or str(getattr(arg, "target", "")) not in targets:
        return None
    return arg if len(arg.users) == 1 else None


def _rms_norm(node: Any, constants: Mapping[str, Any]) -> Match | None:
    """``x * rsqrt(mean(x ** 2, [-1], keepdim=True) + eps)`` (either operand order; ``x *
    x`` for the square, and ``x`` widened before it is squared: :func:`_squared`)."""
    if str(node.target) != "aten.mul.Tensor" or len(node.args) != 2:
        return None
    for x, r in (node.args, node.args[::-1]):
        rsqrt = _single(r, "aten.rsqrt.default")
        add = rsqrt and _single(rsqrt.args[0], "aten.add.Scalar", "aten.add.Tensor")
        eps = add.args[1] if add else None
        if isinstance(eps, bool) or not isinstance(eps, int | float) or eps <= 0:
            continue
        mean = _single(add.args[0], "aten.mean.dim")
        rank = len(x.meta["val"].shape) if hasattr(x, "meta") else 0
        if not mean or len(mean.args) < 3 or not mean.args[2] or mean.kwargs.get("dtype") or \
                [d % max(rank, 1) for d in mean.args[1]] != [rank - 1]:
            continue
        square = _single(mean.args[0], "aten.pow.Tensor_Scalar", "aten.mul.Tensor")
        row = _squared(square, x, node)
        if square and row is not None:
            def emit(g: Lowering, row: Any = row, eps: Fraction = Fraction(eps)) -> str:
                return g.emit("rms_norm", [g.tensor(row)], eps=eps)
            absorbed = frozenset(n.name for n in (rsqrt, add, mean, square))
            return Match("rms_norm", node.name, absorbed, emit)
    return None


def _squared(square: Any, x: Any, root: Any) -> Any:
    """The row ``square`` squares, where it is ``x`` or ``x`` widened to the root's dtype
    (T5's ``x.to(float32) ** 2`` of a bfloat16 ``x``, whose product with the float32
    ``rsqrt`` torch promotes to float32: the norm of the widened row); None when ``square``
    is not ``row ** 2`` or ``row * row`` (litgpt's) of such a row."""
    if not square:
        return None
    row = square.args[0]
    if str(square.target) == "aten.mul.Tensor" and square.args[1] is not row:
        return None
    if str(square.target) == "aten.pow.Tensor_Scalar" and square.args[1] != 2:
        return None
    if row is x:
        return row
    widened = str(getattr(row, "target", "")) in ("aten._to_copy.default", "aten.to.dtype")
    dtype = getattr(root.meta.get("val"), "dtype", None)
    if widened and row.args[0] is x and row.meta["val"].dtype == dtype:
        return row
    return None


def _silu(node: Any, constants: Mapping[str, Any]) -> Match | None:
    """``x * sigmoid(x)`` (either operand order), which ``run_decompositions()`` writes for
    ``silu``: the IR's ``silu``, whose budget is that of the one fused kernel eager runs."""
    if str(node.target) != "aten.mul.Tensor" or len(node.args) != 2:
        return None
    for x, s in (node.args, node.args[::-1]):
        sigmoid = _single(s, "aten.sigmoid.default")
        if sigmoid is not None and sigmoid.args[0] is x:
            def emit(g: Lowering, x: Any = x) -> str:
                return g.emit("silu", [g.tensor(x)])
            return Match("silu", node.name, frozenset({sigmoid.name}), emit)
    return None


def _additive(add: Any, constants: Mapping[str, Any]) -> tuple[Any, Any, float] | None:
    """``(scores, mask, |m|)`` of ``add(scores, mask)`` with one user that is not a constant
    (torch's attention decomposition also reads the sum in its masked-row guard,
    ``eq(sum, -inf)``, a constant: :mod:`resverify.blocks.constants`), ``mask`` a constant
    of the add's dtype broadcast into the scores' shape whose entries are 0 or at most
    ``-MASKED`` (``-inf`` included, as ``scaled_dot_product_attention`` fills a boolean or
    causal mask; ``|m|`` the smallest masked size), else None."""
    if str(getattr(add, "target", "")) != "aten.add.Tensor" or add.kwargs or \
            sum(user.name not in constants for user in getattr(add, "users", ())) != 1:
        return None
    for scores, mask in (add.args, add.args[::-1]):
        value = constants.get(str(getattr(mask, "name", "")))
        if not isinstance(value, torch.Tensor) or not hasattr(scores, "meta") or \
                scores.name in constants or value.dtype != scores.meta["val"].dtype or \
                tuple(add.meta["val"].shape) != tuple(scores.meta["val"].shape):
            continue
        masked = value != 0
        if bool(masked.any()) and bool((value[masked] <= -MASKED).all()):
            return scores, mask, float(-value[masked].max())
    return None


def _keeps_every_row(mask: torch.Tensor, shape: tuple[int, ...], axis: int) -> bool:
    """Whether every row along ``axis`` of the mask, broadcast to ``shape``, keeps one."""
    return bool((mask.expand(shape) == 0).any(dim=axis).all())


def _masked_softmax(node: Any, constants: Mapping[str, Any]) -> Match | None:
    """``softmax(add(s, mask))``, or with a cast between (a float64 Llama's float32
    softmax), ``mask`` an additive mask of 0 and values at most ``-MASKED`` that keeps an
    entry of every row along the softmax's axis: ``masked_softmax`` of ``s`` (cast as torch
    casts it) by the mask's zeros, held to its :class:`MaskCondition`. Anything else (a
    mask of ``-1.0``, a mask read by another node too) stays an ``add``."""
    if str(node.target) != "aten._softmax.default" or node.args[2]:
        return None
    cast = _single(node.args[0], "aten._to_copy.default", "aten.to.dtype")
    add = cast.args[0] if cast is not None else node.args[0]
    found = _additive(add, constants)
    if found is None or (cast is not None and _dtype(cast) not in DTYPES):
        return None
    scores, mask, reach = found
    shape = tuple(scores.meta["val"].shape)
    axis = int(node.args[1]) % max(len(shape), 1)
    if not _keeps_every_row(constants[mask.name], shape, axis):
        return None

    def emit(g: Lowering) -> str:
        value = g.tensor(scores)
        if cast is not None:
            value = g.emit("cast", [value], source=_dtype(scores), target=_dtype(cast))
        return g.emit("masked_softmax", [value, g.kept(mask)], axis=axis)
    absorbed = frozenset(n.name for n in (add, cast) if n is not None)
    condition = MaskCondition(add.name, scores.name, (reach - UNDERFLOW) / 8)
    return Match("masked_softmax", node.name, absorbed, emit, condition)


def _dtype(node: Any) -> str:
    return str(node.meta["val"].dtype).removeprefix("torch.")


PATTERNS = (_rms_norm, _silu, _masked_softmax)
"""Each pattern: an FX node and the graph's constants (their realised values, by node name:
:func:`resverify.blocks.constants.fold`) -> the :class:`Match` rooted there, or None."""


def find(nodes: Iterable[Any], constants: Mapping[str, Any]) -> dict[str, Match]:
    """The matches in a graph's call nodes, by root name."""
    found: dict[str, Match] = {}
    for node in nodes:
        if node.op != "call_function":
            continue
        for pattern in PATTERNS:
            match = pattern(node, constants)
            if match is not None:
                found[match.root] = match
                break
    return found
