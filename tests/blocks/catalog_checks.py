"""Helpers the catalog tests of the optional libraries share (x-transformers, diffusers,
torchtune): a layer with named parameters zeroed, its input and its output; and every
applicable law of a recipe judged in one dtype, the failures listed with their lines; and the
two tests every such catalog module gets (``catalog_tests``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import pytest
import torch
from torch import nn

from resverify.blocks.check import Draw, run_law
from resverify.blocks.laws import LAWS, applicable
from resverify.blocks.recipe import Recipe, validate
from resverify.blocks.torch_adapter import build, make_case

DRAW = Draw(batch=2, seq=4, seed=7, weight_exp=0, input_exp=0)
"""One fixed example: the perturbed block, batch 2, length 4, unit scales."""


LIBRARY_WARNINGS = {
    "torchtune.": "ignore:Mismatch dtype between input and weight:UserWarning",
}
"""Warnings a library's block raises as it runs, which this project's pytest settings turn
into errors: torchtune's RMSNorm normalizes ``x.float()`` with a float64 weight in float64,
and torch warns that the mixed dtypes miss its fused kernel
(tests/blocks/test_catalog_torchtune.py)."""


def library_marks(name: str) -> list[pytest.MarkDecorator]:
    """The ``filterwarnings`` marks of a catalog block's library (:data:`LIBRARY_WARNINGS`)."""
    return [pytest.mark.filterwarnings(w) for prefix, w in LIBRARY_WARNINGS.items()
            if name.startswith(prefix)]


def zeroed(recipe: Recipe, names: Iterable[str] | None = None, dtype: str = "float64",
           draw: Draw = DRAW) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The perturbed block with ``names`` (default: every site's ``zero``) set to 0, its
    input and its output (eval, no grad)."""
    case = make_case(recipe, dtype, "eval", draw)
    with torch.no_grad():
        for name in names if names is not None else [p for s in recipe.sites for p in s.zero]:
            case.module.get_parameter(name).zero_()
        y = recipe.run(case.module, case.inputs.x, case.inputs.context)
    return case.module, case.inputs.x, y


def validates_in_every_dtype(recipe: Recipe) -> None:
    """The recipe names only what the block built in each claimed dtype has."""
    for dtype in recipe.dtypes:
        validate(recipe, build(recipe, dtype, seed=0))


def failing_laws(recipe: Recipe, dtype: str, max_examples: int = 3,
                 laws: Iterable[str] | None = None) -> list[str]:
    """The record lines of every law (each applicable one, or ``laws``) that does not pass
    in ``dtype``, in every mode the law and the recipe share."""
    lines = []
    for law in laws if laws is not None else applicable(recipe):
        for mode in (m for m in LAWS[law].modes if m in recipe.modes):
            record = run_law(recipe, law, dtype, mode, max_examples=max_examples)
            if record.verdict != "pass":
                lines.append(record.line())
    return lines


def max_diff(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |actual - expected|``, for messages."""
    return float((actual - expected).abs().max())


def catalog_tests(recipes: Sequence[Recipe], dtypes: Sequence[str] = ("float64", "float32")
                  ) -> tuple[Callable[[str], None], Callable[[str, str], None]]:
    """The two tests each catalog module's recipes get, to bind at a test module's top level:
    every recipe validates against its block in each claimed dtype, and every applicable law
    passes in each of ``dtypes`` (every dtype: tests/blocks/test_catalog_laws.py, slow)."""
    by_name = {r.name: r for r in recipes}

    @pytest.mark.parametrize("name", sorted(by_name))
    def test_recipe_names_only_what_its_block_has(name: str) -> None:
        validates_in_every_dtype(by_name[name])

    @pytest.mark.parametrize("dtype", list(dtypes))
    @pytest.mark.parametrize("name", sorted(by_name))
    def test_every_applicable_law_passes(name: str, dtype: str) -> None:
        bad = failing_laws(by_name[name], dtype)
        assert not bad, f"{bad}, expected every law to pass [{name}, {dtype}]"

    return test_recipe_names_only_what_its_block_has, test_every_applicable_law_passes
