"""Recipes are validated up front: each mistake is one line that names what is wrong."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

from resverify.blocks import Recipe, Site, validate
from resverify.blocks.catalog import catalog, recipe
from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.recipe import describe
from resverify.blocks.torch_adapter import build
from resverify.spec.errors import UsageError


def _module(r: Recipe) -> nn.Module:
    return r.factory(torch.float32)


def _one_line(exc: pytest.ExceptionInfo[UsageError]) -> str:
    text = str(exc.value)
    assert "\n" not in text, f"usage error of {text.count(chr(10)) + 1} lines, expected one"
    return text


def test_validate_names_the_missing_parameter() -> None:
    good = encoder(True)
    ff = replace(good.sites[1], zero=("linear3.weight",))
    bad = replace(good, sites=(good.sites[0], ff))
    with pytest.raises(UsageError) as exc:
        validate(bad, _module(bad))
    assert _one_line(exc) == ("recipe 'torch.TransformerEncoderLayer(pre)': site 1 names "
                              "parameter 'linear3.weight', which the module lacks")


@pytest.mark.parametrize(("field", "value", "kind", "name"), [
    ("norms", ("norm9",), "submodule", "norm9"),
    ("drop_path", ("drop_path1",), "submodule", "drop_path1"),
    ("shortcut", "downsample", "submodule", "downsample"),
    ("scale", "ls1.gamma", "parameter", "ls1.gamma"),
])
def test_validate_names_the_missing_part(field: str, value: Any, kind: str,
                                          name: str) -> None:
    good = encoder(True)
    change: dict[str, Any] = {field: value}
    bad = replace(good, sites=(replace(good.sites[0], **change), good.sites[1]))
    with pytest.raises(UsageError) as exc:
        validate(bad, _module(bad))
    assert f"site 0 names {kind} {name!r}, which the module lacks" in _one_line(exc)


def test_validate_names_a_drop_path_without_its_probability() -> None:
    good = encoder(True)
    bad = replace(good, sites=(replace(good.sites[0], drop_path=("norm1",)), good.sites[1]))
    with pytest.raises(UsageError) as exc:
        validate(bad, _module(bad))
    assert "submodule 'norm1' has no attribute 'drop_prob'" in _one_line(exc)


def test_validate_refuses_an_unobservable_site() -> None:
    good = encoder(True)
    first = replace(good.sites[0], norm="none", norms=())
    second = replace(good.sites[1], norm="none", norms=())
    with pytest.raises(UsageError) as exc:
        validate(replace(good, sites=(first, second)), _module(good))
    assert "site 1 (feed-forward) has no pre-norm" in _one_line(exc)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"norm": "middle"}, "norm placement 'middle'"),
    ({"activation": "gelu"}, "activation 'gelu'"),
    ({"zero": ()}, "zero names no parameter"),
    ({"norm": "pre", "norms": ()}, "names no norm submodule"),
    ({"scale_init": 0.1}, "scale_init without scale"),
])
def test_site_refuses_a_malformed_declaration(kwargs: dict[str, Any], words: str) -> None:
    fields: dict[str, Any] = {"label": "s", "branch": ("linear2",),
                                 "zero": ("linear2.weight",), "norms": ("norm1",)}
    fields.update(kwargs)
    with pytest.raises(UsageError) as exc:
        Site(**fields)
    assert words in _one_line(exc)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"dtypes": ("float8",)}, "dtype 'float8'"),
    ({"modes": ("inference",)}, "mode 'inference'"),
    ({"shape": ("seq", 16)}, "must start with 'batch'"),
    ({"sites": ()}, "no residual site"),
])
def test_recipe_refuses_a_malformed_declaration(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as exc:
        replace(encoder(True), **kwargs)
    assert words in _one_line(exc)


def test_recipe_refuses_a_module_returning_a_tuple() -> None:
    good = encoder(True)

    class Pair(nn.TransformerEncoderLayer):
        def forward(self, src: torch.Tensor, *a: object, **k: object) -> Any:
            return (super().forward(src), None)

    r = replace(good, factory=lambda dtype: Pair(16, 2, 32, 0.0, batch_first=True,
                                                 norm_first=True, dtype=dtype))
    with pytest.raises(UsageError) as exc:
        r.run(build(r, "float32", 0), torch.zeros(1, 1, 16), {})
    assert "returned tuple, not a tensor; give the recipe a call=" in _one_line(exc)


def test_catalog_names_the_known_recipes_for_an_unknown_one() -> None:
    with pytest.raises(UsageError) as exc:
        recipe("torch.TransformerLayer")
    assert "torch.TransformerEncoderLayer(pre)" in _one_line(exc)


@pytest.mark.parametrize("name", sorted(catalog()))
def test_catalog_recipe_validates_against_its_module(name: str) -> None:
    """A torch recipe against the module its factory builds; a JAX recipe (no torch module)
    against the Haiku block's parameter tree."""
    from resverify.blocks.haiku_adapter import JaxRecipe, validate_jax

    r = catalog()[name]
    for dtype in r.dtypes:
        if isinstance(r, JaxRecipe):
            validate_jax(r, dtype)
        else:
            validate(r, r.factory(torch.float64 if dtype == "float64" else torch.float32))


def test_describe_lists_each_site_of_a_recipe() -> None:
    lines = describe(catalog()["torch.TransformerDecoderLayer(post)"])
    assert lines[0] == ("torch.TransformerDecoderLayer(post): input ['batch', 'seq', 16], "
                        "memory ['batch', 'seq', 16], dtypes float64 float32 bfloat16 float16, "
                        "modes eval train"), lines[0]
    assert lines[2] == ("  site 1 cross-attention: post-norm norm2; zero "
                        "multihead_attn.out_proj.weight, multihead_attn.out_proj.bias"), lines[2]
    assert len(lines) == 4, lines


def test_a_recipe_naming_the_wrong_norm_fails_and_says_so() -> None:
    """A pre-norm site's norm is read off the block: site 0 naming ``norm2`` (which reads the
    stream after the attention, not the input) fails the decomposition, naming the norm,
    instead of passing every law and printing the wrong norm in the report."""
    from resverify.blocks.check import check_block

    good = encoder(True)
    swapped = replace(good, name="encoder(norms swapped)", sites=(
        replace(good.sites[0], norms=("norm2",)), replace(good.sites[1], norms=("norm1",))))
    first_only = replace(good, name="encoder(site 0 names norm2)", sites=(
        replace(good.sites[0], norms=("norm2",)), good.sites[1]))
    for wrong in (swapped, first_only):
        records = check_block(wrong, ["float32"], ["decomposition"], max_examples=3,
                              shrink=False)
        call = f"check_block({wrong.name}, ['float32'], ['decomposition'])"
        assert {r.verdict for r in records} == {"fail"}, (call, [r.line() for r in records])
        assert all("site 0's pre-norm 'norm2' read" in r.message
                   and "the recipe names a norm this site does not read" in r.message
                   for r in records), (call, [r.message for r in records])
