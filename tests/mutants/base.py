"""The base every mutant builds on: the reference backend run through hooks a bug can replace.

A mutant is a correct engine with ONE planted bug, so a failure of the suite on it is due
to that bug alone. Every entry of the catalog, the scored mutants and the law foils alike,
builds on the one :class:`Mutant` here, so the bug-free base the meta-tests run as their
control is exactly the engine every bug was planted in. :class:`Mutant` runs the reference ops of
:mod:`resverify.impl.numpy_backend` on the Tensor graph of :mod:`resverify.impl.tensor`
behind five hooks (``leaf``, ``apply``, ``backward``, ``finish``, ``refuse``), and in
forward mode two more (``seed_tangents``, ``tangent``: each node's tangent from its op's
``numpy_jvp``, pushed along beside the forward pass); a mutant overrides one of them. It
claims both modes, as the reference does. Results are made in one place (:func:`answer`),
so the result type can change without touching the bugs.

An entry says which laws must kill it as data (:class:`Kill`, in ``kills``): the
meta-tests' catch tables are read from there, not kept beside the catalog by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from resverify.impl.interpret import node_alpha
from resverify.impl.numpy_backend import NumpyBackend, apply
from resverify.impl.tensor import Tensor, Vjp, _topological
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request, Result, ResultError, Value

__all__ = ["CLASSES", "Kill", "Mutant", "accumulate", "all_edges", "answer", "retarget"]

CLASSES = ("merge semantics", "gradient accumulation", "identity path", "alpha", "linear",
           "activations", "reductions", "dtypes", "state", "errors", "statistics",
           "forward mode")
"""The bug classes of the catalog, in the order the table lists them."""


@dataclasses.dataclass(frozen=True)
class Kill:
    """One law that must kill an entry: the property test (``law``, its name without
    ``test_``), the dtype it runs in, and how the meta-tests check it.

    ``kind`` is the failure kind the catch must show (``law``: a law broken by the values;
    ``bad_result``, ``refused``, ``raised``: an answer of the wrong form, a refusal of a
    valid request, an exception out of ``run``); ``pinned``: caught
    by the pinned examples and 60 derandomized generated ones (``tests.meta.runner.CATCH``);
    ``generated``: caught by generated examples alone under the ci profile too, for a bug
    that only a drawn program shows.
    """

    law: str
    dtype: str = "float64"
    kind: str = "law"
    pinned: bool = True
    generated: bool = False


def answer(output: np.ndarray, grads: Mapping[str, np.ndarray],
           tangent: np.ndarray | None = None) -> Value:
    """A successful result: the output and every input's gradient (and in forward mode the
    output tangent)."""
    return Value(output, dict(grads), tangent)


def retarget(out: Tensor, vjp: Vjp) -> Tensor:
    """``out`` with its local VJP replaced (the forward value stays)."""
    out.vjp = vjp
    return out


def accumulate(out: Tensor, seed: np.ndarray,
                add: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
                contributions: Callable[[Tensor, np.ndarray], list[tuple[Tensor, np.ndarray]]]
                ) -> None:
    """Reverse-mode accumulation in topological order, with the pending sum made by
    ``add(pending, contribution, uses_so_far)`` and each node's contributions listed by
    ``contributions(node, g)``: the places accumulation bugs live."""
    pending: dict[int, np.ndarray] = {id(out): np.asarray(seed, out.dtype)}
    uses: dict[int, int] = {}
    for node in reversed(_topological(out)):
        g = pending.pop(id(node))
        node.grad = g.copy() if node.grad is None else np.asarray(node.grad + g, node.dtype)
        if node.vjp is None:
            continue
        for parent, part in contributions(node, g):
            part = np.asarray(part, parent.dtype)
            key = id(parent)
            uses[key] = uses.get(key, 0) + 1
            pending[key] = part if key not in pending else np.asarray(
                add(pending[key], part, uses[key]), parent.dtype)


def all_edges(node: Tensor, g: np.ndarray) -> list[tuple[Tensor, np.ndarray]]:
    assert node.vjp is not None
    return list(zip(node.parents, node.vjp(g), strict=True))


def _seed(out: Tensor, cotangent: np.ndarray) -> np.ndarray:
    """The cotangent, reshaped to the output when only its shape differs, else ones (as an
    engine seeds ``backward()`` when it has no cotangent): a mutant that accepts what the
    spec refuses, or answers in another shape, still answers with a value."""
    if cotangent.shape == out.shape:
        return cotangent
    if cotangent.size == out.value.size:
        return cotangent.reshape(out.shape)
    return np.ones_like(out.value)


def _shaped(tangent: np.ndarray, out: Tensor) -> np.ndarray:
    """The output tangent in the output's shape and dtype (a mutant whose forward value
    went wrong answers a tangent of the same form, so the verdict is on values)."""
    if tangent.shape == out.shape:
        return np.asarray(tangent, out.dtype)
    if tangent.size == out.value.size:
        return np.asarray(tangent.reshape(out.shape), out.dtype)
    return np.zeros_like(out.value)


class Mutant(NumpyBackend):
    """The reference backend with hooks; subclasses plant one bug and say which in ``bug``.

    ``bug_class`` is one of :data:`CLASSES` (empty for a foil, which ``make mutants`` does
    not score); the class docstring's first line is the bug; ``kills`` lists the laws that
    must catch it (:class:`Kill`).
    """

    name: str = "mutant"
    bug_class: ClassVar[str] = ""
    kills: ClassVar[tuple[Kill, ...]] = ()
    capabilities = dataclasses.replace(NumpyBackend.capabilities, modes=("vjp", "jvp"))

    def leaf(self, name: str, value: np.ndarray) -> Tensor:
        """The tensor of input ``name`` (a private copy of the request's array)."""
        return Tensor(np.array(value, copy=True))

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        """One node of the program, applied to its argument tensors."""
        return apply(node, args)

    def backward(self, out: Tensor, seed: np.ndarray) -> None:
        """Reverse-mode accumulation from the output's cotangent ``seed``."""
        out.backward(seed)

    def refuse(self, request: Request, exc: ShapeMismatch) -> Result:
        """The answer to a shape-invalid program."""
        return ResultError.mismatch(exc)

    def finish(self, request: Request, result: Value) -> Result:
        """The result as returned (a last chance to change it)."""
        return result

    def seed_tangents(self, tangents: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The input tangents the forward-mode pass starts from (private copies)."""
        return {n: np.array(t, copy=True) for n, t in tangents.items()}

    def tangent(self, node: Node, args: list[Tensor], ts: list[np.ndarray],
                out: Tensor) -> np.ndarray:
        """The node's output tangent from its arguments' tangents ``ts`` (forward mode)."""
        jvp = OP_TABLE[node.op].numpy_jvp(ts, [a.value for a in args], out.value,
                                          node_alpha(node))
        return np.asarray(jvp, out.dtype)

    def run(self, request: Request) -> Result:
        refused = self.capabilities.unclaimed(request, self.name)
        if refused is not None:
            return refused
        leaves = {n: self.leaf(n, v) for n, v in request.inputs.items()}
        env: dict[str, Tensor] = dict(leaves)
        tangents = None if request.tangents is None else self.seed_tangents(request.tangents)
        try:
            for node in request.program.order:
                args = [env[a] for a in node.args]
                env[node.name] = self.apply(node, args)
                if tangents is not None:
                    tangents[node.name] = self.tangent(
                        node, args, [tangents[a] for a in node.args], env[node.name])
        except ShapeMismatch as exc:
            return self.refuse(request, exc)
        out = env[request.program.output]
        self.backward(out, _seed(out, request.cotangent))
        grads = {n: np.zeros_like(t.value) if t.grad is None else t.grad
                 for n, t in leaves.items()}
        tangent = None if tangents is None else _shaped(tangents[request.program.output], out)
        return self.finish(request, answer(np.array(out.value, copy=True), grads, tangent))
