"""``embedding``: rows of a table gathered by constant integer indices.

Why an op: T5's attention adds a relative position bias, a learned table (buckets × heads)
read at a bucket index per query and key position (``nn.Embedding``). The indices are
computed from ``arange`` alone, so they are constants of the traced program
(:mod:`resverify.blocks.constants`), and the table is a parameter whose gradient is judged.

The forward moves elements and rounds nothing (a :class:`~resverify.spec.ops.layout.Layout`
op). The VJP scatters the cotangent's rows back into the table, adding them where a row
was read more than once: a row read ``k`` times gets a sum of ``k`` parts, charged
``gamma_{k-1}`` of the dtype itself, not the declared accumulation dtype: torch's CPU
backward adds the rows one by one in the table's dtype (a bfloat16 row read 256 times is
bitwise the sequential bfloat16 sum, not the float32 sum rounded once:
tests/spec/ops/test_embedding.py); a row read once is its cotangent row exactly, a row
never read is 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INTS, Kind, Params, Sample
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.layout import Layout
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx, gamma

__all__: list[str] = []


def _picked(k: Params, rows: int) -> np.ndarray:
    """The one-hot (rows × positions) matrix of which table row each position reads."""
    indices = np.asarray(k.ints("indices"), dtype=np.int64)
    return np.arange(rows)[:, None] == indices[None, :]


def _scattered(g: Any, table: Shape, k: Params) -> Any:
    """``g`` (positions ... × width) summed into the ``table``'s rows, each the sum of the
    cotangent rows of the positions that read it (0 where none did)."""
    flat = np.asarray(g).reshape(len(k.ints("indices")), table[1])
    out = np.zeros_like(flat, shape=table)
    np.add.at(out, np.asarray(k.ints("indices"), dtype=np.int64), flat)
    return out


class Embedding(Layout):
    """``embedding(w, indices, index_shape)``: ``w[indices]``, the rows of the 2-D table
    ``w`` at the positions of an index array of shape ``index_shape`` (held flat in
    ``indices``, each below ``w``'s row count); the output is ``index_shape + (width,)``.
    The VJP adds each position's cotangent row into the row it read."""

    name, arity = "embedding", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"indices": INTS, "index_shape": INTS}
    samples = (Sample(((4, 3),), indices=(0, 2, 2, 1, 0, 0), index_shape=(2, 3)),
               Sample(((3, 2),), indices=(1,), index_shape=(1,)),
               Sample(((3, 2),), indices=(2,), index_shape=()),
               Sample(((3, 2),), indices=(), index_shape=(0,)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        (table,), indices, index_shape = shapes, k.ints("indices"), k.ints("index_shape")
        if len(table) != 2 or math.prod(index_shape) != len(indices) or \
                any(i >= table[0] for i in indices):
            raise ShapeMismatch(self.name, table, (indices, index_shape))
        return (*index_shape, table[1])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        """``xp.take`` of the rows (the array API's ``take``, along axis 0), reshaped."""
        rows = xp.take(args[0], np.asarray(k.ints("indices"), dtype=np.int64), axis=0)
        return xp.reshape(rows, (*k.ints("index_shape"), args[0].shape[1]))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent's rows added into the rows they read."""
        return (_scattered(g, args[0].shape, k),)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """A gradient row is the sum of at most as many cotangent rows as its most read."""
        indices = at.alpha.ints("indices")
        return (g_err * max((indices.count(i) for i in set(indices)), default=1),)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """A row read ``k`` times: its parts' errors summed plus ``gamma_{k-1}`` (in the
        dtype) of their computed sizes."""
        k, table = at.alpha, a[0].mag.shape
        reads = _picked(k, table[0]).sum(axis=1)
        rel = np.array([gamma(max(n - 1, 0), c.dtype) for n in reads.tolist()])[:, None]
        mag, err, hat = (_scattered(x, table, k) for x in (g.mag, g.err, g.hat))
        return [c.done(mag, err + rel * hat, int(reads.max(initial=0)))]

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """The scatter as a sum over positions, each row's other positions exact zeros."""
        rows, width = args[0].mid.shape
        picked = _picked(alpha, rows)[:, :, None]
        flat = g.reshape((picked.shape[1], width))
        spread = Ball(*(np.where(picked, part[None], 0.0)
                        for part in (flat.mid, flat.rad, flat.lo)))
        return (ball.reduce_sum(spread, (1,)),)
