"""The per-layer laws inside a whole model: a wiring bug planted in the second layer of a tiny
Llama or GPT-2 breaks that layer's zero-branch identity, is named at layer index 1 and at
the op where the stream leaves the identity; layer 0 passes; each correct twin passes every
law at every layer with no location (:mod:`tests.blocks.planted_wiring`).

Why the op is named from the planted form, not from the tool: the flax#4567 form's stream is
the norm of the first sum (so it leaves the identity at the first op of the norm that reads
that sum), the OLMo#680 forms' the attention pre-norm's output (the first op of that norm);
the ATen op that starts each norm is Llama's RMSNorm ``pow`` and GPT-2's ``native_layer_norm``,
read off the libraries' sources.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from resverify.blocks.catalog import catalog, recipe
from resverify.blocks.exact import judge_module
from resverify.blocks.lower import NotInIR
from resverify.blocks.model_layers import (
    Call,
    ModelLayers,
    capture,
    check_model_layers,
    layers_of,
)
from resverify.blocks.recipe import Site
from resverify.blocks.stream_exit import Location, stream_exit
from resverify.spec.errors import UsageError
from tests.blocks import planted_wiring as pw

pytest.importorskip("transformers")

FIRST_OP = {"llama": "aten.pow.Tensor_Scalar", "gpt2": "aten.native_layer_norm.default"}
"""The first ATen op of each family's norm in the trace (module doc)."""
LEAVES_AT = {"flax4567": 1, "olmo680": 0, "olmo680_inplace": 0}
"""Which of the layer's two norms (:attr:`~tests.blocks.planted_wiring.Family.norms`) each
form's stream leaves the identity in."""
CASES = [(f, form) for f in pw.FAMILIES for form in pw.FORMS]


def _judged(family: str, form: str | None, planted: bool = True) -> ModelLayers:
    chosen = pw.FAMILIES[family]
    layers = [(name, recipe(chosen.recipe)) for name in chosen.layers]
    return check_model_layers(pw.model(family, form, planted), pw.inputs(), layers)


@pytest.mark.parametrize(("family", "form"), CASES)
def test_zero_branch_identity_breaks_at_the_planted_layer_and_op(family: str, form: str
                                                                 ) -> None:
    found = _judged(family, form)
    chosen = pw.FAMILIES[family]
    first = found.first
    assert first is not None, f"no layer fails a law, expected layer 1 [{family} {form}]"
    assert (first.index, first.name) == (1, chosen.layers[1]), \
        f"first failing layer {first.index} {first.name}, expected 1 [{family} {form}]"
    assert "zero_branch" in first.failed, \
        f"layer 1 fails {first.failed}, expected zero_branch among them [{family} {form}]"
    layer0 = found.layers[0]
    assert not layer0.failed and layer0.location is None, \
        f"layer 0 fails {layer0.failed}, expected every law to pass [{family} {form}]"
    expected = f"{chosen.layers[1]}.{chosen.norms[LEAVES_AT[form]]}"
    where = first.location
    assert where is not None, f"layer 1 not located: {first.unlocated} [{family} {form}]"
    assert (where.module, where.op) == (expected, FIRST_OP[family]), \
        f"located at {where.line()}, expected {FIRST_OP[family]} in {expected} [{family} {form}]"


@pytest.mark.parametrize(("family", "form"), CASES)
def test_correct_twin_passes_every_law_at_every_layer(family: str, form: str) -> None:
    found = _judged(family, form, planted=False)
    bad = [(v.index, v.failed, v.location) for v in found.layers
           if v.failed or v.location is not None or
           any(r.verdict != "pass" for r in v.records)]
    assert found.first is None and not bad, \
        f"twin layers {bad} fail or are located, expected none [{family} {form} twin]"


@pytest.mark.parametrize("family", list(pw.FAMILIES))
def test_untouched_model_passes_every_law_at_every_layer(family: str) -> None:
    found = _judged(family, None)
    lines = found.lines()
    assert found.first is None, f"{lines}, expected every layer to pass [{family}]"
    assert lines[0] == "every layer passes every law", lines


def test_the_in_place_form_is_also_caught_as_a_write_into_the_input() -> None:
    found = _judged("llama", "olmo680_inplace")
    assert found.first is not None, "no layer fails a law, expected layer 1"
    failed = found.first.failed
    assert "no_aliasing" in failed, f"layer 1 fails {failed}, expected no_aliasing among them"


def test_the_captured_call_is_the_input_before_an_in_place_write() -> None:
    chosen = pw.FAMILIES["llama"]
    built = pw.model("llama", "olmo680_inplace")
    calls = capture(built, pw.inputs(), chosen.layers)
    with torch.no_grad():
        expected = calls[chosen.layers[0]].replay(built.get_submodule(chosen.layers[0]),
                                                  calls[chosen.layers[0]].x)
    assert torch.equal(calls[chosen.layers[1]].x, expected), \
        "layer 1's captured input is not layer 0's output: the in-place write reached it"


def test_zeroed_correct_layer_is_not_located() -> None:
    chosen = pw.FAMILIES["gpt2"]
    built = pw.model("gpt2", None)
    call = capture(built, pw.inputs(), chosen.layers)[chosen.layers[1]]
    sites = recipe(chosen.recipe).sites
    found = stream_exit(built.get_submodule(chosen.layers[1]),
                        [p for s in sites for p in s.zero], call.x, call.replay, sites)
    assert found == "not located: the zeroed layer's forward is the identity on this input", \
        f"stream_exit gave {found!r} on the correct layer, expected no location"


def test_the_walk_refuses_a_post_norm_layer() -> None:
    sites = recipe("hf.BertLayer").sites
    found = stream_exit(nn.Identity(), [], torch.ones(1, 2), lambda m, x: m(x), sites)
    assert isinstance(found, str) and "post-norm" in found, \
        f"stream_exit gave {found!r} for BERT's post-norm sites, expected a refusal"


def test_a_layer_the_model_lacks_or_calls_twice_is_refused() -> None:
    built = pw.model("gpt2", None)
    with pytest.raises(UsageError, match=r"no submodule 'transformer\.h\.7'"):
        capture(built, pw.inputs(), ["transformer.h.7"])
    layer = built.get_submodule("transformer.h.0")
    twice = nn.Sequential(layer, layer)
    with pytest.raises(UsageError, match="called 2 times"):
        capture(twice, {"input": torch.zeros(1, 2, pw.HIDDEN)}, ["0"])


def test_a_captured_batch_is_replayed_row_by_row() -> None:
    class Adds(nn.Module):
        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            return x + bias

    bias = torch.tensor([[1.0], [2.0]])
    call = Call((torch.zeros(2, 1), bias), {}, 0)
    out = call.replay(Adds(), torch.zeros(3, 1))
    assert out.flatten().tolist() == [1.0, 2.0, 1.0], \
        f"replay at batch 3 gave {out.flatten().tolist()}, expected rows 0, 1, 0 of the bias"


@pytest.mark.parametrize(("family", "form"), [(f, form) for f in pw.FAMILIES
                                              for form in ("flax4567", "olmo680")])
def test_exact_judgement_of_the_whole_model_passes_the_wiring_bug(family: str, form: str
                                                                  ) -> None:
    """The contrast: the traced program is the bug's own, so every element is within budget."""
    whole = pw.Logits(pw.model(family, form))
    judged = judge_module(whole, (pw.inputs()["inputs_embeds"],), "float32")
    assert judged.verdict == "pass", \
        f"exact judgement {judged.verdict}, expected pass (the trace is the bug's) [{family} " \
        f"{form}]: {judged}"


def test_exact_judgement_refuses_the_in_place_write() -> None:
    whole = pw.Logits(pw.model("gpt2", "olmo680_inplace"))
    with pytest.raises(NotInIR, match=r"aten\.copy\.default"):
        judge_module(whole, (pw.inputs()["inputs_embeds"],), "float32")


class _Toy(nn.Module):
    """``lin(norm(x)) + x * skip``, the branch written before the skip (``skip`` 0: no skip
    at all)."""

    def __init__(self, skip: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.lin = nn.Linear(4, 4)
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(self.norm(x))
        return out + x * self.skip if self.skip else out


TOY_SITES = (Site("mlp", ("norm", "lin"), zero=("lin.weight", "lin.bias"), norms=("norm",)),)


def _toy_exit(skip: float) -> Location | str:
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    return stream_exit(_Toy(skip), ["lin.weight", "lin.bias"], x, lambda m, s: m(s),
                       TOY_SITES)


def test_the_walk_follows_the_stream_not_the_branch_written_first() -> None:
    found = _toy_exit(2.0)
    assert not isinstance(found, str), f"not located: {found}"
    assert (found.op, found.module) == ("aten.mul.Tensor", ""), \
        f"located at {found.line()}, expected the skip's aten.mul.Tensor in the layer's forward"


def test_the_walk_says_a_dropped_stream_is_dropped() -> None:
    found = _toy_exit(0.0)
    assert isinstance(found, str) and "the stream is dropped" in found, \
        f"stream_exit gave {found!r} for a layer without its skip, expected the stream dropped"


def test_the_walk_finds_nothing_on_a_correct_toy_layer() -> None:
    found = _toy_exit(1.0)
    assert isinstance(found, str) and "is the identity" in found, \
        f"stream_exit gave {found!r} for a correct layer, expected no location"


@pytest.mark.parametrize("family", list(pw.FAMILIES))
def test_layers_are_found_by_the_catalog_recipe_of_their_class(family: str) -> None:
    chosen = pw.FAMILIES[family]
    found = layers_of(pw.model(family, None), catalog().values())
    assert [(n, r.name) for n, r in found] == [(n, chosen.recipe) for n in chosen.layers], \
        f"layers_of found {[(n, r.name) for n, r in found]}, expected {chosen.layers}"


def test_layers_are_judged_in_model_order_whatever_order_they_are_given() -> None:
    chosen = pw.FAMILIES["gpt2"]
    given = [(n, recipe(chosen.recipe)) for n in reversed(chosen.layers)]
    found = check_model_layers(pw.model("gpt2", "flax4567"), pw.inputs(), given,
                               laws=["zero_branch"])
    order = [(v.index, v.name) for v in found.layers]
    assert order == list(enumerate(chosen.layers)), \
        f"layers judged as {order}, expected model order {list(enumerate(chosen.layers))}"
    doc = found.as_doc()
    assert doc["first"] == 1 and doc["layers"][1]["failed"] == ["zero_branch"], doc
    assert doc["layers"][1]["location"]["module"] == f"{chosen.layers[1]}.ln_2", doc
