"""What the laws see: the hooked stream, the failure's IR request, element differences."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from resverify.blocks.catalog.torch_nn import encoder
from resverify.blocks.check import Draw
from resverify.blocks.laws_forward import decomposition
from resverify.blocks.torch_adapter import make_case
from resverify.blocks.trace import first_difference, observe, with_parameter
from resverify.properties.assertions import PropertyFailure
from resverify.spec.exact import evaluate
from tests.blocks.broken_blocks import CORRECT

DRAW = Draw(batch=2, seq=3, seed=3, weight_exp=0, input_exp=0)


def test_observe_reads_the_stream_the_next_norm_reads() -> None:
    case = make_case(encoder(True), "float64", "eval", DRAW)
    m, x = case.module, case.inputs.x
    seen = observe(case.recipe, m, x.clone(), {})
    with torch.enable_grad():
        a = m.get_submodule("norm1")(x)
        h = x + m.get_submodule("self_attn")(a, a, a, need_weights=False)[0]
    assert first_difference(seen.entries[1], h.detach()) is None
    assert seen.exits[0] is seen.entries[1] and seen.exits[1] is seen.sums[1]


def test_observe_reads_post_norm_sums_at_the_norm() -> None:
    case = make_case(encoder(False), "float32", "eval", DRAW)
    seen = observe(case.recipe, case.module, case.inputs.x.clone(), {})
    norm1 = case.module.get_submodule("norm1")
    assert seen.sums[0] is not None
    assert first_difference(seen.exits[0], norm1(seen.sums[0]).detach()) is None
    assert seen.entries[1] is seen.exits[0]


def test_failure_request_replays_the_site_merge_exactly() -> None:
    """The vector of a failing site is ``residual_add(s, F(s))``; rounded once, the exact
    interpreter's sum is the block's sum (float64, where the block is bitwise)."""
    case = make_case(encoder(True), "float64", "eval", DRAW)
    seen = observe(case.recipe, case.module, case.inputs.x.clone(), {})
    s = seen.entries[0]
    with torch.enable_grad():
        f = case.recipe.sites[0].evaluate(case.module, s, {}).detach()
    request = case.request(0, (s, f))
    assert request.program.describe() == "residual_add(x, f)"
    exact = evaluate(request).output
    assert exact is not None
    rounded = torch.tensor([float(v) for v in exact.flat], dtype=torch.float64).reshape(s.shape)
    assert first_difference(seen.entries[1], rounded) is None


def test_first_difference_compares_values() -> None:
    zero, nan = torch.tensor([0.0, math.nan]), torch.tensor([-0.0, math.nan])
    assert first_difference(zero, nan) is None
    said = first_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    assert said == "[1] = 2.0, expected 2.5 (|diff| 0.5, budget 0)", said
    said = first_difference(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert said is not None and "torch.float32, expected [2] torch.float64" in said, said


def test_with_parameter_restores_the_parameter() -> None:
    case = make_case(CORRECT["scaled"], "float32", "eval", DRAW)
    gamma = case.module.get_parameter("ls1.gamma")
    before = gamma.detach().clone()
    with with_parameter(case.module, "ls1.gamma", 0.0):
        assert float(gamma.detach().abs().max()) == 0.0
    assert first_difference(gamma.detach(), before) is None


def test_a_wrong_alpha_fails_with_the_scaled_merge_as_its_request() -> None:
    good = encoder(True)
    halved = replace(good, sites=tuple(replace(s, alpha=0.5) for s in good.sites))
    with pytest.raises(PropertyFailure, match=r"decomposition: sum z\[.*site 0") as caught:
        decomposition(make_case(halved, "float32", "eval", DRAW))
    assert caught.value.request.program.describe() == "residual_add(x, scale(f, 1/2))"


def test_the_stream_observation_rule_is_in_the_users_guide() -> None:
    """Where the stream between sites is read is written in docs/blocks.md (a user writing a
    recipe reads that page, not recipe.py's docstring), one rule per tap kind the hooks use,
    and the docstring points there."""
    from pathlib import Path

    import resverify.blocks.recipe as recipe_module
    from resverify.blocks.trace import _taps

    doc = (Path(__file__).resolve().parents[2] / "docs" / "blocks.md").read_text("utf-8")
    heading = "### Where the stream between sites is observed"
    assert heading in doc, f"docs/blocks.md has no section {heading!r}"
    rule = doc.split(heading, 1)[1].split("\n#", 1)[0]
    kinds = {kind for _, _, kind, _ in _taps(encoder(True)) + _taps(encoder(False))}
    said = {"read": "must read exactly", "entry": "later **pre-norm** site enters",
            "sum": "post-norm site's sum", "exit": "last norm returns"}
    assert kinds <= set(said), f"tap kinds {sorted(kinds)}, the test knows {sorted(said)}"
    missing = [kind for kind in kinds if said[kind] not in rule]
    assert not missing, f"docs/blocks.md's rule says nothing of the {missing} taps: {rule!r}"
    assert "Where the stream" in (recipe_module.__doc__ or ""), "recipe.py does not point there"
