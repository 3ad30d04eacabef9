"""What a blocks report says was checked: the block's library and version, the recipe's source,
and no catalog skips in a run of the user's own recipes.

Issue 35 found every user recipe listed as ``torch 2.13.0+cpu`` (diffusers, x-transformers,
litgpt or torchtune nowhere), a ``functools.partial`` factory shown as ``source:
functools``, and ``skipped timm: ImportError`` in reports of ``module:RECIPE`` runs that
asked for no catalog block. A top-level package name alone does not name a distribution:
dm-haiku ships a stray top-level ``examples`` package, and this checkout's own
``examples/custom_block.py`` is not dm-haiku's.
"""

from __future__ import annotations

import functools
from importlib import metadata
from pathlib import Path

import pytest

from tests.installed import skip_without_torch

skip_without_torch()  # what follows imports torch (E402 allowed here: pyproject.toml)

from torch import nn

from examples import custom_block
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.library import library_of, source_of
from resverify.blocks.recipe import Recipe, Site
from resverify.blocks.torch_adapter import build
from tests.cli.test_blocks_command import check, use_catalog

SITE = Site("ff", ("linear2",), ("linear2.weight",), norm="none")


def a_recipe(factory: object, library: str | None = None) -> Recipe:
    return Recipe("a", factory, (SITE,), library=library)  # type: ignore[arg-type]


def test_a_partial_factory_names_the_library_it_calls_and_its_module_as_source() -> None:
    modeling = pytest.importorskip("transformers.models.bert.modeling_bert")
    recipe = a_recipe(functools.partial(functools.partial(modeling.BertLayer, None)))
    got = (library_of(recipe), source_of(recipe))
    want = (("transformers", metadata.version("transformers")), modeling.__name__)
    assert got == want, f"library_of, source_of({recipe.factory!r}) = {got}, expected {want}"


def test_a_lambda_factory_names_the_library_of_the_block_it_builds() -> None:
    """A lambda written in the recipe's own module: the built block's class decides."""
    recipe = encoder(True)
    plain = a_recipe(lambda dtype: recipe.factory(dtype))
    got = library_of(plain, build(recipe, "float32", 0))
    assert got == ("torch", metadata.version("torch")), f"library_of(lambda ...) = {got}"


def test_a_users_own_block_is_its_own_package_not_a_stray_distribution() -> None:
    recipe = custom_block.RECIPE
    got = library_of(recipe, build(recipe, "float32", 0))
    assert "dm-haiku" in metadata.packages_distributions().get("examples", ["dm-haiku"])
    assert got == ("examples", None), f"library_of(examples.custom_block:RECIPE) = {got}, " \
        "expected ('examples', None): not torch, not dm-haiku's stray examples package"


@pytest.mark.parametrize(("library", "want"), [
    ("torch", ("torch", metadata.version("torch"))),
    ("no-such-library-here", ("no-such-library-here", None)),
])
def test_a_recipe_may_name_its_library(library: str, want: tuple[str, str | None]) -> None:
    got = library_of(a_recipe(lambda dtype: nn.Linear(16, 16, dtype=dtype), library))
    assert got == want, f"library_of(Recipe(library={library!r})) = {got}, expected {want}"


def test_a_module_recipe_run_names_its_source_and_lists_no_catalog_skips(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    timm = {"timm": "ModuleNotFoundError: No module named 'timm'"}
    use_catalog(monkeypatch, [encoder(True)], timm)
    args = ("--profile", "dev", "--dtype", "float32", "--law", "decomposition", "--no-plots")
    code, doc = check(tmp_path / "own", "examples.custom_block:RECIPE", *args)
    (block,) = doc["blocks"]
    got = (code, doc["skipped"], block["source"], block["library"], block["version"])
    assert got == (0, [], "examples.custom_block:RECIPE", "examples", None), got
    md = (tmp_path / "own" / "report.md").read_text(encoding="utf-8")
    assert "examples version unknown; recipe from examples.custom_block:RECIPE" in md, md
    code, doc = check(tmp_path / "all", "--all", *args)  # --all still says what it skipped
    assert (code, doc["skipped"]) == (0, [{"source": "timm", "reason": timm["timm"]}]), doc
