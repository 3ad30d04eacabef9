"""``cast``: a value rounded to another dtype, the one op whose output dtype is not its argument's.

Why an op: mixed-precision layers compute parts of themselves in another dtype (Hugging
Face's RMSNorm upcasts a bfloat16 row to float32, normalises it and casts the result back;
its softmax runs in float32). Each cast is a node with its rounding, so the budget follows
each value's own dtype (:func:`resverify.spec.ir.infer_dtypes`) and a judge that forgot a
cast fails the correct layer.

Exactly, a cast is the identity (the rounding is the backend's error, not the spec's value):
its exact, symbolic, error and ball rules are those of the identity map. Its budget is the
argument's error plus one rounding to ``target`` (none where ``target`` holds every
``source`` value: a widening cast is exact), and its VJP rounds the cotangent, which
arrives in ``target``, to ``source`` (none for a narrowing cast, whose cotangent widens).
From float64 to a dtype narrower than float32 torch rounds through float32 (two roundings:
``torch.tensor(1 + 2**-8 + 2**-30, dtype=torch.float64).to(torch.bfloat16)`` is 1, not the
nearest ``1 + 2**-7``); one rounding's bound ``u|v| + tiny`` covers that too: the two differ
only where the float32 value is a midpoint of the target, so ``|v| >= 2^e (1 + 2u)`` and
the error, at most half the target's ulp plus float32's, ``2^e (u + 2**-24)``, is below
``u|v|``. The reference rounds once, to nearest even; a bfloat16 value is held in float32,
as every request holds it (:func:`resverify.spec.request.storage_dtype`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.ball import Ball
from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.ops.attributes import DTYPE, Kind, Params, Sample
from resverify.spec.ops.base import ArrayNamespace, Pullback, Site
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import LARGEST, Bound, Ctx, holds

__all__ = ["rounded_to"]

_STORAGE = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
            "bfloat16": np.float32}


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Each value rounded once, to nearest even, to bfloat16 (8 significant bits, exponents
    down to -126, subnormals spaced 2**-133, ±inf past the largest), held in float32."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        _, exponent = np.frexp(x)
        exponent = np.maximum(exponent, -125)
        out = np.ldexp(np.round(np.ldexp(x, 8 - exponent)), exponent - 8)
        return np.where(np.abs(out) > LARGEST["bfloat16"], np.copysign(np.inf, x),
                        out).astype(np.float32)


def rounded_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded once to ``dtype``, to nearest even, in the NumPy dtype that holds
    it (bfloat16 in float32)."""
    if dtype == "bfloat16":
        return _to_bfloat16(values)
    return np.asarray(values).astype(_STORAGE[dtype])


def _rounded(c: Ctx, x: Bound, source: str, target: str) -> Bound:
    """``x`` (in ``source``) rounded to ``target``: its error plus the rounding's, relative
    to the computed value's size, and one smallest subnormal of ``c`` (``target``'s)."""
    if holds(target, source):
        return x
    return c.done(x.mag, x.err + c.u * x.hat + c.tiny)


class Cast(LinearMap):
    """``cast(a, target, source)``: ``a``, a ``source`` value, rounded to ``target``; the
    cotangent rounded back to ``source``. The identity exactly."""

    name, arity = "cast", 1
    budget_reads_args = False  # its budget rules read Bounds alone
    attributes: ClassVar[Mapping[str, Kind]] = {"target": DTYPE, "source": DTYPE}
    samples = (Sample(((2, 3),), source="float64", target="float32"),
               Sample(((3,),), source="float64", target="float64"),
               Sample(((2, 2),), source="float64", target="bfloat16"),
               Sample(((0, 2),), source="float64", target="float16"))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return shapes[0]

    def dtype(self, dtypes: Sequence[str], k: Any = None) -> str:
        """``target``, when the argument is in ``source`` (else InvalidProgram)."""
        if dtypes[0] != k.dtype("source"):
            raise InvalidProgram(f"cast from {k.dtype('source')} of a {dtypes[0]} value: its "
                                 f"source must be its argument's dtype")
        return k.dtype("target")

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return args[0]

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        return (g,)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Any) -> Fraction:
        return errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """The argument's bound, rounded to ``target`` (``c`` is ``target``'s context)."""
        k = at.alpha
        return _rounded(c, a[0], k.dtype("source"), k.dtype("target"))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The cotangent's bound (in ``target``), rounded to ``source``."""
        k = at.alpha
        return [_rounded(Ctx.of(k.dtype("source")), g, k.dtype("target"), k.dtype("source"))]

    # the reference and the array libraries round

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | Params | None
              ) -> tuple[np.ndarray, Pullback]:
        assert isinstance(alpha, Params)
        source, target = alpha.dtype("source"), alpha.dtype("target")

        def vjp(g: np.ndarray) -> tuple[np.ndarray, ...]:
            return (rounded_to(g, source),)

        return rounded_to(args[0], target), vjp

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | Params | None) -> np.ndarray:
        assert isinstance(alpha, Params)
        return rounded_to(ts[0], alpha.dtype("target"))

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Any) -> Any:
        """The library's ``cast(a, target)`` (each adapter gives its own: ``x.to`` in torch,
        ``astype`` in jax and autograd, ``tf.cast``)."""
        return xp.function("cast")(args[0], alpha.dtype("target"))

    # the fast oracle's rules on balls: the identity

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return args[0]

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (g,)
