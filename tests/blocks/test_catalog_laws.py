"""Every catalog block passes every law that applies to it, in every dtype it claims.

The torch.nn blocks run in the default test run; the other libraries' blocks (Hugging Face
here; timm and torchvision where they import) are marked slow, since their own catalog
tests (tests/blocks/test_catalog_*.py) already run in the default run.

Why ten examples in the default run: an example builds the block afresh and runs it a few
times per law; ten examples per law, dtype and mode keep one block's whole check near ten
seconds on two cores, and the laws are bitwise, so a broken block fails on its first
example (tests/blocks/test_planted_bugs.py). The ``slow`` test repeats the check with the
active profile's count (25 under ``ci``), as ``resverify blocks`` will.
"""

from __future__ import annotations

import pytest

from resverify.blocks import check_block
from resverify.blocks.catalog import catalog, skipped
from resverify.blocks.check import run_law
from resverify.blocks.haiku_adapter import JaxRecipe
from resverify.blocks.laws import LAWS, applicable
from tests.blocks.catalog_checks import library_marks

EXAMPLES = 10

FINDINGS = {(name, law): f"{finding.reason} ({finding.doc})"
            for name, recipe in catalog().items() for law, finding in recipe.findings.items()}
"""(block, law) -> why the law fails there: the recipe's own ``findings`` (the declaration
``resverify blocks`` reads too), a written-up finding held as a strict xfail so that a fix in
the library shows as an unexpected pass."""


def _case(name: str, law: str, dtype: str) -> object:
    marks = library_marks(name)
    if not name.startswith("torch."):
        marks.append(pytest.mark.slow)  # the other libraries' blocks: minutes in all
    if (name, law) in FINDINGS:
        marks.append(pytest.mark.xfail(reason=FINDINGS[name, law], strict=True))
    return pytest.param(name, law, dtype, marks=marks)


TORCH_SIDE = {name: r for name, r in catalog().items() if not isinstance(r, JaxRecipe)}
"""The torch blocks: the JAX ones have their own driver and test (test_catalog_haiku.py)."""
CASES = [_case(name, law, dtype) for name, recipe in TORCH_SIDE.items()
         for law in applicable(recipe) for dtype in recipe.dtypes]


@pytest.mark.parametrize(("name", "law", "dtype"), CASES)
def test_catalog_block_obeys_law(name: str, law: str, dtype: str) -> None:
    recipe = catalog()[name]
    for mode in (m for m in LAWS[law].modes if m in recipe.modes):
        record = run_law(recipe, law, dtype, mode, max_examples=EXAMPLES)
        assert record.verdict == "pass", f"{record.line()}, expected pass"
        assert record.examples == EXAMPLES, record.line()


def test_catalog_lists_torch_nn_layers() -> None:
    names = set(catalog())
    expected = {f"torch.Transformer{kind}Layer({norm})" for kind in ("Encoder", "Decoder")
                for norm in ("pre", "post")}
    assert expected <= names, f"catalog {sorted(names)}, expected {sorted(expected)} in it"
    assert "torch_nn" not in skipped(), skipped()


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=library_marks(n))
                                  for n in sorted(TORCH_SIDE)])
def test_catalog_block_passes_default_check(name: str) -> None:
    recipe = catalog()[name]
    bad = [r.line() for r in check_block(recipe, laws=applicable(recipe))
           if r.verdict != "pass" and (name, r.law) not in FINDINGS]
    assert not bad, f"{name}: {bad}, expected every law to pass"
