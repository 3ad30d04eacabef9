"""The base of the layout ops, which move elements and compute nothing.

Each element of a layout op's output is one element of an argument (reshape, permute,
slice, cat) or a copy of one (expand): no arithmetic, so no rounding. The value, its
error bound and its budget pass through the map unchanged, and so do the fast oracle's
balls, component by component (``mid``, ``rad`` and ``lo`` each moved as the values
are). Its transpose moves the cotangent back, putting zeros where no output element came
from (slice) and splitting it (cat), except that of an op that copies: expand's sums the
copies, which rounds, so expand states the VJP's error, budget and ball itself.

A layout op is linear, so as every :class:`~resverify.spec.ops.linear_map.LinearMap` it
states one ``value`` (over an array namespace: ``xp.reshape``, ``xp.permute_dims``,
``xp.broadcast_to``, ``xp.concat``, or indexing) and one ``transpose`` (on NumPy or
object arrays), and its integer attributes come to both as ``k``, a
:class:`~resverify.spec.ops.attributes.Params`, unchanged in every form.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ball import Ball
from resverify.spec.ops.base import Site
from resverify.spec.ops.linear_map import NUMPY, LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx

__all__ = []


def _moved(op: LinearMap, parts: Sequence[Sequence[np.ndarray]], k: Any) -> list[np.ndarray]:
    """``op``'s value on each part (the ``mag`` of every argument, then the ``err``, ...)."""
    return [np.array(op.value(NUMPY, part, k)) for part in parts]


class Layout(LinearMap):
    """A linear op whose output elements are its arguments' elements, moved: a subclass
    gives its attributes, shape rule, ``value`` and ``transpose``; every error, budget and
    ball rule follows here (no rounding anywhere)."""

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Any) -> Fraction:
        """Each output element is an argument's element: its error, the largest of theirs."""
        return max(errs)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Each gradient element is a cotangent element or 0."""
        return tuple(g_err for _ in at.args)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Moved, not computed: the arguments' bounds moved as their values are."""
        return Bound(*_moved(self, ([x.mag for x in a], [x.err for x in a]), at.alpha))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The cotangent's bound moved back as the cotangent is."""
        mags, errs = (self.transpose(NUMPY, part, [x.mag for x in a], at.alpha)
                      for part in (g.mag, g.err))
        return [Bound(np.array(m), np.array(e)) for m, e in zip(mags, errs, strict=True)]

    # the fast oracle's rules on balls: each component moved

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return Ball(*_moved(self, [[getattr(b, part) for b in args]
                                   for part in ("mid", "rad", "lo")], alpha))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        mids = [b.mid for b in args]
        parts = [self.transpose(NUMPY, getattr(g, part), mids, alpha)
                 for part in ("mid", "rad", "lo")]
        return tuple(Ball(*(np.array(p[i], dtype=np.float64) for p in parts))
                     for i in range(len(args)))
