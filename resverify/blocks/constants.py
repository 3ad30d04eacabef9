"""The constants of a traced graph: values that depend on no input, parameter or buffer.

Why: a traced layer computes tables and masks from nothing but shapes (a rotary
``cos(arange ⊗ inv_freq)``, a causal ``arange``/``ge``/``logical_and`` mask, a
``full(finfo.min)``), in integer and boolean arithmetic and in ops the IR has no reason to
hold (``arange``, ``cos``, ``pow`` of a scalar). Such a value is the same for every input,
so it is *data* of the program, not arithmetic to judge: its realised value (the node run
on its realised arguments) enters the IR program as an input, and the judge gives it the
module's value and does not judge its gradient (:mod:`resverify.blocks.exact`).

A node is constant when every node it reads is constant (a node that reads none, ``full``
or ``arange``, is), and it is not a random draw (``bernoulli``, ``rand``: a second run
would draw another value, so it is never folded). Two kinds of node are constant even
though they read the data, because their value does not depend on the data's values in the
exact program: a ``*_like`` fill reads only its argument's shape and dtype, and a
comparison of a value with ±inf or NaN (``eq(scores, -inf)``, the masked-row guard of
torch's attention) is false for every real number, and every value of the exact program is
one. Such a node is run with zeros standing in for its data arguments; a data argument that
is the sum of data and a constant (the scores plus an additive mask of ``-inf``, which
``scaled_dot_product_attention`` makes of a boolean or causal mask) stands in as zeros plus
that constant, since a real number plus a constant is non-finite exactly where the constant
is, so the guard is true on the masked entries, as in the module. A float run whose scores
overflow to -inf differs from the exact one there, and the judgement says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__: list[str] = []

SHAPE_ONLY = frozenset({"aten.full_like.default", "aten.zeros_like.default",
                        "aten.ones_like.default"})
"""Ops whose value reads only their tensor argument's shape and dtype."""

COMPARISONS = frozenset({"aten.eq.Scalar", "aten.ne.Scalar"})
"""Comparisons that are constant against a non-finite scalar (no real number equals it)."""


def _reads_only_shape(node: Any) -> bool:
    target = str(node.target)
    if target in SHAPE_ONLY:
        return True
    if target in COMPARISONS and len(node.args) == 2:
        other = node.args[1]
        return isinstance(other, float) and not math.isfinite(other)
    return False


def _random(node: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())


def fold(nodes: Iterable[Any], lifted: Mapping[str, torch.Tensor]
         ) -> Mapping[str, torch.Tensor | None]:
    """The realised value of every constant node of a graph, by node name (None for a node
    with no tensor value: torch's ``_assert_tensor_metadata`` checks); ``lifted``: the
    placeholders ``torch.export`` made of tensor constants, with their values."""
    values: dict[str, torch.Tensor | None] = dict(lifted)
    for node in nodes:
        if node.op != "call_function" or _random(node):
            continue
        reads = node.all_input_nodes
        if all(a.name in values for a in reads):
            values[node.name] = _run(node, values, standing_in=False)
        elif _reads_only_shape(node):
            values[node.name] = _run(node, values, standing_in=True)
    return values


def _run(node: Any, values: Mapping[str, Any], standing_in: bool) -> torch.Tensor | None:
    """The node's target on its arguments' realised values (for a data argument when
    ``standing_in``, :func:`_stand_in`: its finite values are not read)."""
    def value(arg: Any) -> Any:
        if arg.name in values:
            return values[arg.name]
        if not standing_in:
            raise KeyError(arg.name)
        return _stand_in(arg, values)
    args = torch.fx.node.map_arg(node.args, value)
    kwargs = torch.fx.node.map_arg(node.kwargs, value)
    with torch.no_grad():
        out = node.target(*args, **kwargs)
    return out if isinstance(out, torch.Tensor) else None


def _stand_in(arg: Any, values: Mapping[str, Any]) -> torch.Tensor:
    """Zeros of a data argument's shape and dtype, plus the constant term where the argument
    is ``add(data, constant)``: each entry is then non-finite exactly where the argument's
    exact value (a real number plus the constant) is."""
    meta = arg.meta["val"]
    zeros = torch.zeros(tuple(meta.shape), dtype=meta.dtype)
    if str(getattr(arg, "target", "")) == "aten.add.Tensor" and not arg.kwargs:
        for term in arg.args:
            constant = values.get(str(getattr(term, "name", "")))
            if isinstance(constant, torch.Tensor):
                return zeros + constant.to(meta.dtype)
    return zeros
