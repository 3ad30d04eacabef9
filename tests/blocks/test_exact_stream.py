"""The stream law on every path (resverify.blocks.exact_stream): what the next norm consumes
is what the stream stores, at the declared dtype; how much of the stream is not eager's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from resverify.blocks import exact_paths
from resverify.blocks.exact_paths import PathJudgement, Paths, judge_paths, judge_recipe_paths
from resverify.blocks.exact_stream import Stream

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WIDTH = 8
SHAPE = (2, 3, WIDTH)


class Norm(nn.LayerNorm):
    """A LayerNorm that reads its input in the input's own dtype (its weights cast to it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight.to(x.dtype),
                            self.bias.to(x.dtype), self.eps)


class TwoSites(nn.Module):
    """``h = x + A·n1(x)``, ``y = h + B·n2(h)``; a fused path is planted by the flags: ``wide``
    keeps ``h`` in float64 into ``n2`` (the sum not stored in the stream's dtype), ``nudge``
    moves the first row of ``h`` one ulp up (a stream one ulp from eager's)."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = Norm(WIDTH), Norm(WIDTH)
        self.a, self.b = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
        self.wide = False
        self.nudge = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.a(self.n1(x))
        h = x.double() + u.double() if self.wide else x + u
        if self.nudge:
            h = torch.cat([torch.nextafter(h[:1], torch.full_like(h[:1], torch.inf)), h[1:]])
        return (h + self.b(self.n2(h).to(x.dtype)).to(h.dtype)).to(x.dtype)


STREAM = Stream(("n2",), torch.float32)


def _plant(monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    """The ``fastpath`` path replaced by the block run with ``flag`` set (a forward and
    backward as the other paths run them)."""
    def run(setup: Any) -> Any:
        model = copy.deepcopy(setup.model)
        setattr(model, flag, True)
        return exact_paths._backward(setup, model, model, f"planted {flag}")

    monkeypatch.setitem(exact_paths.RUNS, "fastpath", run)


def _judged(paths: list[str]) -> tuple[Paths, PathJudgement]:
    torch.manual_seed(0)
    found = judge_paths(TwoSites(), [torch.zeros(SHAPE)], paths, "float32", stream=STREAM)
    return found, found.paths[0]


def test_a_path_whose_norm_consumes_a_wider_stream_fails_naming_the_site(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, "wide")
    found, wide = _judged(["fastpath"])
    assert found.eager.passed, str(found)
    assert wide.verdict == "fail" and not found.passed, str(wide)
    assert "the input of the pre-norm n2" in wide.stream_failure, wide.stream_failure
    assert "torch.float64, expected the declared torch.float32" in wide.stream_failure, \
        wide.stream_failure
    assert wide.stream_failure in str(wide) and "FAIL (the stream law)" in str(wide), \
        str(wide)
    doc = wide.as_doc()
    assert doc["verdict"] == "fail" and doc["stream"]["failure"] == wide.stream_failure, doc


def test_the_stream_fraction_counts_the_elements_one_ulp_from_eagers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, "nudge")
    found, nudged = _judged(["fastpath"])
    # the same block, run both ways here, says which output elements moved
    torch.manual_seed(0)
    block = TwoSites()
    request, lowered = found.eager.request, found.eager.lowered
    assert request is not None and lowered is not None
    x = exact_paths._tensor(request.inputs[lowered.user_inputs[0]], torch.float32)
    eager_y = block(x)
    block.nudge = True
    moved = int((block(x) != eager_y).sum())
    row = WIDTH * SHAPE[1]  # the first batch row of h: one ulp up, every element of it
    assert nudged.stream_sites == ("n2", "output"), nudged.stream_sites
    assert nudged.stream_elements == 2 * x.numel(), nudged.stream_elements
    assert nudged.stream_differs == (row + moved) / (2 * x.numel()), (str(nudged), moved)
    assert nudged.differs == moved / x.numel(), (str(nudged), moved)
    assert nudged.stream_failure == "" and nudged.passed, str(nudged)


def test_a_path_equal_to_eager_has_no_stream_element_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, "plain")  # an attribute the block never reads: eager's own run
    _, same = _judged(["fastpath"])
    assert (same.stream_differs, same.differs, same.stream_failure) == (0.0, 0.0, ""), \
        str(same)


def test_a_recipe_names_the_stream_between_its_sites_from_its_later_pre_norms() -> None:
    from resverify.blocks.catalog.torch_nn import RECIPES

    pre = next(r for r in RECIPES if r.name == "torch.TransformerEncoderLayer(pre)")
    post = next(r for r in RECIPES if r.name == "torch.TransformerEncoderLayer(post)")
    assert Stream.of(pre, "bfloat16") == Stream(("block.norm2",), torch.bfloat16)
    assert Stream.of(post, "float32") == Stream((), torch.float32), "post-norm: no pre-norm"


@pytest.mark.slow
def test_llamas_sdpa_paths_observe_the_stream_between_its_sites() -> None:
    pytest.importorskip("transformers")
    from resverify.blocks.catalog.hf import RECIPES

    llama = next(r for r in RECIPES if r.name == "hf.LlamaDecoderLayer")
    found = judge_recipe_paths(llama, ["sdpa-math", "sdpa-flash"], "bfloat16")
    for path in found.paths:
        assert path.stream_sites == ("block.post_attention_layernorm", "output"), str(path)
        assert path.passed and "attn_implementation='sdpa'" in path.evidence, str(path)
        assert 0 < path.stream_differs < 1, str(path)


class PreNormPair(nn.Module):
    """``h = x + A·LN1(x)``, ``h + B·LN2(h)``: two pre-norm sites of plain torch modules."""

    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.a, self.b = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.a(self.n1(x))
        return h + self.b(self.n2(h))


@pytest.mark.slow
def test_compiled_bfloat16_feeds_the_next_norm_a_stream_it_does_not_store() -> None:
    """Inductor fuses the first site's sum into the second norm's kernel and, with
    emulate_precision_casts off, the norm reads the float32 sum: storing the stream (the
    hook's copy) changes the compiled output, so the compile path fails the stream law; the
    figure of the output it changes is in its evidence."""
    torch.manual_seed(0)
    found = judge_paths(PreNormPair(), [torch.zeros(SHAPE)], ["compile"], "bfloat16",
                        stream=Stream(("n2",), torch.bfloat16))
    (compiled,) = found.paths
    assert found.eager.passed and not compiled.misses, str(found)
    assert compiled.verdict == "fail" and "input of the pre-norm n2" in \
        compiled.stream_failure and "emulate_precision_casts" in compiled.stream_failure, \
        str(compiled)
    assert "storing the stream changes its output on" in compiled.evidence, compiled.evidence


def test_the_fast_path_is_judged_as_deployed_when_a_hook_would_change_its_kernels() -> None:
    """A hook on norm2 takes nn.TransformerEncoderLayer off its whole-layer kernel: the
    judged run has no hook (the whole-layer kernel ran), and the stream is the output."""
    from resverify.blocks.catalog.torch_nn import RECIPES

    pre = next(r for r in RECIPES if r.name == "torch.TransformerEncoderLayer(pre)")
    (fast,) = judge_recipe_paths(pre, ["fastpath"], "float32").paths
    assert fast.evidence.startswith("1 fused kernel call; a hook on the stream's norms "
                                    "changes the fused kernels (_native_multi_head_attention 1)"), \
        fast.evidence
    assert fast.stream_sites == ("output",) and fast.stream_differs == fast.differs, str(fast)
    assert fast.passed, str(fast)


@pytest.mark.parametrize(("dtype", "fails"), [(torch.bfloat16, True), (torch.float16, True),
                                              (torch.float32, False)])
def test_storing_the_stream_may_change_a_compiled_output_only_where_it_is_narrower_than_float32(
        dtype: torch.dtype, fails: bool) -> None:
    """Inductor computes in float32: a stream narrower than that, read before its rounding,
    is a stream the norm consumed but never stored; in float32 a change is only a figure."""
    from resverify.blocks.exact_paths import _stored
    from resverify.blocks.exact_stream import seen_with

    deployed = torch.ones(4, dtype=dtype)
    stored = deployed.clone()
    stored[0] = torch.nextafter(stored[:1], torch.full_like(stored[:1], 2.0))[0]
    stream = Stream(("block.ln_2",), dtype)
    moved, failure = _stored(stream, deployed, seen_with({}, stored))
    assert moved == 0.25, moved
    assert bool(failure) == fails and (not fails or "block.ln_2" in failure), failure
    assert _stored(stream, deployed, seen_with({}, deployed.clone())) == (0.0, "")
