"""A whole model judged exactly, end to end and layer by layer, in one judgement.

Why one judgement and not one per layer: judged alone, a layer is handed inputs drawn at
random; in its model it runs on the stream the layers before it made, in the model's own
dtype, and its gradients carry the cotangent every later layer sent back. Here the model
(a catalog entry, :mod:`resverify.blocks.catalog.models`) is wrapped by :class:`Streams`,
whose output is the stream after every residual layer and then the model's own output,
flattened and laid end to end: forward hooks on the layers (each layer's output, its first
item where it returns a tuple) collect the streams, so the model runs its own ``forward``
unchanged. :func:`~resverify.blocks.exact.judge_module` traces it once and judges every
element of that output and every parameter's gradient (the cotangent drawn for the streams
too: each stream's gradient then reaches the layers before it, so every gradient is judged
under a cotangent that is not the output's alone). :func:`~resverify.blocks.layer_rows.per_layer`
then gives each element to its layer (:class:`ModelJudgement`). The claim is pointwise:
these inputs, these parameters, this cotangent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from resverify.blocks.catalog.models import ModelEntry, Sizes
from resverify.blocks.exact import Judgement, judge_module
from resverify.blocks.layer_rows import LayerRow, culprit, per_layer
from resverify.blocks.lower import Lowered
from resverify.blocks.model_layers import ModelLayers, check_model_layers
from resverify.blocks.trace import TORCH_DTYPES

__all__ = ["judge_model", "model_laws"]

ROOT = "model"
"""The wrapper's attribute holding the model: the judgement names its parameters
``model.<name>``."""


class Streams(nn.Module):
    """``entry``'s model called on ``x``, returning the stream after each of ``layers``
    (submodule paths) and then its output, each flattened, as one tensor."""

    def __init__(self, model: nn.Module, entry: ModelEntry, layers: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.entry = entry
        self.layers = tuple(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen: list[torch.Tensor] = []

        def keep(_module: nn.Module, _args: Any, out: Any) -> None:
            seen.append(out[0] if isinstance(out, tuple) else out)

        hooks = [self.model.get_submodule(p).register_forward_hook(keep) for p in self.layers]
        try:
            out = self.entry.call(self.model, x)
        finally:
            for hook in hooks:
                hook.remove()
        return torch.cat([t.flatten() for t in (*seen, out)])


@dataclass(frozen=True)
class ModelJudgement:
    """A model's judgement in one dtype, end to end, and its rows per part."""

    name: str
    sizes: Sizes
    judgement: Judgement
    rows: tuple[LayerRow, ...]

    @property
    def culprit(self) -> LayerRow | None:
        """The part a failure is charged to (:func:`~resverify.blocks.layer_rows.culprit`)."""
        return culprit(self.rows) if not self.judgement.passed else None

    def as_doc(self) -> dict[str, Any]:
        """The judgement as the report's ``exact`` section holds it, with its ``layers``
        rows and the ``culprit`` (the name of the part a failure is charged to)."""
        blamed = self.culprit
        return {**self.judgement.as_doc(), "layers": [r.as_doc() for r in self.rows],
                "culprit": None if blamed is None else blamed.name}

    def lines(self) -> list[str]:
        """The end-to-end line, the culprit's, then one per part."""
        blamed = self.culprit
        head = [f"{self.name}  {self.judgement} "
                f"[{sum(self.judgement.seconds.values()):.2f} s]"]
        if blamed is not None:
            head.append(f"  first layer out of budget: {blamed}")
        return head + [f"    {r}" for r in self.rows]


def model_module(entry: ModelEntry, sizes: Sizes, dtype: str, seed: int = 0
                 ) -> tuple[Streams, list[torch.Tensor]]:
    """``entry``'s model built at ``sizes`` in ``dtype`` under ``seed``, in eval mode,
    wrapped in :class:`Streams`, and an example input of its shape."""
    torch.manual_seed(seed)
    model = entry.build(sizes.checked()).to(TORCH_DTYPES[dtype]).eval()
    return (Streams(model, entry, entry.layer_paths(sizes)),
            [torch.zeros(entry.example(sizes))])


def judge_model(entry: ModelEntry, dtype: str, sizes: Sizes | None = None, seed: int = 0,
                lowered: Lowered | None = None) -> ModelJudgement:
    """``entry``'s model judged exactly in ``dtype`` (its streams between layers, its output
    and every gradient, in one :func:`~resverify.blocks.exact.judge_module`), then grouped
    per part: the embeddings (with the judged input's gradient), each layer, the final norm
    and the head. ``lowered``: an earlier judgement's trace of the same model, reused."""
    sizes = entry.sizes if sizes is None else sizes
    started = time.perf_counter()
    module, example = model_module(entry, sizes, dtype, seed)
    built = time.perf_counter() - started
    judgement = judge_module(module, example, dtype, seed, lowered)
    judgement = _with_build(judgement, built)
    assert judgement.lowered is not None
    before = {"embeddings": [*judgement.lowered.user_inputs, *_rooted(entry.embeddings)]}
    after = {k: _rooted(v) for k, v in (("final norm", entry.norm), ("head", entry.head)) if v}
    found = per_layer(judgement, _rooted(entry.layer_paths(sizes)), entry.stream(sizes),
                      before=before, after=after)
    return ModelJudgement(entry.name, sizes, judgement, tuple(_named(r) for r in found))


def _rooted(names: Sequence[str]) -> list[str]:
    return [f"{ROOT}.{n}" for n in names]


def _with_build(judgement: Judgement, seconds: float) -> Judgement:
    return replace(judgement, seconds={"build": seconds, **judgement.seconds})


def _named(row: LayerRow) -> LayerRow:
    """``row`` named as the model names the part (without the wrapper's :data:`ROOT`)."""
    return replace(row, name=row.name.removeprefix(f"{ROOT}."))


LAW_EXAMPLES = 3
"""Examples drawn per law and layer by :func:`model_laws`."""
LAYER_LAWS = ("zero_branch", "stream_dtype", "no_aliasing")
"""The laws :func:`model_laws` runs: those judged on the layer's own call alone.
``decomposition`` (and ``gradient_skip``, which presumes it) run the catalog's branch,
which builds its own rotary tables and mask: the model's, rounded to bfloat16 from float32,
differ from them by an ulp, and a correct bfloat16 Llama layer failed it (measured)."""


def model_laws(entry: ModelEntry, dtype: str, sizes: Sizes | None = None, seed: int = 0,
               max_examples: int = LAW_EXAMPLES) -> ModelLayers | str:
    """The block laws on each residual layer of ``entry``'s model as it sits there
    (:func:`~resverify.blocks.model_layers.check_model_layers`: its own weights, the call the
    model made on an input drawn from ``seed``), with the catalog recipe of the layers'
    class (``hf.<class>``): what the exact judgement cannot see, a wiring bug, is judged
    here and located at its layer and op. A string says why no law was run (no recipe)."""
    from resverify.blocks.catalog import catalog

    sizes = entry.sizes if sizes is None else sizes
    torch.manual_seed(seed)
    model = entry.build(sizes.checked()).to(TORCH_DTYPES[dtype]).eval()
    paths = entry.layer_paths(sizes)
    kind = type(model.get_submodule(paths[0])).__name__
    recipe = catalog().get(f"hf.{kind}")
    if recipe is None:
        return f"no catalog recipe for {kind}: the layer laws were not run"
    drawn = torch.randn(entry.example(sizes), generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64).to(TORCH_DTYPES[dtype])
    return check_model_layers(model, {entry.input: drawn, **dict(entry.fixed)},
                              [(p, recipe) for p in paths], laws=LAYER_LAWS,
                              max_examples=max_examples, seed=seed)
