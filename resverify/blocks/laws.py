"""The residual laws, one table: name -> the checking function and the modes it runs in.

Why a table: the checker, the tests and (later) the command and the report all read the
same entries, so adding a law touches one place. Each law is a pure function of a
:class:`~resverify.blocks.trace.Case` (a built block, its recipe, dtype, mode and inputs)
that returns its figures, raises :class:`~resverify.properties.assertions.PropertyFailure`
(kind ``law``) with one line carrying actual, expected and the call, or raises
:class:`~resverify.blocks.trace.Unjudged` when its precondition does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from resverify.blocks.adapters import adapter_of
from resverify.blocks.laws_backward import gradient_skip
from resverify.blocks.laws_drop import drop_path
from resverify.blocks.laws_forward import decomposition
from resverify.blocks.laws_gamma import affine_in_gamma
from resverify.blocks.laws_paths import paths
from resverify.blocks.laws_stream import no_aliasing, stream_dtype
from resverify.blocks.laws_zero import zero_branch
from resverify.blocks.recipe import Recipe
from resverify.blocks.trace import Case

__all__ = []


@dataclass(frozen=True)
class Law:
    """A law: its name, its check, the modes it is judged in, and what it states."""

    name: str
    check: Callable[[Case], dict[str, float]]
    modes: tuple[str, ...] = ("eval", "train")
    needs: Callable[[Recipe], bool] = lambda recipe: True
    """Whether the law has anything to judge on a recipe (a LayerScale, a drop path)."""
    needs_paths: bool = False
    """Whether the law judges only the paths asked for (``paths=``), and runs only then."""
    presumes: str | None = None
    """The law whose holding this one's examples require: where it fails in a dtype and
    mode, this one's pass there is ``unjudged`` (:func:`~.check.settled`)."""

    @property
    def states(self) -> str:
        return (self.check.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


LAWS: Mapping[str, Law] = {law.name: law for law in (
    Law("stream_dtype", stream_dtype, ("eval",)),
    Law("no_aliasing", no_aliasing),
    Law("decomposition", decomposition),
    Law("gradient_skip", gradient_skip, presumes="decomposition"),
    Law("zero_branch", zero_branch),
    Law("affine_in_gamma", affine_in_gamma, ("eval",),
        lambda recipe: any(s.scale for s in recipe.sites)),
    Law("drop_path", drop_path, needs=lambda recipe: any(s.drop_path for s in recipe.sites)),
    Law("paths", paths, ("eval",), needs_paths=True),
)}
"""Every law, in the order checks run and reports list them: a law whose failure explains
others first (a stream in the wrong dtype breaks every sum; a sum that is not the recipe's
leaves the gradient unjudged and the zero branch wrong; a missing skip gradient shows again
in the zero branch's backward), then the laws of single parts (γ, drop path, the paths)."""


def applicable(recipe: Recipe, paths: Iterable[str] = ()) -> list[str]:
    """The laws with something to judge on ``recipe``, in table order: not one its library
    has nothing to judge on (its adapter's :attr:`~.adapter.BlockAdapter.inapplicable`), nor
    one whose feature the recipe lacks (:attr:`Law.needs`); a law of the paths
    (``needs_paths``) only when ``paths`` names some."""
    asked = bool(tuple(paths))
    inapplicable = adapter_of(recipe).inapplicable
    return [name for name, law in LAWS.items() if name not in inapplicable
            and law.needs(recipe) and (asked or not law.needs_paths)]
