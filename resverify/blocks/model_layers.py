"""The block laws judged on each residual layer of a whole model, as it sits in the model.

Why: a *wiring* bug (the residual sum routed wrongly) is what the layer computes, so the
exact judgement of the traced model (:func:`~resverify.blocks.exact.judge_module`) judges
the bug's own program and passes it. Two shipped ones: google/flax#4567 (Gemma's norm meant
for the attention output applied to the residual sum, and the sum's norm fed onward as the
stream) and allenai/OLMo#680 (an in-place attention norm that wrote ``norm(x)`` into the
stream, so the residual add read ``norm(x)`` for ``x``). Both break the zero-branch identity
of the layer they sit in, which the block laws judge, so each layer is judged by them with
its own weights and its own arguments, and the first layer (model order) with a failing law
is named; where its zero-branch identity fails, :mod:`resverify.blocks.stream_exit` names
the op where the stream leaves the identity.

How: the model runs once on its example inputs with a forward pre-hook (with keyword
arguments) on each layer named; each layer's call is captured as a clone (an in-place bug
mutates what it was given). Each layer then becomes a :class:`~.recipe.Recipe`: its factory
a copy of that layer in the dtype, its call the captured call replayed with the drawn ``x``
in the hidden state's place, its sites the catalog recipe's of its class, its shape the
captured hidden state's with the batch drawn.

What it assumes: the hidden state is the layer's first positional argument, or its
``hidden_states`` keyword; the layer is called once per model call; the layer's output is
a tensor or a tuple whose first item is the stream. A captured tensor argument whose first
dimension is the captured batch ``B > 1`` is replayed row ``i mod B`` for the drawn row
``i``; with ``B = 1`` it is replayed as captured (torch broadcasts it, as the model did).
The laws perturb the layer's parameters and draw its input as they do any block's; a drawn
input that is a leaf requiring grad is handed to the layer as its clone (the identity,
forward and backward), as the model hands a layer a tensor it computed, so an in-place
write into the stream is judged as the model runs it, not refused by autograd as a write
into a leaf (``no_aliasing`` still sees it, on its call without grad). The
sites' branches are the catalog's, which compute the layer's other inputs themselves
(Llama's: the rotary tables of positions ``0..n-1`` and the causal mask): ``decomposition``
is judged against that, the zero-branch identity against the layer's own call alone.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from resverify.blocks.check import check_block
from resverify.blocks.recipe import Recipe
from resverify.blocks.records import LawRecord
from resverify.blocks.stream_exit import Location, stream_exit
from resverify.blocks.trace import TORCH_DTYPES
from resverify.spec.errors import UsageError

__all__ = ["check_model_layers", "layers_of"]

DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


@dataclass(frozen=True)
class Call:
    """A layer's call as the model made it, cloned: positional and keyword arguments, and
    where the hidden state sits (``position``: an index into ``args``, or the keyword)."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    position: int | str

    @property
    def x(self) -> torch.Tensor:
        held = self.args[self.position] if isinstance(self.position, int) else \
            self.kwargs[self.position]
        assert isinstance(held, torch.Tensor)
        return held

    def replay(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``module`` called as the model called it, ``x`` for the hidden state (a leaf that
        requires grad handed over as its clone, module doc); the stream it returns (a
        tuple's first item)."""
        batch = self.x.shape[0]
        if x.is_leaf and x.requires_grad:  # as the model hands it: a tensor it computed
            x = x.clone()
        args = [_rows(a, batch, x.shape[0]) for a in self.args]
        kwargs = {k: _rows(v, batch, x.shape[0]) for k, v in self.kwargs.items()}
        if isinstance(self.position, int):
            args[self.position] = x
        else:
            kwargs[self.position] = x
        out = module(*args, **kwargs)
        stream: torch.Tensor = out[0] if isinstance(out, tuple | list) else out
        return stream


def _rows(value: Any, captured: int, drawn: int) -> Any:
    """A captured argument for a drawn batch (module doc): row ``i mod captured`` of a
    tensor whose first dimension is the captured batch ``> 1``, else as captured; tuples
    and lists item by item."""
    if isinstance(value, tuple | list):
        return type(value)(_rows(v, captured, drawn) for v in value)
    if isinstance(value, torch.Tensor) and captured > 1 and value.dim() and \
            value.shape[0] == captured:
        return value[torch.arange(drawn) % captured]
    return value


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple | list):
        return type(value)(_cloned(v) for v in value)
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    return value


def capture(model: nn.Module, inputs: Mapping[str, Any], names: Sequence[str]
            ) -> dict[str, Call]:
    """Each named layer's call on one run of ``model(**inputs)`` (in no-grad), cloned, in
    the order the model called them. A name the model lacks, a layer not called, or called
    more than once: one line."""
    calls: dict[str, list[Call]] = {}

    def hook(name: str) -> Any:
        def record(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            position: int | str = 0 if args else "hidden_states"
            calls.setdefault(name, []).append(Call(_cloned(args), _cloned(kwargs), position))
        return record

    handles = []
    try:
        for name in names:
            try:
                layer = model.get_submodule(name)
            except AttributeError:
                raise UsageError(f"the model has no submodule {name!r}") from None
            handles.append(layer.register_forward_pre_hook(hook(name), with_kwargs=True))
        with torch.no_grad():
            model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    for name in names:
        made = calls.get(name, [])
        if len(made) != 1:
            raise UsageError(f"layer {name!r} was called {len(made)} times in one model call; "
                             "a layer is judged on its one call")
    return {name: made[0] for name, made in calls.items()}


def layers_of(model: nn.Module, recipes: Iterable[Recipe]) -> list[tuple[str, Recipe]]:
    """Every submodule of ``model`` whose class a recipe is named after (``hf.GPT2Block``
    for a ``GPT2Block``; a recipe whose name has a variant in parentheses is not matched),
    as ``(dotted name, recipe)`` in registration order. Matched by the class's name alone:
    two recipes after one class name are refused, one line."""
    by_class: dict[str, Recipe] = {}
    for r in (r for r in recipes if "(" not in r.name):
        cls = r.name.split(".", 1)[-1]
        if cls in by_class:
            raise UsageError(f"recipes {by_class[cls].name!r} and {r.name!r} both name a "
                             f"class {cls!r}; give the layers by name")
        by_class[cls] = r
    return [(name, by_class[type(sub).__name__]) for name, sub in model.named_modules()
            if name and type(sub).__name__ in by_class]


def layer_recipe(name: str, layer: nn.Module, call: Call, recipe: Recipe) -> Recipe:
    """``recipe``'s sites on the model's own ``layer``, called as ``call``: its factory a
    copy of the layer in the dtype, one dtype (the captured hidden state's), eval mode, the
    shape the captured one with the batch drawn (module doc)."""
    dtype = DTYPE_NAMES.get(call.x.dtype)
    if dtype is None:
        raise UsageError(f"layer {name!r}: hidden state in {call.x.dtype}, which the laws do "
                         f"not judge (one of {list(TORCH_DTYPES)})")

    def factory(kind: torch.dtype) -> nn.Module:
        return copy.deepcopy(layer).to(kind)

    def replay(module: nn.Module, x: torch.Tensor, _ctx: Mapping[str, Any]) -> torch.Tensor:
        return call.replay(module, x)

    return replace(recipe, name=f"{name} ({recipe.name})", factory=factory, call=replay,
                   shape=("batch", *call.x.shape[1:]), dtypes=(dtype,), modes=("eval",),
                   context={}, stream_dtype=None, zero_init=None, findings={})


@dataclass(frozen=True)
class LayerVerdict:
    """One layer's laws as it sits in the model: its records, and where its zero-branch
    identity failed, the op where the stream left it (None where it held, or the law was
    not asked; ``unlocated`` says why no op was named for a failure)."""

    index: int
    name: str
    records: tuple[LawRecord, ...]
    location: Location | None = None
    unlocated: str = ""

    @property
    def failed(self) -> list[str]:
        """The laws that failed, in the order they ran."""
        return list(dict.fromkeys(r.law for r in self.records if r.verdict == "fail"))

    def line(self) -> str:
        laws = ", ".join(self.failed) or "every law passes"
        where = f"; the stream leaves the identity at {self.location.line()}" \
            if self.location else f"; {self.unlocated}" if self.unlocated else ""
        return f"layer {self.index} {self.name}: {laws}{where}"


@dataclass(frozen=True)
class ModelLayers:
    """Every layer's verdict in model order; :attr:`first` is the first with a failing law."""

    layers: tuple[LayerVerdict, ...]

    @property
    def first(self) -> LayerVerdict | None:
        return next((v for v in self.layers if v.failed), None)

    def as_doc(self) -> dict[str, Any]:
        """Plain data for a report: the first failing layer's index (None: none), and per
        layer its index, name, failing laws, each record's line, and its location (op,
        node, module, module type) or why none was named."""
        first = self.first
        return {"first": None if first is None else first.index,
                "layers": [{"index": v.index, "name": v.name, "failed": v.failed,
                            "records": [r.line() for r in v.records],
                            "location": None if v.location is None else
                            asdict(v.location),
                            "unlocated": v.unlocated} for v in self.layers]}

    def lines(self) -> list[str]:
        first = self.first
        head = "every layer passes every law" if first is None else \
            f"first failing layer: {first.index} ({first.name}), {', '.join(first.failed)}"
        return [head, *(v.line() for v in self.layers)]


def check_model_layers(model: nn.Module, inputs: Mapping[str, Any],
                       layers: Sequence[tuple[str, Recipe]], *,
                       laws: Iterable[str] | None = None, max_examples: int = 3,
                       seed: int = 0) -> ModelLayers:
    """The block laws on each of ``model``'s residual ``layers`` (``(dotted name, catalog
    recipe of its class)``, :func:`layers_of` finds them by class) as it sits in the model:
    called as ``model(**inputs)`` calls it (module doc), ``max_examples`` drawn examples per
    law, in eval mode; judged and indexed in model order (the order the model called them);
    a layer whose zero-branch identity fails is located (:func:`~.stream_exit.stream_exit`,
    on the captured input).

        >>> found = check_model_layers(model, {"inputs_embeds": x, "use_cache": False},
        ...                            [(f"model.layers.{i}", LLAMA) for i in range(2)])
        ... # doctest: +SKIP
        >>> found.first.index, found.first.location.module  # doctest: +SKIP
        (1, 'model.layers.1.post_attention_layernorm')
    """
    calls = capture(model, inputs, [name for name, _ in layers])
    recipes = dict(layers)
    verdicts = []
    for index, (name, call) in enumerate(calls.items()):  # model order: the order called
        layer, recipe = model.get_submodule(name), recipes[name]
        built = layer_recipe(name, layer, call, recipe)
        records = tuple(check_block(built, laws=laws, max_examples=max_examples, seed=seed))
        verdicts.append(_located(LayerVerdict(index, name, records), layer, call, recipe))
    return ModelLayers(tuple(verdicts))


def _located(verdict: LayerVerdict, layer: nn.Module, call: Call, recipe: Recipe
             ) -> LayerVerdict:
    """``verdict`` with the op where the stream leaves the identity, where zero_branch
    failed."""
    if "zero_branch" not in verdict.failed:
        return verdict
    zero = [p for site in recipe.sites for p in site.zero]
    found = stream_exit(layer, zero, call.x, call.replay, recipe.sites)
    if isinstance(found, str):
        return replace(verdict, unlocated=found)
    return replace(verdict, location=replace(found, module=_joined(verdict.name,
                                                                    found.module)))


def _joined(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if name else prefix
