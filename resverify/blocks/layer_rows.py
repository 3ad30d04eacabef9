"""A whole model's exact judgement grouped per layer: which layer holds the elements out of budget.

Why a grouping of one judgement and not a judgement per layer: the model is traced and judged
once (:func:`resverify.blocks.exact.judge_module`), its output being the stream after every
layer and the model's own output laid end to end (:mod:`resverify.blocks.exact_model`);
here each element judged is given to the part of the model it belongs to. A :class:`Part`
holds a range of the output (the stream after its layer) and the gradients of the
parameters under its prefixes; its :class:`LayerRow` says how many elements were judged of
its total, the tightness of their budgets (``|error| / bound`` median, p99, max), how many
are outside, and the first op of the part out of its own budget (the local judgement's
units name their submodule, ``model.layers.1.mlp``, so each maps to its layer).

Which layer is to blame (:func:`culprit`): a forward error flows downstream, so the first
part in model order whose *stream* has an element out of budget; a backward error flows
upstream, so, where every stream is inside, the last part whose *gradients* have one; an op
out of its own budget names its layer first. The verdict is pointwise, like the judgement's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from resverify.blocks.tightness import Tightness

if TYPE_CHECKING:
    from resverify.blocks.exact import Judgement
    from resverify.blocks.local import Unit

__all__: list[str] = []


@dataclass(frozen=True)
class Part:
    """A part of a model: its ``name``, the output elements it holds (``start`` to ``stop``
    of the flattened output) and the prefixes of the inputs and parameters whose gradients
    it holds (``model.layers.0`` holds ``model.layers.0.mlp.up_proj.weight``)."""

    name: str
    prefixes: tuple[str, ...] = ()
    start: int = 0
    stop: int = 0

    def holds(self, name: str) -> bool:
        return any(name == p or name.startswith(f"{p}.") for p in self.prefixes)


@dataclass(frozen=True)
class LayerRow:
    """One part's share of the judgement."""

    name: str
    elements: int
    """Elements judged (with a finite bound): its stream's and its gradients'."""
    total: int
    tightness: Tightness
    stream_outside: int
    grads_outside: int
    ops_outside: tuple[Unit, ...] = ()
    """Its ops out of their own budget, in graph order."""

    @property
    def outside(self) -> int:
        return self.stream_outside + self.grads_outside

    @property
    def verdict(self) -> str:
        """As :attr:`~resverify.blocks.exact.Judgement.verdict`, for this part alone."""
        if self.outside or self.ops_outside:
            return "fail"
        return "partly judged" if self.elements < self.total else "pass"

    def note(self) -> str:
        """What is outside: the stream's and the gradients' elements, the first op."""
        counts = ((self.stream_outside, "stream"), (self.grads_outside, "gradient"))
        said = [f"{n} {what} elements outside the budget" for n, what in counts if n]
        if self.ops_outside:
            said.append(f"first op out of budget: {self.ops_outside[0]}")
        return "; ".join(said)

    def as_doc(self) -> dict[str, Any]:
        """As the report holds it (``layers`` of an exact judgement)."""
        first = self.ops_outside[0].as_doc() if self.ops_outside else None
        return {"name": self.name, "verdict": self.verdict, "elements": self.elements,
                "total": self.total, "tightness": self.tightness.as_doc(),
                "stream_outside": self.stream_outside, "grads_outside": self.grads_outside,
                "first_op": first}

    def __str__(self) -> str:
        note = self.note()
        return (f"{self.name}: {self.verdict}, {self.elements} of {self.total} elements, "
                f"{self.tightness}" + (f"; {note}" if note else ""))


def per_layer(judgement: Judgement, layers: Sequence[str], stream: int, *,
              before: Mapping[str, Sequence[str]] | None = None,
              after: Mapping[str, Sequence[str]] | None = None) -> tuple[LayerRow, ...]:
    """The rows of a model judged with the stream after each of ``layers`` (their prefixes,
    as the judgement names parameters) laid first in its output, ``stream`` elements each:
    first a row for each of ``before`` (name to prefixes: the embeddings, with the judged
    input's name), then each layer's, then each of ``after`` (the final norm, the head: the
    last of them also holds the output after the streams), and a row ``other`` for what no
    part holds, if anything. The rows' totals add up to the judgement's."""
    parts = [Part(n, tuple(p)) for n, p in (before or {}).items()]
    parts += [Part(layer, (layer,), k * stream, (k + 1) * stream)
              for k, layer in enumerate(layers)]
    tail = list((after or {}).items())
    size = judgement.ratios["output"].size
    parts += [Part(n, tuple(p), *((len(layers) * stream, size) if k == len(tail) - 1
                                  else (0, 0)))
              for k, (n, p) in enumerate(tail)]
    if not tail:
        parts.append(Part("output", (), len(layers) * stream, size))
    return rows(judgement, parts)


def rows(judgement: Judgement, parts: Sequence[Part]) -> tuple[LayerRow, ...]:
    """Each part's row, in the order given, and ``other`` for the elements none holds."""
    wheres = {w[5:-1]: w for w in judgement.ratios if w.startswith("grad[")}
    claimed = {n for n in wheres if any(p.holds(n) for p in parts)}
    covered = np.zeros(judgement.ratios["output"].size, dtype=bool)
    found = []
    for part in parts:
        covered[part.start:part.stop] = True
        found.append(_row(judgement, part, [wheres[n] for n in wheres if part.holds(n)]))
    rest = [wheres[n] for n in wheres if n not in claimed]
    if rest or not covered.all():
        found.append(_row(judgement, Part("other"), rest, ~covered))
    return tuple(found)


def _row(judgement: Judgement, part: Part, grads: Sequence[str],
         output: np.ndarray | None = None) -> LayerRow:
    """``part``'s row: its output elements (``output``: a mask instead of its range) and
    the gradients ``grads`` (by where)."""
    flat = judgement.ratios["output"].ravel()
    mine = flat[part.start:part.stop] if output is None else flat[output]
    values = np.concatenate([mine, *(judgement.ratios[w].ravel() for w in grads)])
    judged = values[~np.isnan(values)]
    in_output = (lambda i: part.start <= i < part.stop) if output is None else \
        (lambda i: bool(output[i]))
    stream = sum(m.where == "output" and in_output(_flat(m.index, judgement)) for m in
                 judgement.misses)
    outside = sum(m.where in grads for m in judgement.misses)
    local = judgement.local.outside if judgement.local is not None else ()
    ops = tuple(u for u in local if part.holds(u.module)) if part.prefixes else ()
    return LayerRow(part.name, int(judged.size), int(values.size), Tightness.of(judged),
                    int(stream), int(outside), ops)


def _flat(index: tuple[int, ...], judgement: Judgement) -> int:
    shape = judgement.ratios["output"].shape
    return int(np.ravel_multi_index(index, shape)) if index else 0


def culprit(found: Sequence[LayerRow]) -> LayerRow | None:
    """The part to blame for a failure: the first whose op is out of its own budget, else
    the first whose stream has an element outside, else the last whose gradients have one
    (None: every part passed)."""
    with_op = [r for r in found if r.ops_outside]
    if with_op:
        return with_op[0]
    streams = [r for r in found if r.stream_outside]
    if streams:
        return streams[0]
    grads = [r for r in found if r.grads_outside]
    return grads[-1] if grads else None
