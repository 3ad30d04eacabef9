"""The exact judgement of a real Llama decoder layer, beside its forward+backward and gradcheck.

Why: issue 37 asks what judging every element of a real layer costs. The layer is
``transformers``' ``LlamaDecoderLayer`` built from a tiny config (no weights downloaded),
hidden 128, 4 heads, called as the catalog's recipe calls it (rotary embeddings and an
additive causal mask, read as ``masked_softmax``) on batch 2, sequence 128. Per dtype
(float64, float32, bfloat16) one run of :func:`resverify.blocks.exact.judge_module`: the
trace (``torch.export``, decompositions, the table; one-off per module and dtype), the
whole-program judgement of every element of the output, the input gradient and every
parameter gradient, and the op-by-op judgement, each against the layer's own eager
forward+backward (the median of calibrated repeats in the same run). Prints a Markdown
table; torch on one thread.

``--gradcheck 32:16,64:32`` times full ``torch.autograd.gradcheck`` (its defaults, the input
and every parameter checked) on the same layer in float64 at each ``hidden:sequence``
instead, beside the judgement on the same size. Not part of the test suite:

    .venv/bin/python tools/bench_exact_layer.py [--gradcheck 32:16,64:32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.* as a script

from tools.bench_exact import forward_backward
from tools.bench_timing import calibrate, per_call

HEADS, BATCH = 4, 2
DTYPES = ("float64", "float32", "bfloat16")


def _layer(hidden: int) -> Any:
    """The catalog's Llama recipe's layer at ``hidden`` (4 heads, MLP twice as wide), called
    as the recipe calls it (its parameters named ``block.<name>``)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from resverify.blocks.catalog import recipe
    from resverify.blocks.exact import Called

    fields: dict[str, Any] = {"attn_implementation": "eager"}  # as the catalog pins it
    config = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS,
                         num_hidden_layers=1, vocab_size=32, attention_dropout=0.0, **fields)
    block = LlamaDecoderLayer(config, layer_idx=0)
    return Called(recipe("hf.LlamaDecoderLayer"), block).eval()


def _row(hidden: int, seq: int, dtype: str) -> str:
    import copy

    import torch

    from resverify.blocks.exact import judge_module
    from resverify.blocks.trace import TORCH_DTYPES

    torch.manual_seed(0)
    module = _layer(hidden)
    judged = judge_module(module, (torch.zeros(BATCH, seq, hidden),), dtype, seed=0)
    eager = copy.deepcopy(module).to(TORCH_DTYPES[dtype])
    x = torch.randn(BATCH, seq, hidden).to(TORCH_DTYPES[dtype])
    passes = forward_backward(eager, x)
    calls = calibrate(passes, 0.05)
    fb = statistics.median(per_call(passes, calls) for _ in range(3))
    s = judged.seconds
    return (f"| {dtype} | {judged.verdict} | {judged.elements} of {judged.total} | "
            f"{judged.tightness.median:.3g}, {judged.tightness.p99:.3g}, "
            f"{judged.tightness.max:.3g} | {s['trace']:.1f} | {s['judge']:.1f} | "
            f"{s['local']:.1f} | {fb * 1e3:.1f} | {s['judge'] / fb:.0f}x |")


def _gradcheck(hidden: int, seq: int) -> str:
    import torch

    from resverify.blocks.exact import judge_module
    from tools.gradcheck_side import full_gradcheck

    torch.manual_seed(0)
    module = _layer(hidden)
    judged = judge_module(module, (torch.zeros(BATCH, seq, hidden),), "float64", seed=0)
    # the whole verdict (the module's run, the whole-program and the op-by-op judgement),
    # the trace reused and stated apart; the median of three runs
    spans = []
    for _ in range(3):
        again = judge_module(module, (torch.zeros(BATCH, seq, hidden),), "float64", seed=0,
                             lowered=judged.lowered)
        spans.append(sum(s for k, s in again.seconds.items() if k != "trace"))
    judge_s = statistics.median(spans)
    x = torch.randn((BATCH, seq, hidden), generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    passed, spent = full_gradcheck(module.double(), x)
    return (f"| {hidden} | {seq} | {judged.elements} | {judged.verdict} | {judge_s:.2f} | "
            f"{judged.seconds['trace']:.1f} | {'pass' if passed else 'FAIL'} | {spent:.0f} | "
            f"{spent / judge_s:.0f}x |")


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--gradcheck", default="", help="comma-separated hidden:sequence "
                        "sizes: time full gradcheck in float64 beside the judgement instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.gradcheck:
        print("| hidden | seq | elements | exact judgement | judgement s (median of 3) | "
              "trace s (one-off) | gradcheck | gradcheck s | gradcheck / judgement |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for size in args.gradcheck.split(","):
            hidden, seq = (int(n) for n in size.split(":"))
            print(_gradcheck(hidden, seq), flush=True)
        return 0
    print(f"Llama decoder layer, hidden {args.hidden}, {HEADS} heads, sequence {args.seq}, "
          f"batch {BATCH}, one thread")
    print("| dtype | verdict | elements judged | error/bound median, p99, max | "
          "trace s (one-off) | judge s | op-by-op s | forward+backward ms | judge / "
          "forward+backward |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for dtype in args.dtypes.split(","):
        print(_row(args.hidden, args.seq, dtype), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
