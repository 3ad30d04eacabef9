"""The block adapter: what a block law asks of a block, whatever library built it.

Why an adapter: a residual law (the sum is the stream plus the update, the zeroed block is
its skips' map, the gradient keeps its identity part, the stream keeps its dtype) says
nothing about torch or JAX; only *how* the stream is read and a branch run alone does. A
torch block answers through forward hooks and its own submodules
(:mod:`resverify.blocks.torch_adapter`), a Haiku block through its ``(params, apply)`` and the
recipe's ``parts`` (:mod:`resverify.blocks.haiku_adapter`). Each law is written once against
:class:`BlockAdapter` (:mod:`.laws_forward`, :mod:`.laws_zero`, :mod:`.laws_backward`,
:mod:`.laws_stream`), as array-api-tests judges every array library through one namespace.

Every answer is a torch tensor holding the block's values exactly, in the block's own dtype;
:meth:`BlockAdapter.value` is what a value law compares (a torch block: the tensor itself, so
a stream in another dtype is another value; a JAX block: its values in float64, its dtype
being :func:`~.laws_stream.stream_dtype`'s alone).

An adapter answers questions and never calls back: the one driver of the block laws
(:mod:`resverify.blocks.check`) asks it to build the block, an example's :class:`Case` and the
scope judging runs in, and runs the same example loop for every library; the laws find it
with :func:`resverify.blocks.adapters.ask`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any

    import torch

    from resverify.blocks.recipe import Recipe
    from resverify.blocks.records import Draw
    from resverify.blocks.trace import Case, Observed

__all__ = []


@dataclass(frozen=True)
class BlockVjp:
    """One call of the block with its VJP: the output, the cotangent drawn for it, ``x̄``
    (None where the output does not depend on the input) and each trainable parameter's
    gradient by name (None where it gets none)."""

    y: torch.Tensor
    y_bar: torch.Tensor
    x_bar: torch.Tensor | None
    params: Sequence[tuple[str, torch.Tensor | None]]


class BlockAdapter(Protocol):
    """The questions the block laws ask, one method each."""

    library: str
    """The library whose blocks this adapter answers for (``"torch"``, ``"haiku"``)."""
    inapplicable: Mapping[str, str]
    """The laws with nothing to judge on this library's blocks, each with why: they never
    apply to its blocks (:func:`~.laws.applicable`), and asking for one by name is a
    UsageError that says why."""

    def observe(self, case: Case) -> Observed:
        """One call of the block on the case's input (drop paths at 0): the stream entering
        each site, its sum where visible, the stream leaving it, and the output."""
        ...

    def shortcut(self, case: Case, i: int, s: torch.Tensor) -> torch.Tensor:
        """Site ``i``'s shortcut of its entry ``s``, as the block computes it."""
        ...

    def parts(self, case: Case, i: int, s: torch.Tensor
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Site ``i`` at entry ``s``: its shortcut's value, and each branch's alone."""
        ...

    def compose(self, case: Case, i: int, skip: torch.Tensor, update: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z, exit)`` of site ``i`` as the recipe composes them from the shortcut's value
        and the update, in the block's own arithmetic."""
        ...

    def post(self, case: Case, i: int, z: torch.Tensor) -> torch.Tensor:
        """Site ``i``'s exit from the sum ``z``: ``post(act(z))``."""
        ...

    def beta(self, case: Case, i: int) -> torch.Tensor | float:
        """Site ``i``'s skip scale as the block holds it."""
        ...

    def zeroed(self, case: Case, names: Sequence[str]) -> Case:
        """The case with the parameters ``names`` set to zero."""
        ...

    def vjp(self, case: Case, params: bool = False) -> BlockVjp:
        """The block's output on the case's input, and its VJP (each trainable parameter's
        gradient too when ``params``)."""
        ...

    def site_vjp(self, case: Case, i: int, s: torch.Tensor, g: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(s̄, parts)`` of site ``i`` as the recipe composes it, at entry ``s`` for exit
        cotangent ``g``: ``parts`` the skip's and each branch's share of ``s̄``."""
        ...

    def zero_map_vjp(self, case: Case, seen: Observed | None, y_bar: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(e, ē)``: the zero-branch map of the case's input (each site's exit of its own
        scaled shortcut; with ``seen``, each sum and exit at the block's own value) and its
        VJP for ``y_bar``."""
        ...

    def value(self, t: torch.Tensor) -> torch.Tensor:
        """What a value law compares of an answer (see the module doc)."""
        ...

    # -- the driver's questions: build a block, an example, judge it, say what it raised --

    def validate(self, recipe: Recipe, dtype: str, seed: int) -> Any:
        """Build ``recipe``'s block once, refusing a recipe the block contradicts with one
        line (a UsageError); the block built (None where it is no Python object to name)."""
        ...

    def case(self, recipe: Recipe, dtype: str, mode: str, draw: Draw,
             paths: tuple[str, ...] = ()) -> Case:
        """The law's question for one drawn example (call inside :meth:`judging`)."""
        ...

    def judging(self, dtype: str) -> AbstractContextManager[None]:
        """Where examples in ``dtype`` are built and judged (one torch thread; JAX's float64
        switched on for a float64 example)."""
        ...

    def raised(self, case: Case, exc: Exception) -> str | None:
        """The law's words for ``exc`` when the block itself raised it (the example then
        fails), None when it is not the block's (a failure, an unjudged example: re-raised)."""
        ...
