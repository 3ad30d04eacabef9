"""The JAX side of the catalog: dm-haiku's ResNet blocks against the residual laws.

Every catalog Haiku block passes every judged law (float32 in the default run, every claimed
dtype and both modes under ``-m slow``); each planted bug of :mod:`tests.blocks.broken_haiku`
fails exactly the laws it breaks and passes the others; the laws with nothing to judge on a
JAX block do not apply to it (never planned; asked for by name, a one-line UsageError with
the reason); a missing dm-haiku is the catalog's skip.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from typing import Any

import pytest

pytest.importorskip("haiku", reason="dm-haiku is not installed (make blocks)")

from resverify.blocks import catalog
from resverify.blocks.catalog.haiku import BN, CHANNELS, RECIPES
from resverify.blocks.check import check_block, laws_of, plan, run_law
from resverify.blocks.haiku_adapter import BLOCK, INAPPLICABLE, JaxRecipe, no_torch
from resverify.blocks.laws import LAWS
from resverify.blocks.recipe import Site
from resverify.spec.errors import UsageError
from tests.blocks.broken_haiku import BUGS

NAMES = [r.name for r in RECIPES]
JUDGED = tuple(law for law in LAWS if law not in INAPPLICABLE
               and law not in ("affine_in_gamma", "drop_path"))
"""The laws a Haiku block is judged by: all but those its adapter finds nothing to judge
for, and those of a LayerScale γ or a drop path, which no JAX recipe declares."""


def _verdicts(recipe: JaxRecipe, dtype: str, mode: str, examples: int) -> dict[str, Any]:
    """Every judged law in ``mode`` (stream_dtype is judged in eval only), without shrinking."""
    return {law: run_law(recipe, law, dtype, mode, max_examples=examples, shrink=False)
            for law in JUDGED if mode in LAWS[law].modes}


@pytest.mark.parametrize("name", NAMES)
def test_catalog_haiku_block_obeys_every_law_float32(name: str) -> None:
    recipe = catalog.recipe(name)
    records = _verdicts(recipe, "float32", "eval", 2)  # type: ignore[arg-type]
    bad = [r.line() for r in records.values() if r.verdict != "pass"]
    assert not bad, f"{bad}, expected every law to pass [{name}, float32, eval]"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_catalog_haiku_block_obeys_every_law_every_dtype_and_mode(name: str) -> None:
    recipe = catalog.recipe(name)
    assert isinstance(recipe, JaxRecipe)
    records = check_block(recipe, laws=JUDGED, max_examples=3)
    bad = [r.line() for r in records if r.verdict != "pass"]
    assert not bad, f"{bad}, expected every law to pass [{name}, every dtype and mode]"
    assert len(records) == len(list(plan(recipe))), (len(records), list(plan(recipe)))


def _buggy(name: str, cls: type[Any], base: str) -> JaxRecipe:
    recipe = catalog.recipe(base)
    assert isinstance(recipe, JaxRecipe)
    projection = "projection" in base
    return dataclasses.replace(
        recipe, name=f"broken.{cls.__name__}",
        block=lambda: cls(CHANNELS, 1, projection, BN, False, name=BLOCK))


@pytest.mark.parametrize("bug", list(BUGS))
def test_planted_bug_fails_exactly_its_laws(bug: str) -> None:
    cls, base, dtype, laws = BUGS[bug]
    recipe = _buggy(bug, cls, base)
    records = _verdicts(recipe, dtype, "eval", 3)
    failed = {law for law, r in records.items() if r.verdict == "fail"}
    assert failed == laws, (f"failing laws {sorted(failed)}, expected {sorted(laws)} "
                            f"[{recipe.name} ({bug}), {dtype}, eval]: "
                            f"{[r.line() for r in records.values()]}")
    passed = {law for law, r in records.items() if r.verdict == "pass"}
    expect = set(JUDGED) - laws - ({"gradient_skip"} if "decomposition" in laws else set())
    assert passed == expect, (f"passing laws {sorted(passed)}, expected {sorted(expect)} "
                              f"[{recipe.name} ({bug}), {dtype}, eval]")
    for law in laws:
        failure = records[law].failure
        assert failure is not None and records[law].message.startswith(f"{law}: "), \
            (records[law].line(), f"expected a {law} failure with its vector")
        assert recipe.name in records[law].message, (records[law].message, recipe.name)


def test_detached_skip_is_named_in_the_gradient_message() -> None:
    cls, base, dtype, _ = BUGS["detached skip"]
    record = run_law(_buggy("detached skip", cls, base), "gradient_skip", dtype, "eval",
                         max_examples=3, shrink=False)
    assert "the skip's gradient is missing" in record.message, \
        (record.message, "expected the hint that x̄ is J_Fᵀz̄ alone")


def test_a_jax_failure_replays_on_its_example_and_only_a_merge_keeps_a_vector() -> None:
    """The shrunk example a JAX failure keeps judges the law again (the same message); the
    dropped skip's zero branch is no merge (no vector), its decomposition is."""
    from resverify.blocks.check import replay_example

    cls, base, dtype, laws = BUGS["dropped skip"]
    recipe = _buggy("dropped skip", cls, base)
    for law in sorted(laws):
        record = run_law(recipe, law, dtype, "eval", max_examples=3)
        assert record.verdict == "fail" and record.draw is not None, record.line()
        again = replay_example(recipe, law, dtype, "eval", record.draw)
        assert (again.verdict, again.message) == ("fail", record.message), \
            (again.line(), record.line())
        merged = getattr(record.failure, "merged", None)
        assert merged == (law == "decomposition"), (law, merged)


@pytest.mark.parametrize("name", NAMES)
def test_the_laws_that_apply_to_a_jax_block_are_the_judged_ones(name: str) -> None:
    """No law with nothing to judge on a Haiku block is planned: not ``no_aliasing`` or
    ``paths`` (the library's), not ``affine_in_gamma`` or ``drop_path`` (no γ or drop path
    declared), even with paths asked for."""
    recipe = catalog.recipe(name)
    for paths in ((), ("compile", "fastpath")):
        assert laws_of(recipe, paths) == list(JUDGED), (name, paths, laws_of(recipe, paths))


@pytest.mark.parametrize("law", sorted(INAPPLICABLE))
def test_a_law_that_does_not_apply_asked_for_by_name_is_one_line_usage_error(law: str) -> None:
    recipe = RECIPES[0]
    expected = f"law {law!r} does not apply to {recipe.name!r}, a haiku block: " \
        f"{INAPPLICABLE[law]}"
    with pytest.raises(UsageError) as caught:
        run_law(recipe, law, "float32", "eval", max_examples=1)
    assert str(caught.value) == expected, (str(caught.value), expected)


@pytest.mark.parametrize("field", [{"scale": "layer_scale.gamma"}, {"drop_path": ("drop",)}])
def test_a_jax_recipe_with_a_layerscale_or_drop_path_is_one_line_usage_error(
        field: dict[str, Any]) -> None:
    """The Haiku adapter can set neither, so a JAX recipe cannot declare them (their laws
    would judge nothing)."""
    site = dataclasses.replace(RECIPES[0].sites[0], **field)
    with pytest.raises(UsageError, match=r"^recipe 'x': a JAX recipe's site declares no "
                       r"LayerScale \(scale\) or drop path \(drop_path\)"):
        dataclasses.replace(RECIPES[0], name="x", sites=(site,))


def test_a_jax_recipe_without_its_parts_is_one_line_usage_error() -> None:
    site = Site("residual", ("conv_1",), zero=("conv_1.w",), norm="none")
    with pytest.raises(UsageError, match=r"^recipe 'x': a JAX recipe needs block and parts$"):
        JaxRecipe(name="x", factory=no_torch, sites=(site,), block=lambda: None)
    with pytest.raises(UsageError, match="has no torch module"):
        no_torch(None)  # type: ignore[arg-type,unused-ignore]


def test_a_missing_haiku_is_the_catalog_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "haiku" else real(name, *a))
    monkeypatch.delitem(sys.modules, "resverify.blocks.catalog.haiku")
    found, missing = catalog._load.__wrapped__()
    assert missing.get("haiku", "").startswith("ImportError: dm-haiku is not installed"), \
        (dict(missing), "expected the haiku source skipped with its reason")
    assert not [n for n in found if n.startswith("haiku.")], (sorted(found), "no haiku block")


def test_a_zero_name_the_block_lacks_is_one_line_usage_error() -> None:
    recipe = dataclasses.replace(RECIPES[2], sites=(dataclasses.replace(
        RECIPES[2].sites[0], zero=("conv_1.kernel",)),))
    with pytest.raises(UsageError, match=r"^recipe 'haiku.BlockV2': site 0 names parameter "
                       r"'conv_1.kernel', which the block lacks \(it has .*conv_1.w"):
        run_law(recipe, "zero_branch", "float32", "eval", max_examples=1)


def test_importing_the_haiku_catalog_leaves_pickling_working() -> None:
    """Pickle's module lookup scans ``sys.modules``; haiku's flax stand-in must not be there.

    Without the fix, every torch.compile run after a Haiku check failed in its graph cache
    with ``ImportError: haiku.experimental.flax.torch features require flax``.
    """
    import pickle

    import resverify.blocks.catalog.haiku  # noqa: F401  (the import under test)

    def nowhere() -> None: ...

    nowhere.__module__ = None  # type: ignore[assignment]
    found = pickle.whichmodule(nowhere, "nowhere")  # type: ignore[attr-defined]
    assert found == "__main__", (
        f"pickle.whichmodule(nowhere, 'nowhere') = {found!r}, expected '__main__' "
        f"(no module in sys.modules holds it)")


def test_check_block_judges_a_haiku_block_through_its_adapter() -> None:
    """A JAX recipe names its adapter, so :func:`resverify.blocks.check_block` (the torch
    blocks' entry) judges it too, the laws its adapter says apply (before: ``check_block`` on
    a JAX recipe built no block, ``no_torch`` raised)."""
    from resverify.blocks import check_block
    from resverify.blocks.adapters import adapter_of
    from resverify.blocks.haiku_adapter import HAIKU

    recipe = catalog.recipe("haiku.BlockV2")
    assert adapter_of(recipe) is HAIKU, (recipe.adapter, adapter_of(recipe))
    records = check_block(recipe, ["float32"], ["stream_dtype", "decomposition"],
                          max_examples=2)
    assert [(r.law, r.verdict) for r in records] == [("stream_dtype", "pass"),
                                                      ("decomposition", "pass"),
                                                      ("decomposition", "pass")], \
        [r.line() for r in records]
