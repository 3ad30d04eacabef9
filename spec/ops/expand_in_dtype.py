"""``expand_in_dtype``: expand, whose gradient sums its copies in the tensor's own dtype.

Why an op: torch's CPU layer norm backward sums the affine weight's and bias's gradients
over the rows in buffers of the input's dtype, one buffer per thread, each row added and
rounded in turn; only the threads' buffers are then added in float32 and rounded once.
In bfloat16 that is up to one rounding to bfloat16 per row, not the one rounding of a
float32 sum (measured: tests/spec/ops/test_expand_in_dtype.py emulates it bit for bit on
1 and 2 threads). The lowering of ``native_layer_norm`` broadcasts its weight and bias
with this op, so their gradients get that budget while every other broadcast keeps the
declared accumulation's.

Forward, VJP, JVP and balls are :class:`~resverify.spec.ops.expand.Expand`'s: the op
computes the same values, and only the VJP's budget differs, and only under a declared
wider accumulation. Its derivation: ``M`` copies summed, each addition made in float32
(relative error at most ``u32``) and rounded to the dtype (at most ``u``), at most
``M - 1`` such additions on any term inside a thread, then at most ``T - 1 <= M - 1``
float32 additions across threads and one rounding to the dtype. A term passes through at
most ``M`` roundings to the dtype and ``2M`` in float32, so the error is at most
``(1 + u)^M (1 + u32)^(2M) - 1 <= exp(M u + 2M u32) - 1`` times the sum of the terms'
sizes. That bound is used as it is, not as ``gamma_M``, which is infinite from ``M u = 1``
on (256 rows in bfloat16) where the sum's error is not: a long bfloat16 sum's bound is
weak (``e - 1`` times the sizes at 256 rows), but finite and sound. Where nothing is
declared, the sum is in the dtype in some order, which ``gamma_{M-1}`` already covers (the
expand rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from resverify.spec.ops.base import Site, broadcast_copies, sum_back, unbroadcast
from resverify.spec.ops.expand import Expand
from resverify.spec.rounding import UNIT_ROUNDOFF, Bound, Ctx

__all__: list[str] = []


class ExpandInDtype(Expand):
    """``expand_in_dtype(a, shape)``: :class:`Expand`, its copies' cotangents summed row by
    row in ``a``'s dtype (torch's CPU norm affine backward), not in the declared wider
    accumulation dtype."""

    name = "expand_in_dtype"

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``M`` copies: ``exp(M u + 2M u') - 1`` (``u'`` the declared accumulation
        dtype's) times the sum of their sizes under a declared wider accumulation; expand's
        rule otherwise."""
        shape = a[0].mag.shape
        if not c.widened:
            return [sum_back(c, g, shape)]
        assert c.accumulate is not None
        copies = broadcast_copies(g.mag, a[0].mag)
        rel = _grown(copies * (float(UNIT_ROUNDOFF[c.dtype])
                               + 2 * float(UNIT_ROUNDOFF[c.accumulate])))
        err = unbroadcast(g.err, shape) + rel * unbroadcast(g.hat, shape) + c.tiny
        return [c.done(unbroadcast(g.mag, shape), err, copies)]


def _grown(x: float) -> float:
    """An upper bound of ``exp(x) - 1`` for ``x >= 0`` given rounded to nearest: the
    computed ``expm1`` (within a few ulps of the true value) raised by ``2^-40``
    relative, then one float further up."""
    return math.nextafter(math.expm1(x) * (1 + 2.0**-40), math.inf)
