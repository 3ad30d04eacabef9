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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    import torch

    from resverify.blocks.check import Draw, LawRecord
    from resverify.blocks.recipe import Recipe
    from resverify.blocks.trace import Case, Observed

__all__ = ["BlockAdapter", "BlockVjp", "ask"]


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
    unjudged: Mapping[str, str]
    """The laws that cannot apply to this library's blocks, each with why."""

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

    # -- the driver's questions: which laws, one check, one example, the probes --

    def laws(self, recipe: Recipe, paths: Iterable[str] = ()) -> list[str]:
        """The laws with something to judge on ``recipe``'s block, in table order."""
        ...

    def validate(self, recipe: Recipe, dtype: str, seed: int) -> Any:
        """Build ``recipe``'s block once, refusing a recipe the block contradicts with one
        line (a UsageError); the block built (None where it is no Python object to name)."""
        ...

    def run_law(self, recipe: Recipe, law: str, dtype: str, mode: str, *,
                max_examples: int | None = None, seed: int = 0, shrink: bool = True,
                paths: Iterable[str] = ()) -> LawRecord:
        """One law on ``recipe``'s block in ``dtype`` and ``mode`` over drawn examples."""
        ...

    def judge_example(self, recipe: Recipe, law: str, dtype: str, mode: str, draw: Draw,
                      paths: Iterable[str] = ()) -> dict[str, float]:
        """One law on one example: its figures, its failure, or Unjudged."""
        ...

    def probes(self, recipe: Recipe, dtypes: list[str], seed: int
               ) -> dict[str, list[dict[str, Any]]]:
        """The figures a report plots for ``recipe``'s block in ``dtypes``."""
        ...


def ask(case: Case) -> BlockAdapter:
    """The adapter that answers for ``case``'s block: the one its recipe names."""
    return case.recipe.adapter
