"""Normalization foils: the classic wiring bugs of pre-norm and post-norm streams, and
numerical slips inside a norm, each the foil of the normalization laws it declares.

A norm law states where the norm sits in the stream or what it computes; no scored mutant
miswires a stream, so these pin those laws. Wiring bugs rewrite the program the way a
model author might have miswired it, then run the base on it; numerical bugs replace the
norm node's reference rule. ``tests/meta/test_meta_norm.py`` runs their ``kills``. They
are ordinary backends: ``pytest properties --backend tests.mutants.foils_norm:NormTwice``.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import ClassVar

import numpy as np

from resverify.impl.ops import apply_op
from resverify.impl.tensor import Tensor
from resverify.spec.ir import Node, Program
from resverify.spec.request import Request, Result
from tests.mutants.base import Kill, Mutant

__all__ = [
    "DetachedNormStatistics", "DetachedProjection", "EpsOutsideSqrt",
    "IdentityCarriesNorm", "NoMeanInBackward", "NormTwice", "OnePassVariance", "PostAsPre",
    "SkippedNorm", "UncentredLayerNorm",
]

NORMS = ("layer_norm", "rms_norm")


def _rewired(request: Request, nodes: list[Node], output: str | None = None) -> Request:
    program = Program(request.program.inputs, tuple(nodes), output or request.program.output)
    return dataclasses.replace(request, program=program)


def _branch_nodes(program: Program, start: str) -> set[str]:
    """``start`` and every node it depends on (the branch feeding a merge)."""
    by_name = {n.name: n for n in program.nodes}
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in by_name and name not in seen:
            seen.add(name)
            todo.extend(by_name[name].args)
    return seen


class IdentityCarriesNorm(Mutant):
    """Pre-norm wired wrong: the identity path carries N(h), not h (h + F(N(h)) becomes
    N(h) + F(N(h)))."""

    name = "identity-carries-norm"
    kills = (Kill("norm_stacks_match_spec_within_budget", "float32"),
             Kill("pre_norm_zero_branch_stack_is_exact_identity"),
             Kill("pre_norm_zero_branch_stack_is_exact_identity", "float16"),
             Kill("pre_norm_gradient_keeps_the_identity_highway_at_every_depth"))

    def run(self, request: Request) -> Result:
        normed = {n.args[0]: n.name for n in request.program.nodes if n.op in NORMS}
        nodes = [Node(n.name, n.op, (normed.get(n.args[0], n.args[0]), n.args[1]))
                 if n.op == "residual_add" else n for n in request.program.nodes]
        return super().run(_rewired(request, nodes))


class NormTwice(Mutant):
    """A normalization applied twice (a block re-normalizing what its caller normalized)."""

    name = "norm-twice"
    kills = (Kill("norm_stacks_match_spec_within_budget"),
             Kill("post_norm_zero_branch_stack_is_the_normalization", "float32"),
             Kill("post_norm_stream_stays_normalized_at_every_depth", "float32"))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op in NORMS:
            once = apply_op(node.op, args, node.eps)
            return apply_op(node.op, [once], node.eps)
        return super().apply(node, args)


class PostAsPre(Mutant):
    """Post-norm wired as pre-norm: N(h + F(h)) computed as h + F(N(h))."""

    name = "post-as-pre"
    kills = (Kill("norm_stacks_match_spec_within_budget"),
             Kill("post_norm_zero_branch_stack_is_the_normalization"),
             Kill("post_norm_stream_stays_normalized_at_every_depth"),
             Kill("post_norm_block_keeps_stream_variance_constant_with_depth", "float32"))

    def run(self, request: Request) -> Result:
        program = request.program
        by_name = {n.name: n for n in program.nodes}
        nodes = list(program.nodes)
        for norm in [n for n in program.nodes if n.op in NORMS]:
            merge = by_name.get(norm.args[0])
            if merge is None or merge.op != "residual_add":
                continue
            stream, branch = merge.args
            inner = f"{norm.name}_pre"
            reads = _branch_nodes(program, branch)
            nodes = [Node(n.name, n.op, tuple(inner if a == stream else a for a in n.args),
                          n.alpha, n.eps) if n.name in reads else n for n in nodes]
            nodes = [Node(n.name, "scale", n.args, alpha=Fraction(1)) if n.name == norm.name
                     else n for n in nodes]  # the norm after the merge becomes the identity
            nodes.append(Node(inner, norm.op, (stream,), eps=norm.eps))
        return super().run(_rewired(request, nodes))


class SkippedNorm(Mutant):
    """A normalization left out of the forward pass (the layer built, never called): every
    norm node passes its input through unchanged."""

    name = "skipped-norm"
    kills = (Kill("pre_norm_stream_variance_grows_linearly_with_depth"),
             Kill("post_norm_block_keeps_stream_variance_constant_with_depth"))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op in NORMS:
            return super().apply(Node(node.name, "scale", node.args, alpha=Fraction(1)), args)
        return super().apply(node, args)


def _norm_tensor(x: Tensor, eps: Fraction, centre: bool, one_pass: bool = False,
                 eps_outside: bool = False, mean_in_backward: bool = True,
                 detached: bool = False) -> Tensor:
    """A layer_norm-like node with one planted slip (see the flags)."""
    a = x.value
    one = np.asarray(1, dtype=a.dtype)
    e = np.asarray(float(eps), dtype=a.dtype)
    mean = a.mean(axis=-1, keepdims=True)
    c = a - mean if centre else a
    if one_pass:
        variance = (a * a).mean(axis=-1, keepdims=True) - mean * mean
    else:
        variance = (c * c).mean(axis=-1, keepdims=True)
    r = one / (np.sqrt(variance) + e) if eps_outside else one / np.sqrt(variance + e)
    y = np.asarray(c * r, dtype=a.dtype)

    def vjp(g: np.ndarray) -> tuple[np.ndarray]:
        if detached:  # mean and variance taken as constants: only the division by σ remains
            return (np.asarray(r * g, dtype=a.dtype),)
        inner = g - y * (g * y).mean(axis=-1, keepdims=True)
        if centre and mean_in_backward:
            inner = inner - g.mean(axis=-1, keepdims=True)
        return (np.asarray(r * inner, dtype=a.dtype),)

    return Tensor(y, (x,), vjp, "layer_norm")


class _NormSlip(Mutant):
    """Runs layer_norm through :func:`_norm_tensor` with the subclass's flags."""

    flags: ClassVar[dict[str, bool]] = {}

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "layer_norm" and args[0].value.size and node.eps is not None:
            return _norm_tensor(args[0], node.eps, True, **self.flags)
        return super().apply(node, args)


class UncentredLayerNorm(_NormSlip):
    """layer_norm that forgets to subtract the mean (computes rms_norm)."""

    name = "uncentred-layer-norm"
    kills = (Kill("norm_output_has_mean_zero_and_mean_square_one_up_to_eps"),
             Kill("layer_norm_is_invariant_to_shifting_its_input"))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op == "layer_norm":
            return apply_op("rms_norm", args, node.eps)
        return super().apply(node, args)


class OnePassVariance(_NormSlip):
    """layer_norm's variance as mean(x²) - mean(x)², which cancels for shifted rows."""

    name = "one-pass-variance"
    kills = (Kill("layer_norm_is_invariant_to_shifting_its_input", "float32"),)
    flags: ClassVar[dict[str, bool]] = {"one_pass": True}


class EpsOutsideSqrt(_NormSlip):
    """layer_norm dividing by sqrt(σ²) + ε instead of sqrt(σ² + ε)."""

    name = "eps-outside-sqrt"
    kills = (Kill("scaling_the_input_moves_into_eps"),)
    flags: ClassVar[dict[str, bool]] = {"eps_outside": True}


class NoMeanInBackward(_NormSlip):
    """layer_norm's VJP without the mean(ḡ) term (the centring forgotten in backward)."""

    name = "no-mean-in-backward"
    kills = (Kill("layer_norm_gradient_is_orthogonal_to_constants"),
             Kill("post_norm_gradient_passes_through_every_norm_at_every_depth"))
    flags: ClassVar[dict[str, bool]] = {"mean_in_backward": False}


class DetachedNormStatistics(_NormSlip):
    """layer_norm with its mean and variance computed outside autograd (``.detach()`` /
    ``no_grad`` statistics): the backward divides ḡ by σ and forgets the rest."""

    name = "detached-norm-statistics"
    kills = (Kill("pre_norm_gradient_keeps_the_identity_highway_at_every_depth", "float32"),
             Kill("post_norm_gradient_passes_through_every_norm_at_every_depth"))
    flags: ClassVar[dict[str, bool]] = {"detached": True}


class DetachedProjection(Mutant):
    """A projection shortcut ``linear(x, P)`` merged by residual_add passes no gradient to
    x (the shortcut treated as a constant), while P still learns."""

    name = "detached-projection"
    kills = (Kill("projection_shortcut_gradient_is_both_paths"),)

    def run(self, request: Request) -> Result:
        self.shortcuts = {n.args[0] for n in request.program.nodes if n.op == "residual_add"}
        return super().run(request)

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        out = super().apply(node, args)
        if node.op != "linear" or node.name not in self.shortcuts:
            return out
        x, w = args
        inner = out.vjp
        assert inner is not None

        def vjp(g: np.ndarray) -> tuple[np.ndarray, ...]:
            _, gw = inner(g)
            return np.zeros_like(x.value), gw

        return Tensor(out.value, (x, w), vjp, "linear")

