"""Known composites of ATen ops mapped to one IR op, where the IR has it.

Why: ``run_decompositions()`` writes ``nn.RMSNorm`` (and Hugging Face's RMSNorm) as
``x * rsqrt(mean(x ** 2, -1, keepdim) + eps)``; ``pow``, ``mean`` and ``rsqrt`` have no IR
op, but the whole is exactly the IR's ``rms_norm(x, eps)``, whose budget is also tighter
than a chain of its parts would be; ``x * sigmoid(x)`` is ``nn.SiLU``'s decomposition, the
IR's ``silu``. A pattern names the node its value ends at (the
*root*, here the ``mul``) and the nodes it absorbs; the walk of
:mod:`resverify.blocks.lower` emits the pattern's row at the root and skips the absorbed
nodes, and :class:`~resverify.blocks.lower.Lowered` lists what was matched. A node is
absorbed only when its one user is the next node of the pattern, so nothing else reads a
value the program no longer computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from resverify.blocks.aten import Lowering

__all__: list[str] = []


@dataclass(frozen=True)
class Match:
    """A composite found: its IR op, the root node, the nodes it absorbs, and its row."""

    op: str
    root: str
    absorbed: frozenset[str]
    emit: Callable[[Lowering], str]


def _single(arg: Any, *targets: str) -> Any:
    """``arg`` when it is a node of one of ``targets`` with exactly one user, else None."""
    if not hasattr(arg, "users") or str(getattr(arg, "target", "")) not in targets:
        return None
    return arg if len(arg.users) == 1 else None


def _rms_norm(node: Any) -> Match | None:
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


def _silu(node: Any) -> Match | None:
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


PATTERNS = (_rms_norm, _silu)
"""Each pattern: an FX node -> the :class:`Match` rooted there, or None."""


def find(nodes: Iterable[Any]) -> dict[str, Match]:
    """The matches in a graph's call nodes, by root name."""
    found: dict[str, Match] = {}
    for node in nodes:
        if node.op != "call_function":
            continue
        for pattern in PATTERNS:
            match = pattern(node)
            if match is not None:
                found[match.root] = match
                break
    return found
