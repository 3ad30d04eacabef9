"""The recipe language of the residual forms: exact=False, parallel branches, skip and post
scales. Every correct block and broken twin of :mod:`tests.blocks.forms` runs in
``test_planted_bugs.py``; here are the parts, and the failures they fixed, pinned."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.blocks import Site, validate
from resverify.blocks.check import LawRecord, run_law
from resverify.blocks.laws_forward import sum_budget
from resverify.blocks.laws_gamma import GAMMAS
from resverify.blocks.recipe import Recipe, describe
from resverify.blocks.trace import TORCH_DTYPES, UNIT_ROUNDOFF
from resverify.spec.errors import UsageError
from tests.blocks.forms import FORMS, SkipScaledBlock


def _exact(recipe: Recipe, exact: bool) -> Recipe:
    return replace(recipe, sites=tuple(replace(s, exact=exact) for s in recipe.sites))


def _decomposition(recipe: Recipe, dtype: str) -> LawRecord:
    return run_law(recipe, "decomposition", dtype, "eval", max_examples=10, shrink=False)


@pytest.mark.parametrize("name", ["fused_scale", "parallel_stream_order",
                                  "post_scaled_term_by_term"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_exact_false_judges_the_sum_and_the_exit_within_budget(name: str, dtype: str) -> None:
    """A fused add, a parallel sum in the stream's order and a post-scale applied term by
    term: one ulp from the recipe's composition. ``exact=False`` passes them (before, the
    exit was judged bitwise after the sum passed within budget, and failed: ``exit[0, 0, 14]
    = -0.0049061091735506405, expected -0.004906109173550641 (..., budget 0)``);
    ``exact=True`` fails, and says the difference lies within ``exact=False``'s budget."""
    loose = _decomposition(FORMS[name], dtype)
    assert loose.verdict == "pass", f"{loose.line()}, expected a pass [exact=False]"
    strict = _decomposition(_exact(FORMS[name], True), dtype)
    assert strict.verdict == "fail", f"{strict.line()}, expected a failure [exact=True]"
    assert "budget 0)" in strict.message and "says exact=False" in strict.message, \
        strict.message


@settings(max_examples=50)
@given(st.sampled_from(["float32", "bfloat16", "float16"]), st.integers(2, 4),
       st.sampled_from([1.0, math.sqrt(2.0), 2.0, 3.0]), st.integers(0, 2**31 - 1))
def test_sum_budget_covers_any_order_and_either_side_of_the_division(
        dtype: str, k: int, c: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    terms = [(torch.randn(256, generator=gen, dtype=torch.float64) * 4 ** j).to(t)
             for j in range(k)]
    forward = terms[0]
    for term in terms[1:]:
        forward = forward + term
    forward = forward / c
    backward = terms[-1] / c
    for term in reversed(terms[:-1]):
        backward = backward + term / c
    budget = sum_budget(t, [(term, False) for term in terms], c)
    gap = (forward.double() - backward.double()).abs()
    worst = int(torch.argmax(gap - budget))
    assert bool((gap <= budget).all()), (
        f"[{worst}]: |left-to-right - right-to-left| = {float(gap[worst])!r} > budget "
        f"{float(budget[worst])!r} [sum of {k} terms / {c}, {dtype}]")


@pytest.mark.parametrize("c", [1.0, 2.0, math.sqrt(2.0)])
def test_sum_budget_counts_no_rounding_for_a_power_of_two(c: float) -> None:
    """``1 + 1`` divided by c: two evaluations of one rounding each (the sum) at magnitude
    ``2 / c``; a power of two adds no rounding, √2 two (c's own and the quotient's)."""
    one = torch.ones(1, dtype=torch.float32)
    got = float(sum_budget(torch.float32, [(one, False), (one, False)], c)[0])
    roundings = 1 if c != math.sqrt(2.0) else 3
    want = 2 * UNIT_ROUNDOFF["float32"] * roundings * 2 / c
    assert want < got < want * 1.01, f"sum_budget(1 + 1, c={c}) = {got!r}, expected {want!r}"


def test_a_parallel_block_declared_as_one_branch_fails() -> None:
    """The MLP left out of the recipe: the parallel site's sum is not x + attn alone."""
    good = FORMS["parallel"]
    alone = replace(good, name="ParallelBlock(mlp undeclared)",
                    sites=(replace(good.sites[0], parallel=()),))
    record = _decomposition(alone, "float32")
    assert record.verdict == "fail" and "sum z" in record.message, record.line()


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"post_scale": 0.0}, "post_scale 0.0 is not a finite nonzero number"),
    ({"skip_scale": math.inf}, "skip_scale inf is not a finite nonzero number"),
    ({"parallel": ("mlp",)}, "parallel must be a tuple of branches"),
])
def test_site_refuses_a_malformed_form(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as exc:
        Site("s", ("mlp",), ("mlp.fc2.weight",), norms=("norm",), **kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_validate_names_a_missing_skip_scale_and_parallel_submodule() -> None:
    good = FORMS["skip_scaled"]
    module = SkipScaledBlock(torch.float32)
    for change, name in (({"skip_scale": "gate"}, "parameter 'gate'"),
                         ({"parallel": (("mlp2",),)}, "submodule 'mlp2'")):
        bad = replace(good, sites=(replace(good.sites[0], **change),))
        with pytest.raises(UsageError, match=f"site 0 names {name}, which the module lacks"):
            validate(bad, module)


def test_describe_lists_the_forms() -> None:
    lines = [*describe(FORMS["parallel"])[1:], *describe(FORMS["post_scaled"])[1:],
             *describe(FORMS["skip_scaled"])[1:]]
    assert "2 parallel branches" in lines[0] and "judged within the merge budget" in lines[0], \
        lines
    assert "sum divided by 1.4142135623730951" in lines[1], lines
    assert "skip scale 'residual_scale'" in lines[2], lines


def test_a_tanh_gate_is_judged_as_declared() -> None:
    """torchtune's gated layer: declared ``scale_fn="tanh"`` it passes the gate law; the same
    layer declared as a plain LayerScale (linear in g) fails it, so the declaration is what
    the law reads, and the twin whose gate forgets the tanh fails only it
    (``test_planted_bugs.py``)."""
    good = FORMS["gated"]
    record = run_law(good, "affine_in_gamma", "float32", "eval", max_examples=5, shrink=False)
    assert record.verdict == "pass", record.line()
    linear = replace(good, name="GatedLayer(declared linear)",
                     sites=tuple(replace(s, scale_fn=None) for s in good.sites))
    record = run_law(linear, "affine_in_gamma", "float32", "eval", max_examples=5,
                     shrink=False)
    assert record.verdict == "fail" and "linear in sa_scale.scale" in record.message, \
        record.line()


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"scale_fn": "tanh"}, "scale_fn without scale"),
    ({"scale": "g", "scale_fn": "sigmoid"}, "scale_fn 'sigmoid' is not one of ['tanh']"),
])
def test_site_refuses_a_malformed_gate(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as exc:
        Site("s", ("mlp",), ("mlp.fc2.weight",), norms=("norm",), **kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_describe_lists_a_gate() -> None:
    line = describe(FORMS["gated"])[1]
    assert "gate tanh(sa_scale.scale) = tanh(0.0)" in line, line


def test_a_float32_stream_read_through_a_cast_is_observed_at_the_cast() -> None:
    """A Llama-style layer whose float32 stream its norms read as ``hidden.to(bf16)``:
    declared ``reads="cast"`` it passes ``stream_dtype``; declared as the norms reading the
    stream (before, the only way), the correct layer failed ``decomposition`` and
    ``stream_dtype`` alike the downcast one; now the failure says to declare the cast."""
    good = FORMS["fp32_stream"]
    record = run_law(good, "stream_dtype", "bfloat16", "eval", max_examples=5, shrink=False)
    assert record.verdict == "pass", record.line()
    plain = replace(good, name="Fp32StreamLayer(reads stream)",
                    sites=tuple(replace(s, reads="stream") for s in good.sites))
    record = _decomposition(plain, "bfloat16")
    assert record.verdict == "fail" and "reads the block's input x cast to torch.bfloat16" in \
        record.message and "says reads='cast'" in record.message, record.line()


def test_a_cast_site_whose_norm_reads_no_cast_fails_and_says_so() -> None:
    from tests.blocks.broken_blocks import CORRECT

    mixed = CORRECT["mixed"]
    wrong = replace(mixed, name="MixedStreamEncoderLayer(reads cast)",
                    sites=tuple(replace(s, reads="cast") for s in mixed.sites))
    record = _decomposition(wrong, "bfloat16")
    assert record.verdict == "fail" and "read a tensor no dtype cast made" in record.message, \
        record.line()


def test_site_refuses_reads_cast_without_a_pre_norm() -> None:
    with pytest.raises(UsageError, match="reads='cast' is where a pre-norm reads the stream"):
        Site("s", ("mlp",), ("mlp.fc2.weight",), norm="none", reads="cast")


@pytest.mark.parametrize("kwargs", [{"parallel": (("b",),)}, {"skip_scale": 0.5},
                                    {"post_scale": 2.0}, {"scale": "g.w", "scale_fn": "tanh"},
                                    {"norm": "pre", "norms": ("n",), "reads": "cast"}])
def test_a_jax_recipe_refuses_the_torch_only_forms(kwargs: dict[str, Any]) -> None:
    from resverify.blocks.haiku_adapter import JaxRecipe, no_torch

    fields: dict[str, Any] = {"norm": "none", **kwargs}
    site = Site("block", ("conv_1",), ("conv_1.w",), **fields)
    with pytest.raises(UsageError) as exc:
        JaxRecipe("haiku.Form", no_torch, (site,), block=lambda: None,
                  parts=lambda block, x, training: (x, x))
    assert "a JAX recipe's site takes no parallel branches" in str(exc.value) and \
        "\n" not in str(exc.value), str(exc.value)


def test_a_multiplying_post_scale_is_declared_as_a_factor() -> None:
    """EDM's ``(x + F) * skip_scale`` with ``skip_scale = sqrt(0.5)``: declared as a divisor
    ``post_scale=√2`` (before, the only way) its backward rounds ``ȳ·m`` where the recipe
    rounds ``ȳ/√2`` and ``gradient_skip`` fails even with ``exact=False``; declared
    ``post_factor=sqrt(0.5)`` the site is the block's own computation, judged bitwise."""
    good = FORMS["post_multiplied"]
    site = good.sites[0]
    assert site.exact and site.post_factor == math.sqrt(0.5), site
    as_divisor = replace(good, name="PostMultipliedBlock(declared /√2)", sites=(
        replace(site, post_factor=1.0, post_scale=math.sqrt(2.0), exact=False),))
    record = run_law(as_divisor, "gradient_skip", "float32", "eval", max_examples=10,
                     shrink=False)
    assert record.verdict == "fail" and "x̄" in record.message, record.line()
    for law in ("decomposition", "gradient_skip"):
        record = run_law(good, law, "float32", "eval", max_examples=10, shrink=False)
        assert record.verdict == "pass" and record.examples == 10, record.line()


def test_site_refuses_a_post_scale_and_a_post_factor_together() -> None:
    with pytest.raises(UsageError, match="declare the one the block computes"):
        Site("s", ("mlp",), ("mlp.fc2.weight",), norms=("norm",), post_scale=2.0,
             post_factor=0.5)
    line = describe(FORMS["post_multiplied"])[1]
    assert "sum multiplied by 0.7071067811865476" in line, line


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_zero_branch_judges_an_inexact_skip_scale_before_a_post_norm(dtype: str) -> None:
    """DeepNorm's ``LN(α·x + G(x))`` declared ``exact=False``: before, ``zero_branch`` said
    ``unjudged`` (the post-norm of a sum an inexact scale rounded); now each zeroed sum is
    judged within α's rounding and the norm at the block's own sum, bitwise. The control: a
    recipe whose ``zero`` leaves the branch's bias alive fails at the sum."""
    good = FORMS["deepnorm_inexact"]
    record = run_law(good, "zero_branch", dtype, "eval", max_examples=10, shrink=False)
    assert record.verdict == "pass" and record.examples == 10, record.line()
    live = replace(good, name="DeepNormBlock(bias alive)",
                   sites=(replace(good.sites[0], zero=("mlp.fc2.weight",)),))
    record = run_law(live, "zero_branch", dtype, "eval", max_examples=10, shrink=False)
    assert record.verdict == "fail" and "sum z" in record.message and \
        "with every branch 0" in record.message, record.line()


@pytest.mark.parametrize("name", ["parallel_scaled", "post_multiplied"])
def test_affine_in_gamma_judges_a_parallel_or_scaled_site(name: str) -> None:
    """A LayerScale beside a parallel branch, or inside a sum multiplied by ``sqrt(0.5)``:
    before, ``unjudged`` (``this law does not judge yet``); now ``z(γ) - z(0)`` is judged
    linear in γ, ``z(0)`` the site's sum without that branch. Its twins, γ applied twice,
    fail it alone (``test_planted_bugs.py``)."""
    record = run_law(FORMS[name], "affine_in_gamma", "float32", "eval", max_examples=10,
                     shrink=False)
    assert record.verdict == "pass" and record.examples == 10, record.line()


@pytest.mark.parametrize(("bug", "expression"), [
    ("post_factor_on_branch", "scale(residual_add(x, f), 6369051672525773/9007199254740992)"),
    ("skip_scale_after_sum", "residual_add(mul(x, beta), f)"),
    ("parallel_norm_shared", "residual_add(x, add(f, f1))"),
])
def test_a_merge_vector_is_the_merge_the_site_declares(bug: str, expression: str) -> None:
    """The vector of a failing merge holds the skip scale, the post-scale or factor and each
    parallel branch (before: ``residual_add(x, f)`` for every site), over the values the
    block's own parts gave; its exact value is that computation of those values."""
    from resverify.spec.exact import evaluate
    from tests.blocks.forms import FORM_BUGS

    recipe = FORM_BUGS[bug].recipe
    record = run_law(recipe, "decomposition", "float32", "eval", max_examples=5, shrink=False)
    failure = record.failure
    assert failure is not None and getattr(failure, "merged", False), record.line()
    program = failure.request.program
    assert program.describe() == expression, program.describe()
    values = {k: torch.from_numpy(v.astype("float64")) for k, v in
              failure.request.inputs.items()}
    site = recipe.sites[0]
    terms = [values["f"], *(values[f"f{j}"] for j in range(1, 1 + len(site.parallel)))]
    beta = values.get("beta", torch.tensor(1.0, dtype=torch.float64))
    wide = (values["x"] * beta + sum(terms[1:], terms[0])) * site.post_factor / site.post_scale
    output = evaluate(failure.request).output
    assert output is not None, program.describe()
    exact = torch.tensor(output.astype(float))
    gap = (exact - wide).abs().max()
    assert float(gap) <= 2.0**-48 * float(wide.abs().max()), (
        f"exact {program.describe()} vs its float64 composition: |diff| {float(gap)!r}")


class _ProjectedScaledBlock(torch.nn.Module):
    """``proj(x) + γ · fc(x)`` with a width change (8 to 12), as timm's ConvNeXt block with
    ``conv_mlp`` and a new width writes it: the shortcut is not the entry."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 12, dtype=dtype)
        self.proj = torch.nn.Linear(8, 12, bias=False, dtype=dtype)
        self.gamma = torch.nn.Parameter(torch.full((12,), 1e-2, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + self.gamma * self.fc(x)


def _scaled_fc(m: torch.nn.Module, s: torch.Tensor, ctx: object) -> torch.Tensor:
    assert isinstance(m, _ProjectedScaledBlock)
    return m.gamma * m.fc(s)


def test_affine_in_gamma_judges_a_projecting_site() -> None:
    """The swamped-fraction figures compare the sum with the shortcut of the entry, here its
    projection (they compared with the entry itself, and the law raised ``The size of tensor
    a (16) must match the size of tensor b (8)`` on timm's ConvNeXtBlock(8->16)); in float64
    no γ of :data:`GAMMAS` swamps an update, and a γ that scales the shortcut too fails."""
    site = Site("block", _scaled_fc, ("gamma",), norm="none",
                scale="gamma", scale_init=1e-2, shortcut="proj")
    recipe = Recipe("ProjectedScaled(8->12)", _ProjectedScaledBlock, (site,),
                    shape=("batch", "seq", 8))
    record = run_law(recipe, "affine_in_gamma", "float64", "eval", max_examples=4,
                     shrink=False)
    assert record.verdict == "pass", record.line()
    swamped = {k: v for k, v in record.figures.items() if k.startswith("swamped_at_gamma")}
    assert swamped == {f"swamped_at_gamma[{g!r}][block]": 0.0 for g in GAMMAS}, swamped

    class _ScalesTheShortcutToo(_ProjectedScaledBlock):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gamma * (self.proj(x) + self.fc(x))

    broken = replace(recipe, name="ScalesTheShortcutToo", factory=_ScalesTheShortcutToo)
    record = run_law(broken, "affine_in_gamma", "float64", "eval", max_examples=4,
                     shrink=False)
    assert record.verdict == "fail", record.line()
