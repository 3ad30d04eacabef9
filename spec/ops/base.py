"""What an op entry is: the :class:`Op` base class, and the helpers the entries share.

Each op of the IR is one subclass of :class:`Op` in its own module of this package, one
instance of it in :data:`resverify.spec.ops.OP_TABLE`; the package's docstring lists what an
entry holds. :class:`Elementwise` (in :mod:`resverify.spec.ops.elementwise`) is the base of a
smooth unary op, whose reverse and forward rules follow from one slope; :class:`LinearMap`
and :class:`Bilinear` (in :mod:`resverify.spec.ops.linear_map`) are the bases of the linear
ops, whose forms and forward-mode rules follow from one value and one transpose.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.errors import InvalidProgram, Shape, ShapeMismatch, UsageError
from resverify.spec.ops.attributes import EXACT, Kind
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx, up

__all__ = ["ArrayNamespace", "Op", "Pullback", "Site", "broadcast_shapes", "same_shape",
           "unbroadcast"]

Pullback = Callable[[np.ndarray], tuple[np.ndarray, ...]]
"""A reference op's local VJP: the output's cotangent to one gradient per argument."""


# ----------------------------------------------------------------------------------------
# shapes: the helpers the shape rules and the VJPs share


def broadcast_shapes(op: str, left: Shape, right: Shape) -> Shape:
    """NumPy broadcasting of two shapes, or ShapeMismatch naming both."""
    out: list[int] = []
    for i in range(1, max(len(left), len(right)) + 1):
        a = left[-i] if i <= len(left) else 1
        b = right[-i] if i <= len(right) else 1
        if a != b and 1 not in (a, b):
            raise ShapeMismatch(op, left, right)
        out.append(b if a == 1 else a)
    return tuple(reversed(out))


def same_shape(op: str, left: Shape, right: Shape) -> Shape:
    """``left`` when it equals ``right`` exactly, else ShapeMismatch naming both."""
    if left != right:
        raise ShapeMismatch(op, left, right)
    return left


def unbroadcast(grad: Any, shape: Shape) -> np.ndarray:
    """Sum ``grad`` over the axes broadcasting added or stretched to go from ``shape``.

    Keeps the dtype of ``grad``: object arrays of numbers, float bounds, or a reference
    gradient in its own dtype (a rank-0 product, which NumPy returns as a scalar, too).
    """
    grad = np.asarray(grad)
    extra = grad.ndim - len(shape)
    out = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.shape[i] != 1)
    if stretched:
        out = out.sum(axis=stretched, keepdims=True)
    return np.asarray(out, dtype=grad.dtype).reshape(shape)


# ----------------------------------------------------------------------------------------
# what an entry is


@dataclass(frozen=True)
class Site:
    """The exact run at one node: its attribute (α, ε, or the integer ones), the
    arguments' values and error bounds, the output's."""

    alpha: Any
    args: Sequence[Arr]
    errs: Sequence[Fraction]
    out: Arr
    err: Fraction


class ArrayNamespace:
    """An array library as the ops' ``array`` forms see it: every function they call beyond
    the operators ``+``, ``*`` and ``/``, read by its name.

    A unary op calls the function named after it (``relu``, ``tanh``, ``sigmoid``,
    ``sum``), ``linear`` calls ``matmul``. Each name is looked up in the adapter's ``own``
    functions first, then in the library's ``modules`` in their order, so an adapter lists
    only where its library differs: ``ArrayNamespace(torch, torch.nn.functional)`` serves
    every op, TensorFlow gives its ``reduce_sum`` as ``sum=``, autograd its relu.

    ``layer_norm`` and ``rms_norm`` (called with the array and ε as a float) are read from
    ``own`` alone (:meth:`own_norm`): a library function of that name need not take those
    arguments (torch's takes the normalised shape). Without one, the op entries compose
    them from ``.mean(axis=-1, keepdims=True)``, ``-``, ``*``, ``/`` and ``** 0.5``, which
    every library here supports.
    """

    __slots__ = ("modules", "own")

    def __init__(self, *modules: Any, **own: Callable[..., Any]) -> None:
        self.modules = modules
        self.own = own

    def function(self, name: str) -> Callable[..., Any]:
        """The library's function ``name``: the adapter's own, else the first module's that
        has it; UsageError when none has."""
        if name in self.own:
            return self.own[name]
        for module in self.modules:
            found = getattr(module, name, None)
            if found is not None:
                return found
        libraries = ", ".join(getattr(m, "__name__", repr(m)) for m in self.modules)
        raise UsageError(f"the array library ({libraries or 'no module'}) has no function "
                         f"{name!r}: give it as ArrayNamespace(..., {name}=...)")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """``xp.tanh`` is :meth:`function` ``("tanh")``."""
        if name.startswith("_") or name in self.__slots__:
            raise AttributeError(name)  # copy and pickle probe these before __init__ ran
        return self.function(name)

    def own_norm(self, name: str) -> Callable[[Any, float], Any] | None:
        """The adapter's own normalisation ``name`` (``layer_norm``, ``rms_norm``), or None."""
        return self.own.get(name)


class Op(ABC):
    """One op. Subclasses define every part; :data:`OP_TABLE` holds one instance of each."""

    name: ClassVar[str]
    arity: ClassVar[int]
    attributes: ClassVar[Mapping[str, Kind]] = {}
    """The op's attributes by name, each with its kind (:mod:`.attributes`): one exact
    rational (``{"alpha": EXACT}``) or integer ones (``{"perm": INTS}``), never both.

    Every rule below receives the node's attribute as ``alpha``: the rational itself, the
    :class:`~resverify.spec.ops.attributes.Params` of the integer ones, or None."""
    rational: ClassVar[bool] = True
    """Whether the exact rules map rationals to rationals (so SymPy can check the forward)."""
    smooth: ClassVar[bool] = True
    """Whether the exact VJP is one formula everywhere (so SymPy can check it on symbols)."""
    samples: ClassVar[tuple[tuple[Shape, ...], ...]]
    """Argument shapes the generic op tests run the op on."""
    norm: ClassVar[bool] = False
    """Whether the op is a normalisation (over the last axis, with an ``eps``): the
    built-in backends without norms claim every op but these."""
    families: ClassVar[tuple[str, ...]] = ()
    """The branch families of the property suite's strategies that use the op
    (:data:`resverify.properties.strategies.FAMILY_OPS` is read from these)."""

    @property
    def attribute(self) -> str | None:
        """The name of the op's exact rational attribute (a Node field and a JSON key), if
        it takes one (``alpha``, ``eps``)."""
        return next((n for n, kind in self.attributes.items() if kind is EXACT), None)

    @property
    def takes_alpha(self) -> bool:
        """Whether the op's attribute is ``alpha`` (scale's constant)."""
        return self.attribute == "alpha"

    def refuses(self, value: Fraction) -> str | None:
        """Why the attribute's ``value`` is refused (ends "<op>'s <attribute> ..."), or None."""
        return None

    def draw(self, rng: np.random.Generator, shapes: Sequence[Shape]) -> list[np.ndarray]:
        """Argument values for the generic op tests and the corpus on ``shapes``: ``k/4``,
        ``|k| <= 8``; an op whose domain is narrower (batch_norm's variance) narrows them."""
        return [rng.integers(-8, 9, size=s) / 4.0 for s in shapes]

    @abstractmethod
    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        """The output shape from the argument shapes (and the integer attributes ``k`` of
        an op that takes them), or ShapeMismatch."""

    def dtype(self, dtypes: Sequence[str], k: Any = None) -> str:
        """The dtype the op computes in from its arguments' (``cast`` alone changes it): the
        arguments' one dtype, or InvalidProgram when they disagree."""
        if len(set(dtypes)) > 1:
            raise InvalidProgram(f"{self.name}'s arguments are in {' and '.join(dtypes)}: a "
                                 "node computes in one dtype (cast an argument)")
        return dtypes[0]

    @abstractmethod
    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        """The exact forward value (object arrays of Fractions or SymPy expressions)."""

    @abstractmethod
    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        """One gradient per argument for the output cotangent ``g``, exactly."""

    @abstractmethod
    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        """The output tangent ``J t`` for one tangent per argument ``ts``, exactly (linear in
        ``ts``, with the factors :meth:`exact_vjp` uses)."""

    @abstractmethod
    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """A bound of the output's approximation error from the arguments' bounds ``errs``."""

    @abstractmethod
    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Bounds of each gradient's approximation error (``g_err`` bounds ``g``'s)."""

    @abstractmethod
    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """A bound of the output tangent's approximation error (``t_errs`` bound ``ts``')."""

    @abstractmethod
    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """The output's floating-point bound from the arguments' bounds ``a``."""

    @abstractmethod
    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Each gradient's bound from the arguments' ``a``, the output's ``y``, the cotangent's
        ``g``."""

    @abstractmethod
    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The output tangent's bound from the arguments' ``a``, the output's ``y`` and the
        argument tangents' ``ts``."""

    @abstractmethod
    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        """The forward value built from SymPy primitives (``sp`` is the sympy module)."""

    @abstractmethod
    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        """The reference forward in the arguments' dtype, and its local VJP."""

    @abstractmethod
    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        """The reference output tangent in the arguments' dtype (``out``: :meth:`numpy`'s
        value), the NumPy form of :meth:`exact_jvp`."""

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        """The forward in an array library (its autodiff gives the VJP): by default the
        library's function named after the op (``xp.tanh`` for tanh)."""
        return xp.function(self.name)(*args)

    # the fast oracle (resverify.spec.enclosure): optional; without them, a request with
    # the op goes to the exact interpreter

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """A ball around the exact forward value from balls around the arguments."""
        raise NotEnclosed(f"{self.name} has no enclosure rule")

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """Balls around each exact gradient from the cotangent's ball ``g``, the
        arguments' and the output's."""
        raise NotEnclosed(f"{self.name} has no enclosure rule")

    @property
    def encloses(self) -> bool:
        """Whether the op has its enclosure rules (:meth:`enclose`, :meth:`enclose_vjp`)."""
        return type(self).enclose is not Op.enclose

    exact_output_in_trace: ClassVar[bool] = False
    """Whether the fast budget's trace holds the op's output as exact Fractions (the
    balls' midpoints) rather than floats: tanh's slope rule computes with them."""
    output_read_as_size: ClassVar[bool] = False
    """Whether the op's own budget rules read its output only as ``up(|y| + e)``
    (:func:`~resverify.spec.ceiling.up_abs_plus`), which finite float64 values give bit for
    bit as their Fractions do: the fast budget's trace then holds the output as the balls'
    float64 midpoints even where :attr:`exact_output_in_trace` asks for Fractions, wherever
    no op reading it has :attr:`budget_reads_args` (softmax's, masked_softmax's)."""
    budget_reads_args: ClassVar[bool] = True
    """Whether the op's budget rules (``budget``, ``budget_vjp``) may read its arguments'
    trace values; False only for an op whose rules read their Bounds alone, and its own
    output (:func:`exact_sizes`): matmul, linear, mul, add and cast."""
    exact_args_in_trace: ClassVar[bool] = False
    """Whether the fast budget's trace holds the op's argument exactly as ``mid + lo``: the
    norms centre and square the row, which in float64 would round below the exact trace."""
    slack_reads_lower: ClassVar[bool] = False
    """Whether :meth:`error_vjp`, run on magnitude stand-ins for the spec's slack, reads
    lower bounds of the arguments' magnitudes (relu asks whether an input is within its
    error of 0) instead of upper bounds."""

    def slack_rules(self) -> Op:
        """The entry whose ``error`` and ``error_vjp`` the fast oracle runs on magnitude
        stand-ins (every element the largest magnitude) to bound the spec's own slack:
        the op itself, unless its error rules read more than magnitudes (the norms)."""
        return self


def cast(value: object, like: np.ndarray) -> np.ndarray:
    """``value`` in the dtype of ``like`` (reference ops never widen their inputs)."""
    return np.asarray(value, dtype=like.dtype)


def broadcast_copies(big: np.ndarray, small: np.ndarray) -> int:
    """How many elements of ``big`` each element of ``small`` was broadcast to (at least 1)."""
    return max(1, big.size // max(1, small.size))


def symbolic_pairs(sp_op: Callable[[Any, Any], Any], shape: Shape,
                   args: Sequence[np.ndarray]) -> np.ndarray:
    """``sp_op`` of the broadcast pairs of a binary op's symbolic arguments."""
    left, right = (np.broadcast_to(a, shape) for a in args)
    return np.array([sp_op(p, q) for p, q in zip(left.flat, right.flat, strict=True)],
                    dtype=object).reshape(shape)


def elementwise(fn: Callable[[Any], Any], array: np.ndarray) -> np.ndarray:
    """``fn`` of every element of an object array (a unary op's symbolic form)."""
    out = np.empty(array.shape, dtype=object)
    for index in np.ndindex(*array.shape):
        out[index] = fn(array[index])
    return out


def _magnitude(value: object) -> float:
    try:
        return abs(float(value))  # type: ignore[arg-type]
    except OverflowError:
        return math.inf


def exact_sizes(at: Site) -> np.ndarray:
    """Upper bounds of the true value's magnitudes at a node (float64, elementwise): the
    trace's exact value rounded to float64 (to nearest: within half an ulp), one step up,
    plus its slack rounded up; inf past float64's range."""
    out = np.asarray(at.out)
    try:
        near = np.abs(out.astype(np.float64))
    except OverflowError:
        near = np.array([_magnitude(v) for v in out.reshape(-1).tolist()]).reshape(out.shape)
    with np.errstate(over="ignore"):
        return np.nextafter(np.nextafter(near, np.inf) + up(at.err), np.inf)


def sum_back(c: Ctx, g: Bound, shape: Shape) -> Bound:
    """``g`` un-broadcast to ``shape``: its errors summed plus gamma of the copies' sizes
    (a reduction: in the declared accumulation dtype, :meth:`Ctx.summed`)."""
    copies = g.mag.size // max(1, math.prod(shape))
    rel, last = c.summed(copies - 1)
    err = unbroadcast(g.err, shape) + rel * unbroadcast(g.hat, shape) + last
    return c.done(unbroadcast(g.mag, shape), err, copies)
