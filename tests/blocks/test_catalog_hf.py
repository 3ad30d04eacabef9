"""The Hugging Face recipes: each names what its layer has, and each zeroed layer is the map
the recipe says (identity for the pre-norm layers, ``LN2(LN1(x))`` for BERT), bitwise in
float64, both through the suite's law and computed here by hand; plus the pinned behaviours
docs/findings/blocks-notes.md records (RMSNorm in float32, T5's float16 clamp and its
float32 ``wo``).

Why the by-hand check beside the law: the law's expected map is built from the same recipe,
so a recipe naming the wrong norm would agree with itself; the maps written out here come
from reading the layers' sources, not from the recipe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch import nn

from resverify.blocks.check import Draw, run_law
from resverify.blocks.recipe import Recipe, validate
from resverify.blocks.torch_adapter import build, make_case

# the skip reason is the ImportError the catalog module raises, naming the library
hf = pytest.importorskip("resverify.blocks.catalog.hf", exc_type=ImportError)

BY_NAME = {r.name: r for r in hf.RECIPES}
WIDEST = {r.name: r.dtypes[0] for r in hf.RECIPES}
DRAW = Draw(batch=2, seq=4, seed=7, weight_exp=0, input_exp=0)


def _layer_norms(*names: str) -> Callable[[nn.Module, torch.Tensor], torch.Tensor]:
    def apply(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        for name in names:
            x = module.get_submodule(name)(x)
        return x
    return apply


def _identity(_module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x


ZEROED_MAP: dict[str, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    "hf.LlamaDecoderLayer": _identity,
    "hf.MistralDecoderLayer": _identity,
    "hf.Qwen2DecoderLayer": _identity,
    "hf.GPT2Block": _identity,
    "hf.BertLayer": _layer_norms("attention.output.LayerNorm", "output.LayerNorm"),
    "hf.ViTLayer": _identity,
    "hf.T5Block": _identity,
}
"""What each layer computes with every branch end zeroed, read off its source."""


def _zeroed(recipe: Recipe, dtype: str, names: list[str] | None = None
            ) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The perturbed layer with ``names`` (default: every site's ``zero``) set to 0, its
    input and its output."""
    case = make_case(recipe, dtype, "eval", DRAW)
    with torch.no_grad():
        for name in names or [p for s in recipe.sites for p in s.zero]:
            case.module.get_parameter(name).zero_()
        y = recipe.run(case.module, case.inputs.x, case.inputs.context)
    return case.module, case.inputs.x, y


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_recipe_names_only_what_its_layer_has(name: str) -> None:
    recipe = BY_NAME[name]
    for dtype in recipe.dtypes:
        module = build(recipe, dtype, seed=0)
        validate(recipe, module)
        wanted = torch.float32 if name.endswith("(wo float32)") else getattr(torch, dtype)
        assert module.get_parameter(recipe.sites[-1].zero[0]).dtype == wanted, (name, dtype)


def test_every_recipe_has_a_written_zeroed_map() -> None:
    half_only = {n for n, r in BY_NAME.items() if "float64" not in r.dtypes}
    assert set(ZEROED_MAP) == set(BY_NAME) - half_only, sorted(set(BY_NAME) - set(ZEROED_MAP))


@pytest.mark.parametrize("name", sorted(ZEROED_MAP))
def test_zeroed_layer_is_its_documented_map_bitwise_in_float64(name: str) -> None:
    recipe = BY_NAME[name]
    module, x, y = _zeroed(recipe, "float64")
    expected = ZEROED_MAP[name](module, x)
    assert y.dtype == torch.float64
    assert torch.equal(y, expected), (f"{name}: max |y - expected| "
                                      f"{float((y - expected).abs().max())!r}, expected 0")


@pytest.mark.parametrize("name", sorted(ZEROED_MAP))
def test_zero_branch_law_passes_in_float64(name: str) -> None:
    record = run_law(BY_NAME[name], "zero_branch", "float64", "eval", max_examples=4)
    assert record.verdict == "pass", record.line()


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("law", ["decomposition", "no_aliasing"])
def test_forward_law_passes_in_the_widest_dtype(name: str, law: str) -> None:
    record = run_law(BY_NAME[name], law, WIDEST[name], "eval", max_examples=4)
    assert record.verdict == "pass", record.line()


def test_post_norm_zeroed_layer_is_not_the_first_norm_alone() -> None:
    """The control: BERT's zeroed map is LN2(LN1(x)); LN1(x) alone is a different map."""
    module, x, y = _zeroed(BY_NAME["hf.BertLayer"], "float64")
    first = module.get_submodule("attention.output.LayerNorm")(x)
    assert not torch.equal(y, first)


def test_zeroing_a_projection_weight_but_not_its_bias_leaves_a_branch() -> None:
    """The control: GPT-2's Conv1D projections have a bias, so both must be in ``zero``."""
    recipe = BY_NAME["hf.GPT2Block"]
    _, x, y = _zeroed(recipe, "float64", ["attn.c_proj.weight", "mlp.c_proj.weight"])
    assert not torch.equal(y, x)


def test_rms_norm_computes_in_float32_for_a_float64_input() -> None:
    """Documented choice (modeling_llama.py casts to float32 "for half-precision inputs"):
    a float64 input is normalized in float32 too, so its result is float32-accurate."""
    module = build(BY_NAME["hf.LlamaDecoderLayer"], "float64", seed=0)
    norm = module.get_submodule("input_layernorm")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, hf.HIDDEN, dtype=torch.float64, generator=gen)
    eps = vars(norm)["variance_epsilon"]
    with torch.no_grad():
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        in_float64 = norm.get_parameter("weight") * (x * scale)
        got = norm(x)
    error = float(((got - in_float64) / in_float64).abs().max())
    assert got.dtype == torch.float64
    # float32-accurate (a few units of 2**-24), far from float64's 2**-53
    assert 2.0**-40 < error < 2.0**-20, f"relative error {error!r}"


def test_t5_float16_clamp_changes_finite_values_once_any_is_inf() -> None:
    """Documented choice (T5Block's "clamp inf values to enable fp16 training"): a finite
    float16 stream passes unchanged, but once one element of the whole batch overflows to
    inf, every element beyond max - 1000 = 64504 (64512 once rounded to float16) is clamped
    to it, finite ones included."""
    recipe = BY_NAME["hf.T5Block"]
    module = make_case(recipe, "float16", "eval", DRAW).module
    x = make_case(recipe, "float16", "eval", DRAW).inputs.x.clone()
    x[0, 0, 5] = 65000.0
    with torch.no_grad():
        module.get_parameter("layer.0.SelfAttention.o.weight").zero_()
        wo = module.get_parameter("layer.1.DenseReluDense.wo.weight")
        wo.zero_()
        assert torch.equal(recipe.run(module, x, {}), x)
        wo[0].fill_(60000.0)  # the feed-forward's update of channel 0 overflows
        y = recipe.run(module, x, {})
    assert not bool(torch.isinf(y).any()), "the clamp leaves no inf"
    bound = float(torch.tensor(65504.0 - 1000.0).half())
    assert bound == 64512.0
    assert float(y[0, 0, 5]) == bound, f"65000 came back as {float(y[0, 0, 5])!r}"
    kept = torch.ones_like(x, dtype=torch.bool)
    kept[..., 0] = False
    kept[0, 0, 5] = False
    assert torch.equal(y[kept], x[kept])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_t5_float32_wo_promotes_a_half_precision_stream(dtype: str) -> None:
    """What ``from_pretrained`` builds in half precision (``_keep_in_fp32_modules = ["wo"]``):
    the feed-forward update is float32, so the block returns a float32 stream, and the
    float16 clamp (which tests the dtype) no longer applies after it."""
    recipe = BY_NAME["hf.T5Block(wo float32)"]
    _, x, y = _zeroed(recipe, dtype)
    assert x.dtype == getattr(torch, dtype)
    assert y.dtype == torch.float32
    assert torch.equal(y, x.float())
    assert run_law(recipe, "stream_dtype", dtype, "eval", max_examples=2).verdict == "fail"


def test_decoder_layers_are_causal_as_called() -> None:
    """The recipes hand a lone decoder layer the causal mask its model would: changing the
    last position leaves every earlier output as it was."""
    for name in ("hf.LlamaDecoderLayer", "hf.Qwen2DecoderLayer", "hf.GPT2Block"):
        recipe = BY_NAME[name]
        case = make_case(recipe, "float64", "eval", DRAW)
        x = case.inputs.x
        later = x.clone()
        later[:, -1] += 1.0
        with torch.no_grad():
            a, b = recipe.run(case.module, x, {}), recipe.run(case.module, later, {})
        assert torch.equal(a[:, :-1], b[:, :-1]), name
        assert not torch.equal(a[:, -1], b[:, -1]), name


def test_a_recipe_naming_the_wrong_norm_fails_decomposition() -> None:
    """The control for the recipes themselves: GPT-2's MLP site written through ``ln_1``
    (the attention's norm) instead of ``ln_2`` is caught, so a passing recipe names the
    norm the layer really uses."""
    recipe = BY_NAME["hf.GPT2Block"]
    attn, mlp = recipe.sites
    wrong = dataclasses.replace(recipe, name="hf.GPT2Block(mlp through ln_1)",
                                sites=(attn, dataclasses.replace(mlp, branch=("ln_1", "mlp"))))
    record = run_law(wrong, "decomposition", "float64", "eval", max_examples=3, shrink=False)
    assert record.verdict == "fail", record.line()
