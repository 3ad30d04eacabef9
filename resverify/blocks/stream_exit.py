"""Where the stream leaves the identity: the op of a zeroed layer's trace that breaks it.

Why: with every branch's end zeroed, a pre-norm layer is the identity (the zero-branch law);
when it is not, the law says *that* the layer is wrong, not *where*. Here the layer, its
branch ends zeroed, is traced as :mod:`resverify.blocks.lower` traces a block
(``torch.export`` then its core ATen decompositions, so an in-place write into the input
is a value like any other), its graph evaluated on one input, and the stream followed from
the input toward the output along the nodes whose value is still the input, bitwise.

The rule: the output's *live ancestry* is its ancestors reached through nodes whose value
is not all zeros (with the branch ends zeroed, a branch reaches the output only through a
zero, so its norm and attention drop out, while a norm the stream itself passes through
stays). The *identity nodes* are the input and every node of the live ancestry reached
from it through identity nodes whose value has the input's shape, dtype and bits. If the
output is one, the forward holds the identity (a failure is elsewhere: the backward). Else
the last identity node in graph order is as far as the stream got, and its first user in
the live ancestry (graph order) is the op where it left: named by its ATen target and its
submodule (the innermost of its ``nn_module_stack``). An in-place norm on the input
(OLMo #680) is located at the norm's first op in that norm; a norm applied to a residual
sum and fed onward (flax#4567) at the first op of the norm that reads the sum.

What it assumes: the zeroed layer's stream is the identity: every site pre-norm (or
without a norm), with an identity shortcut, no activation after the sum and no skip or
post scale (a post-norm layer's zeroed map is its norms, which the walk would name); the
branch ends zeroed make each branch's value exactly 0; the input has no NaN (NaN is never
its own bits here) and is not all zeros, nor otherwise equal to a value the branch makes,
and no op on the stream's own path gives all zeros.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from resverify.blocks.recipe import Site
from resverify.blocks.trace import zeroed

__all__: list[str] = []

WRAPPER = "layer"
"""The name the traced wrapper holds the layer under (stripped from submodule paths)."""


@dataclass(frozen=True)
class Location:
    """The op where the stream leaves the identity: its ATen target, its graph node's name,
    the submodule that ran it (dotted, relative to the layer; ``""``: the layer's own
    forward) and that submodule's class."""

    op: str
    node: str
    module: str
    module_type: str

    def line(self) -> str:
        where = self.module or "the layer's own forward"
        return f"{self.op} (node {self.node}) in {where} ({self.module_type})"


class _Replayed(nn.Module):
    """The layer called as ``call`` calls it, the stream its one input."""

    def __init__(self, layer: nn.Module,
                 call: Callable[[nn.Module, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.layer = layer
        self.call = call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.call(self.layer, x)


def _unlocatable(sites: Sequence[Site]) -> str | None:
    """Why the rule does not apply to these sites (module doc), or None."""
    for i, site in enumerate(sites):
        if site.norm == "post" or site.shortcut != "identity" or site.activation or \
                site.scaled:
            return (f"not located: site {i} ({site.label}) maps its zeroed stream by more "
                    "than the identity (a post-norm, projection, activation or scale), which "
                    "the walk from the input assumes it does not")
    return None


def _same_bits(value: Any, x: torch.Tensor) -> bool:
    if not isinstance(value, torch.Tensor) or value.shape != x.shape or \
            value.dtype != x.dtype:
        return False
    return bool(torch.equal(value.detach().contiguous().view(_BITS[x.element_size()]),
                            x.view(_BITS[x.element_size()])))


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _evaluated(module: nn.Module, x: torch.Tensor) -> tuple[fx.GraphModule, dict[fx.Node, Any],
                                                           fx.Node, fx.Node]:
    """``module(x)`` exported in core ATen and run node by node: the graph, every node's
    value, the input's node and the stream output's node (the first user output)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exported = torch.export.export(module, (x,), strict=False).run_decompositions()
    kinds = torch.export.graph_signature.InputKind
    signature = exported.graph_signature
    flat, user = [], None
    for spec in signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            flat.append(x.clone())
            user = spec.arg.name
        else:
            held = exported.state_dict.get(spec.target)
            flat.append(held if held is not None else exported.constants[spec.target])
    graph = exported.graph_module
    runner = fx.Interpreter(graph, garbage_collect_values=False)
    with torch.no_grad():
        runner.run(*flat)
    nodes = {n.name: n for n in graph.graph.nodes}
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    first = next(i for i, s in enumerate(signature.output_specs)
                 if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT)
    assert user is not None
    return graph, dict(runner.env), nodes[user], outputs[first]


def _live(out: fx.Node, values: dict[fx.Node, Any]) -> set[fx.Node]:
    """The output's live ancestry: its ancestors through nodes whose value is not all
    zeros (an all-zero node is kept, its inputs not: what reaches the output only through
    a zeroed branch end does not reach it at all)."""
    seen, todo = {out}, [out]
    while todo:
        node = todo.pop()
        value = values.get(node)
        if isinstance(value, torch.Tensor) and value.numel() and not bool(value.any()):
            continue
        for parent in node.all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def _identity(start: fx.Node, values: dict[fx.Node, Any], x: torch.Tensor,
              ancestry: set[fx.Node]) -> set[fx.Node]:
    """The identity nodes (module doc), from the input node ``start``."""
    found, todo = {start}, [start]
    while todo:
        for user in todo.pop().users:
            if user in ancestry and user not in found and _same_bits(values.get(user), x):
                found.add(user)
                todo.append(user)
    return found


def _location(node: fx.Node) -> Location:
    stack = node.meta.get("nn_module_stack") or {}
    path, kind = list(stack.values())[-1] if stack else ("", "")
    path = str(path)
    path = "" if path == WRAPPER else path.removeprefix(f"{WRAPPER}.")
    kind_name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return Location(str(node.target), node.name, path, kind_name.rsplit(".", 1)[-1])


def stream_exit(layer: nn.Module, zero: Sequence[str], x: torch.Tensor,
                call: Callable[[nn.Module, torch.Tensor], torch.Tensor],
                sites: Sequence[Site]) -> Location | str:
    """The op where a copy of ``layer``, the parameters ``zero`` set to 0, called on ``x``
    as ``call(module, x)`` calls it, leaves the identity (module doc); a line saying why
    none is named where the forward holds the identity or the rule does not apply."""
    refused = _unlocatable(sites)
    if refused:
        return refused
    module = _Replayed(zeroed(layer, list(zero)).eval(), call)
    graph, values, start, out = _evaluated(module, x.detach().clone())
    ancestry = _live(out, values)
    identity = _identity(start, values, x, ancestry)
    if out in identity:
        return "not located: the zeroed layer's forward is the identity on this input"
    order = {n: i for i, n in enumerate(graph.graph.nodes)}
    last = max(identity, key=order.__getitem__)
    leaving = sorted((u for u in last.users if u in ancestry), key=order.__getitem__)
    if not leaving:
        return ("not located: the zeroed layer's output does not depend on its input through "
                "any op whose value is not all zeros (the stream is dropped)")
    return _location(leaving[0])
