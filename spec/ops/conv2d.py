"""``conv2d``: the 2-D convolution (cross-correlation) of convolutional blocks, NCHW.

Why im2col: each output element is a dot product of length ``C/groups·kh·kw`` of an input
window with a filter, so the whole op is one batched matrix product of the windows
(gathered by strided slices, one per kernel tap) with the filters, group by group. Every
form then reads as a matmul: the exact one on integers (:func:`rational.matmul`), the
budget as :func:`~resverify.spec.rounding.dot` (a declared accumulation applies, as for
``linear``), the balls as :func:`~resverify.spec.ball.dot`. The input's gradient is itself a
convolution (of the cotangent spread by the stride and padded, with the filters flipped
and their channel axes swapped), so its budget and ball are the forward's rules again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.ball import Ball, batched_dot
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INT, INTS, IntValue, Kind, Params, Sample
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.linear_map import NUMPY, Bilinear
from resverify.spec.rational import ZERO, Arr, mag, times
from resverify.spec.rounding import Bound, Ctx, dot, dots

Pair = tuple[int, int]


def _geometry(k: Params) -> tuple[Pair, Pair, Pair, int]:
    """``(stride, padding, dilation, groups)``, each pair (height, width)."""
    s, p, d = (k.ints(n) for n in ("stride", "padding", "dilation"))
    return (s[0], s[1]), (p[0], p[1]), (d[0], d[1]), k.number("groups")


def _span(size: int, kernel: int, stride: int, dilation: int) -> int:
    """How many windows fit along an axis of ``size`` (already padded)."""
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _padded(xp: ArrayNamespace, x: Any, pads: Sequence[Pair]) -> Any:
    """``x`` with ``pads`` (before, after) zeros on its last two axes."""
    if not any(a or b for a, b in pads):
        return x
    return xp.pad(x, ((0, 0), (0, 0), *pads), mode="constant")  # autograd needs the mode


def _columns(xp: ArrayNamespace, x: Any, kernel: Sequence[int], stride: Pair, dilation: Pair,
             groups: int) -> Any:
    """The windows of padded ``x`` (N, C, H, W) as rows: (N, groups, OH·OW, C/groups·kh·kw),
    each row ordered as a filter of the group is (channel, tap row, tap column)."""
    n, c, h, w = x.shape
    oh, ow = (_span(size, kernel[i], stride[i], dilation[i]) for i, size in enumerate((h, w)))
    taps = [x[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
              j * dilation[1]:j * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
            for i in range(kernel[0]) for j in range(kernel[1])]
    cols = xp.reshape(xp.stack(taps, axis=-1),
                      (n, groups, c // groups, oh * ow, kernel[0] * kernel[1]))
    cols = xp.permute_dims(cols, (0, 1, 3, 2, 4))
    return xp.reshape(cols, (n, groups, oh * ow, c // groups * kernel[0] * kernel[1]))


def _filters(xp: ArrayNamespace, w: Any, groups: int) -> Any:
    """The filters (O, C/groups, kh, kw) as matrices (groups, C/groups·kh·kw, O/groups)."""
    o = w.shape[0]
    return xp.permute_dims(xp.reshape(w, (groups, o // groups, math.prod(w.shape[1:]))),
                           (0, 2, 1))


def _image(xp: ArrayNamespace, rows: Any, size: Pair) -> Any:
    """Products (N, groups, OH·OW, O/groups) as the output (N, O, OH, OW)."""
    n, g, _, per = rows.shape
    return xp.reshape(xp.permute_dims(rows, (0, 1, 3, 2)), (n, g * per, *size))


def _out_size(x_shape: Shape, w_shape: Shape, k: Params) -> Pair:
    stride, pad, dil, _ = _geometry(k)
    return (_span(x_shape[2] + 2 * pad[0], w_shape[2], stride[0], dil[0]),
            _span(x_shape[3] + 2 * pad[1], w_shape[3], stride[1], dil[1]))


def _conv(xp: ArrayNamespace, x: Any, w: Any, k: Params) -> Any:
    """The convolution in any form, by im2col and one batched ``matmul``."""
    stride, pad, dil, groups = _geometry(k)
    cols = _columns(xp, _padded(xp, x, ((pad[0], pad[0]), (pad[1], pad[1]))),
                    w.shape[2:], stride, dil, groups)
    rows = xp.matmul(cols, _filters(xp, w, groups))
    return _image(xp, rows, _out_size(x.shape, w.shape, k))


def _input_grad_operands(g: np.ndarray, w: np.ndarray, x_shape: Shape, k: Params
                         ) -> tuple[np.ndarray, np.ndarray, Params]:
    """``x̄`` is a convolution (stride 1, the same dilation and groups) of the cotangent
    spread by the stride and padded by ``dilation·(k - 1)`` before (up to the padded input's
    size after) with the filters flipped and their channel axes swapped; this gives its
    two arguments and parameters (``x̄`` of the padded input: crop it by the padding)."""
    stride, pad, dil, groups = _geometry(k)
    n, o, oh, ow = g.shape
    spread = np.zeros((n, o, stride[0] * (oh - 1) + 1, stride[1] * (ow - 1) + 1),
                      dtype=g.dtype)
    spread[:, :, ::stride[0], ::stride[1]] = g
    full = [x_shape[2 + i] + 2 * pad[i] for i in (0, 1)]
    before = [dil[i] * (w.shape[2 + i] - 1) for i in (0, 1)]
    after = [full[i] - spread.shape[2 + i] for i in (0, 1)]
    spread = np.pad(spread, ((0, 0), (0, 0), (before[0], after[0]), (before[1], after[1])))
    o, cg, kh, kw = w.shape
    flipped = w.reshape(groups, o // groups, cg, kh, kw).swapaxes(1, 2)[..., ::-1, ::-1]
    values: dict[str, IntValue] = {"stride": (1, 1), "padding": (0, 0), "dilation": dil,
                                   "groups": groups}
    inner = Params(values)
    return spread, flipped.reshape(groups * cg, o // groups, kh, kw), inner


def _cropped(v: np.ndarray, k: Params) -> np.ndarray:
    """The padded input's gradient without the padding."""
    _, pad, _, _ = _geometry(k)
    return v[:, :, pad[0]:v.shape[2] - pad[0], pad[1]:v.shape[3] - pad[1]]


def _weight_grad_operands(x: np.ndarray, g: np.ndarray, w_shape: Shape, k: Params
                          ) -> tuple[np.ndarray, np.ndarray]:
    """``w̄`` per group is ``colsᵀ ḡ`` over every window of every batch element: the
    windows (groups, C/groups·kh·kw, N·OH·OW) and the cotangent (groups, N·OH·OW, O/g)."""
    stride, pad, dil, groups = _geometry(k)
    cols = _columns(NUMPY, _padded(NUMPY, x, ((pad[0], pad[0]), (pad[1], pad[1]))),
                    w_shape[2:], stride, dil, groups)
    n, _, p, length = cols.shape
    windows = cols.transpose(1, 3, 0, 2).reshape(groups, length, n * p)
    per = g.shape[1] // groups
    grads = g.reshape(n, groups, per, p).transpose(1, 0, 3, 2).reshape(groups, n * p, per)
    return windows, grads


def _filter_grad(v: np.ndarray, w_shape: Shape) -> np.ndarray:
    """Products (groups, C/groups·kh·kw, O/groups) as the filters' shape (O, C/g, kh, kw)."""
    return v.transpose(0, 2, 1).reshape(w_shape)


def _bound(b: Bound, fn: Callable[[np.ndarray], np.ndarray]) -> Bound:
    return Bound(fn(b.mag), fn(b.err))


def _ball(b: Ball, fn: Callable[[np.ndarray], np.ndarray]) -> Ball:
    return Ball(fn(b.mid), fn(b.rad), fn(b.lo))


class Conv2d(Bilinear):
    """``conv2d(x, w, stride, padding, dilation, groups)``: x (N, C, H, W), w (O, C/groups,
    kh, kw), zero padding, out (N, O, OH, OW) with ``OH = (H + 2p - d(kh - 1) - 1)//s + 1``;
    ``out[n, o, a, b] = Σ x_pad[n, c, a s + i d, b s + j d] w[o, c', i, j]`` over the
    group's channels and the taps (torch's ``conv2d``, no bias: a bias is an ``add``).
    ``stride``, ``padding`` and ``dilation`` are (height, width) pairs; ``groups`` divides C
    and O (``groups == C``: depthwise). VJP: ``x̄`` the transposed convolution of ``ḡ``,
    ``w̄`` the windows' products with ``ḡ`` summed over every position."""

    name = "conv2d"
    attributes: ClassVar[Mapping[str, Kind]] = {"stride": INTS, "padding": INTS,
                                                "dilation": INTS, "groups": INT}
    samples = (Sample(((1, 2, 3, 3), (2, 2, 2, 2)), stride=(1, 1), padding=(0, 0),
                      dilation=(1, 1), groups=1),
               Sample(((1, 2, 3, 4), (4, 1, 2, 2)), stride=(2, 1), padding=(1, 0),
                      dilation=(1, 1), groups=2),
               Sample(((2, 1, 4, 3), (1, 1, 2, 2)), stride=(1, 2), padding=(1, 1),
                      dilation=(2, 1), groups=1),
               Sample(((0, 2, 3, 3), (2, 2, 1, 1)), stride=(1, 1), padding=(0, 0),
                      dilation=(1, 1), groups=1))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        x, w = shapes
        if len(x) != 4 or len(w) != 4:
            raise ShapeMismatch(self.name, x, w)
        stride, pad, dil, groups = (k.ints("stride"), k.ints("padding"), k.ints("dilation"),
                                    k.number("groups"))
        if (len({len(stride), len(pad), len(dil), 2}) != 1 or 0 in (*stride, *dil, groups)
                or x[1] % groups or w[0] % groups or w[1] * groups != x[1]):
            raise ShapeMismatch(self.name, x, (*w, *stride, *pad, *dil, groups))
        room = [x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1 for i in (0, 1)]
        if min(room) < 0:
            raise ShapeMismatch(self.name, x, w)
        return (x[0], w[0], *_out_size(x, w, k))

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        """A library's own ``conv2d`` where its adapter gives one (torch's), else im2col."""
        own = xp.own.get("conv2d")
        if own is not None:
            stride, pad, dil, groups = _geometry(k)
            return own(args[0], args[1], stride, pad, dil, groups)
        return _conv(xp, args[0], args[1], k)

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """``x̄`` the convolution of :func:`_input_grad_operands`, cropped; ``w̄`` the
        windows' products with ``ḡ`` (:func:`_weight_grad_operands`)."""
        x, w = args
        spread, flipped, inner = _input_grad_operands(g, w, x.shape, k)
        gx = _cropped(_conv(xp, spread, flipped, inner), k)
        windows, grads = _weight_grad_operands(x, g, w.shape, k)
        return gx, _filter_grad(xp.matmul(windows, grads), w.shape)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        length = math.prod(args[1].shape[1:])
        return length * times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """``x̄``: at most ``O/groups·kh·kw`` products; ``w̄``: ``N·OH·OW``."""
        mg, (x, w), (ex, ew) = mag(g), at.args, at.errs
        groups = at.alpha.number("groups")
        taps = w.shape[0] // groups * math.prod(w.shape[2:])
        return (taps * times(mg, g_err, mag(w), ew),
                math.prod(g.shape) // max(1, g.shape[1]) * times(mg, g_err, mag(x), ex))

    # the floating-point budget: the forward's dot products, in every direction

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A dot product of length ``C/groups·kh·kw`` per output (padding adds exact
        zeros): the propagated part plus ``gamma_L (|x̂| @ |ŵ|)``, or the declared
        accumulation's gamma and one final rounding (:meth:`Ctx.summed`)."""
        return self._forward_bound(c, a[0], a[1], at.alpha)

    def _forward_bound(self, c: Ctx, x: Bound, w: Bound, k: Params) -> Bound:
        stride, pad, dil, groups = _geometry(k)
        pads = ((pad[0], pad[0]), (pad[1], pad[1]))
        cols = _bound(x, lambda v: _columns(NUMPY, _padded(NUMPY, v, pads),
                                            w.mag.shape[2:], stride, dil, groups))
        out = dot(c, cols, _bound(w, lambda v: _filters(NUMPY, v, groups)))
        size = _out_size(x.mag.shape, w.mag.shape, k)
        return _bound(out, lambda v: _image(NUMPY, v, size))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``x̄`` a convolution too (length ``O/groups·kh·kw``, the spread cotangent's zeros
        exact), ``w̄`` dot products of length ``N·OH·OW``."""
        (x, w), k = a, at.alpha
        parts = [_input_grad_operands(v, u, x.mag.shape, k)
                 for v, u in ((g.mag, w.mag), (g.err, w.err))]
        inner = parts[0][2]
        gx = self._forward_bound(c, Bound(parts[0][0], parts[1][0]),
                                 Bound(parts[0][1], parts[1][1]), inner)
        pairs = [_weight_grad_operands(u, v, w.mag.shape, k)
                 for u, v in ((x.mag, g.mag), (x.err, g.err))]
        gw = dot(c, Bound(pairs[0][0], pairs[1][0]), Bound(pairs[0][1], pairs[1][1]))
        return [_bound(gx, lambda v: _cropped(v, k)),
                _bound(gw, lambda v: _filter_grad(v, w.mag.shape))]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``conv(t_x, w) + conv(x, t_w)``: 2L products summed in any order."""
        (x, w), (tx, tw), k = a, ts, at.alpha
        stride, pad, dil, groups = _geometry(k)
        pads = ((pad[0], pad[0]), (pad[1], pad[1]))

        def cols(b: Bound) -> Bound:
            return _bound(b, lambda v: _columns(NUMPY, _padded(NUMPY, v, pads),
                                                w.mag.shape[2:], stride, dil, groups))

        def filters(b: Bound) -> Bound:
            return _bound(b, lambda v: _filters(NUMPY, v, groups))

        out = dots(c, [(cols(tx), filters(w)), (cols(x), filters(tw))])
        size = _out_size(x.mag.shape, w.mag.shape, k)
        return _bound(out, lambda v: _image(NUMPY, v, size))

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return self._forward_ball(args[0], args[1], alpha)

    def _forward_ball(self, x: Ball, w: Ball, k: Params) -> Ball:
        stride, pad, dil, groups = _geometry(k)
        pads = ((pad[0], pad[0]), (pad[1], pad[1]))
        cols = _ball(x, lambda v: _columns(NUMPY, _padded(NUMPY, v, pads),
                                           w.mid.shape[2:], stride, dil, groups))
        lead = cols.mid.shape[0]

        def filters(v: np.ndarray) -> np.ndarray:  # the same filters for every batch element
            f = _filters(NUMPY, v, groups)
            return np.broadcast_to(f, (lead, *f.shape))

        rows = batched_dot(cols, _ball(w, filters))
        size = _out_size(x.mid.shape, w.mid.shape, k)
        return _ball(rows, lambda v: _image(NUMPY, v, size))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        (x, w), k = args, alpha
        fields = [_input_grad_operands(v, u, x.mid.shape, k)
                  for v, u in ((g.mid, w.mid), (g.rad, w.rad), (g.lo, w.lo))]
        gx = self._forward_ball(Ball(*(f[0] for f in fields)), Ball(*(f[1] for f in fields)),
                                fields[0][2])
        pairs = [_weight_grad_operands(u, v, w.mid.shape, k)
                 for u, v in ((x.mid, g.mid), (x.rad, g.rad), (x.lo, g.lo))]
        gw = batched_dot(Ball(*(p[0] for p in pairs)), Ball(*(p[1] for p in pairs)))
        return (_ball(gx, lambda v: _cropped(v, k)),
                _ball(gw, lambda v: _filter_grad(v, w.mid.shape)))
