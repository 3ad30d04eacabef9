"""What an example reached: the tags a law's coverage and its floor are counted in.

A verdict is only as good as the examples behind it: a law whose generator stopped sending
a tanh branch with a non-zero α cannot see a wrong tanh derivative, and nothing else says
so. So every example a property test runs is described here by the tags it *reached*, and
the plugin (:meth:`resverify.properties.plugin.PropertyRun.request`) counts them per test,
passes each to Hypothesis' ``event`` (``--hypothesis-show-statistics`` lists them) and
records the counts in the report; a law declares with the marker ``reaches(*tags)`` the
tags it must reach under the ``ci`` profile (its *floor*, recorded less the ops its
backend does not claim: :func:`claimable`), and the report lists what it left unreached.

A tag counts only what can matter to the answer:

* ``op:NAME``: a node of op NAME whose value reaches the output (no ``scale`` by α = 0 on
  every path from it to the output) and which has at least one element;
* ``alpha:zero``, ``alpha:exact``, ``alpha:inexact``: a ``scale`` node on such a path whose
  operand has at least one element, by its α: zero, non-zero and exact in the test's dtype,
  or not exact in it (so rounded when the request is made: the budget must allow for it);
* ``size:empty``, ``size:scalar``, ``size:small``, ``size:wide``: the first input's shape
  (no element; rank 0; at most :data:`NARROW` on its last axis; wider);
* ``depth:N``: N residual merges (``residual_add`` nodes), ``depth:4+`` beyond three;
* ``shared``: a node whose value reaches the output reads one name twice
  (``residual_add(a, a)``, ``mul(x, x)``): the gradient of that operand is the sum of two
  contributions;
* ``mode:jvp``: the request carries tangents (forward mode);
* ``program:refused``: a program the specification refuses (a shape mismatch), for which
  only the first input's size is told besides.

The test's dtype is not a tag: every test runs in one dtype, its parameter.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from fractions import Fraction

import numpy as np

from resverify.properties.cases import numpy_dtype
from resverify.spec.errors import ResverifyError
from resverify.spec.ir import Program, infer_shapes
from resverify.spec.request import Request

__all__ = []

NARROW = 4
"""The widest last axis of a ``size:small`` input (the strategies' ``Sizes.narrow``)."""
_DEEP = 4


def alpha_class(alpha: Fraction, dtype: str) -> str:
    """``zero``, ``exact`` (non-zero and a value of ``dtype``) or ``inexact``."""
    if alpha == 0:
        return "zero"
    rounded = np.asarray(float(alpha)).astype(numpy_dtype(dtype))
    return "exact" if Fraction(float(rounded)) == alpha else "inexact"


def live_nodes(program: Program) -> set[str]:
    """The names whose value reaches the output: every name on a path to it that does not
    pass through a ``scale`` by α = 0."""
    by_name = {n.name: n for n in program.nodes}
    live, pending = set(), [program.output]
    while pending:
        name = pending.pop()
        if name in live:
            continue
        live.add(name)
        node = by_name.get(name)
        if node is not None and not (node.op == "scale" and node.alpha == 0):
            pending.extend(node.args)
    return live


def reached(request: Request) -> frozenset[str]:
    """The tags ``request`` reaches (see the module docstring)."""
    program = request.program
    try:
        shapes = infer_shapes(program)
    except ResverifyError:  # a program the spec refuses (a shape mismatch law's request)
        return frozenset({"program:refused", f"size:{_size_class(program.inputs[0].shape)}"})
    live = live_nodes(program)
    tags: set[str] = set()
    for node in program.order:
        if node.name not in live:
            continue
        if _size(shapes[node.name]) > 0:
            tags.add(f"op:{node.op}")
        if node.op == "scale" and node.alpha is not None and _size(shapes[node.args[0]]) > 0:
            tags.add(f"alpha:{alpha_class(node.alpha, request.dtype)}")
    tags.add(f"size:{_size_class(program.inputs[0].shape)}")
    merges = sum(n.op == "residual_add" for n in program.nodes)
    tags.add(f"depth:{merges}" if merges < _DEEP else f"depth:{_DEEP}+")
    if any(len(set(n.args)) < len(n.args) for n in program.nodes if n.name in live):
        tags.add("shared")
    if request.tangents is not None:
        tags.add("mode:jvp")
    return frozenset(tags)


def claimable(declared: Iterable[str], ops: Collection[str]) -> list[str]:
    """The declared tags a backend claiming ``ops`` can reach: ``op:NAME`` for an op it
    does not claim left out (no example could reach it). Which of them no example reached
    is decided by :func:`resverify.reports.coverage.build_coverage`."""
    return [tag for tag in declared
            if not (tag.startswith("op:") and tag.removeprefix("op:") not in ops)]


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _size_class(shape: tuple[int, ...]) -> str:
    if _size(shape) == 0:
        return "empty"
    if not shape:
        return "scalar"
    return "wide" if shape[-1] > NARROW else "small"
