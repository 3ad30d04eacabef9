"""The stream law on every path: what the next norm consumes is what the stream stores.

Why: a fused or compiled path may keep the residual stream wider (or narrower) than the
dtype the block declares for it between its sites, so the next pre-norm reads a value the
unfused block never stored. The judgement against the exact answer (:mod:`.exact_paths`)
says whether the path is within its budget; this says where its *stream* parts from the
unfused one. On each path the block's output and, where observable, the stream between two
residual sites (the input of a later site's pre-norm, captured by a forward pre-hook on the
norm module the recipe's :class:`~resverify.blocks.recipe.Site` names) are captured; each
must carry the declared stream dtype (a path whose norm consumes another dtype fails, the
message naming the site), and the fraction of stream elements not bitwise the eager (unfused)
path's, at least one ulp apart in the dtype, is the path's figure.

Where a path does not run the norm module (a fused inference kernel), or a hook would
change the kernels it runs (a hook on a submodule takes ``nn.TransformerEncoderLayer`` off
its whole-layer kernel), only the output is observed; the sites observed are named. Under
``torch.compile`` the hook is traced into the graph, and its copy makes inductor store the
stream: what the hook sees is stored, but the deployed graph (no hook) may fuse the sum
into the norm's kernel and, with ``emulate_precision_casts`` off (inductor's default), feed
the norm the sum before its rounding to the stream dtype. The compile path therefore
judges the deployed run and watches a second compile
(:func:`resverify.blocks.exact_paths._stored`): storing the stream must not change the
output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from resverify.blocks.recipe import Recipe
from resverify.blocks.trace import TORCH_DTYPES

__all__: list[str] = []

OUTPUT = "output"
"""The name of the stream the block returns, beside the norms' names."""


@dataclass(frozen=True)
class Stream:
    """Where the stream is observed: the norm modules reading it between sites (by their
    name in the module judged) and its declared dtype."""

    norms: tuple[str, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, recipe: Recipe, dtype: str, prefix: str = "block.") -> Stream:
        """A recipe's stream: each later pre-norm site's first norm that reads the stream
        itself (not a cast of it), under ``prefix`` (the recipe's block inside
        :class:`~resverify.blocks.exact.Called`), in the recipe's stream dtype (else the
        dtype judged)."""
        norms = tuple(f"{prefix}{s.norms[0]}" for s in recipe.sites[1:]
                      if s.norm == "pre" and s.reads == "stream")
        return cls(norms, TORCH_DTYPES[recipe.stream_dtype or dtype])


@dataclass(frozen=True)
class Seen:
    """What one path's stream was: the value at each place observed (the norms that ran,
    then the output)."""

    values: Mapping[str, torch.Tensor]


@contextmanager
def watched(model: nn.Module, stream: Stream) -> Iterator[dict[str, torch.Tensor]]:
    """Forward pre-hooks on ``model``'s stream norms, recording the first input each norm
    consumed (a copy, detached) under its name while the block runs."""
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for name in stream.norms:
        def hook(_module: nn.Module, args: tuple[torch.Tensor, ...], name: str = name) -> None:
            if name not in seen and args and isinstance(args[0], torch.Tensor):
                seen[name] = args[0].detach().clone()

        handles.append(model.get_submodule(name).register_forward_pre_hook(hook))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def seen_with(captured: Mapping[str, torch.Tensor], output: torch.Tensor) -> Seen:
    """The captured norms' inputs and the output, as one path's stream."""
    return Seen({**captured, OUTPUT: output.detach()})


def dtype_failure(seen: Seen, stream: Stream) -> str:
    """The first place whose stream is not the declared dtype, as a message naming the
    site; empty when every one is."""
    for name, value in seen.values.items():
        if value.dtype != stream.dtype:
            where = "the block's output" if name == OUTPUT else \
                f"the input of the pre-norm {name} (the stream between the sites)"
            return (f"the stream at {where} is {value.dtype}, expected the declared "
                    f"{stream.dtype}: the norm consumes what the stream does not store")
    return ""


def differs(seen: Seen, eager: Seen) -> tuple[float, int]:
    """The fraction of the stream elements observed on both paths not bitwise eager's (at
    least one ulp apart; another dtype or shape counts every element), and how many."""
    apart = total = 0
    for name, value in seen.values.items():
        base = eager.values.get(name)
        if base is None:
            continue
        total += value.numel()
        if base.shape != value.shape:
            apart += value.numel()
            continue
        same = value.to(torch.float64) == base.to(torch.float64)
        apart += int((~same).sum()) if value.dtype == base.dtype else value.numel()
    return (apart / total if total else 0.0), total


def observed(seen: Seen) -> Sequence[str]:
    """The places observed on a path: the norms that ran, then ``output``."""
    return tuple(seen.values)
