"""The exact judgement of a whole 2-layer Llama, end to end and per layer, beside its own run.

Why: a whole model judged exactly (``resverify model``, :mod:`resverify.blocks.exact_model`)
judges every element of the stream after each layer, of the logits and of every parameter
gradient in one judgement; this measures what that costs at a size past the tests' tiny
ones: the catalog's ``hf.LlamaForCausalLM`` (tied embeddings) with 2 layers, hidden 256, 4
heads (2 key-value heads), MLP 512, vocabulary 32, on batch 2, sequence 128, in float32. One
run of :func:`~resverify.blocks.exact_model.judge_model`: the trace (``torch.export``,
decompositions, the table; one-off per model and dtype), the whole-program judgement, the
op-by-op judgement, and the model's own forward+backward (through the same wrapper, its
output the streams and the logits; the median of calibrated repeats in the same run), and
their ratio, and the judgement's CPU time beside its wall time (on a shared machine the
wall time carries the load). Prints the end-to-end line, the rows per part and a Markdown
table; torch on one thread unless ``--threads``. Not part of the test suite:

    .venv/bin/python tools/bench_exact_model.py [--hidden 256] [--seq 128] [--dtype float32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.* as a script

from tools.bench_exact import forward_backward
from tools.bench_timing import calibrate, per_call

MODEL = "hf.LlamaForCausalLM"


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    from resverify.blocks.catalog.models import Sizes, model_entry
    from resverify.blocks.exact_model import judge_model, model_module

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    entry = model_entry(MODEL)
    sizes = Sizes(hidden=args.hidden, seq=args.seq, batch=args.batch, layers=args.layers,
                  heads=args.heads, intermediate=args.intermediate).checked()
    cpu = time.process_time()
    found = judge_model(entry, args.dtype, sizes, seed=0)
    cpu = time.process_time() - cpu
    module, example = model_module(entry, sizes, args.dtype, seed=0)
    x = torch.randn(example[0].shape).to(next(module.parameters()).dtype)
    passes = forward_backward(module, x)
    calls = calibrate(passes, 0.05)
    fb = statistics.median(per_call(passes, calls) for _ in range(3))
    print("\n".join(found.lines()))
    j, s = found.judgement, dict(found.judgement.seconds)
    spent = s["judge"] + s["local"]
    print(f"\n{MODEL}, {sizes.layers} layers, hidden {sizes.hidden}, {sizes.heads} heads, "
          f"MLP {sizes.mlp}, sequence {sizes.seq}, batch {sizes.batch}, {args.dtype}, "
          f"{args.threads} thread(s); the judgement's CPU time {cpu:.0f} s, its wall time "
          f"{sum(s.values()):.0f} s (the rest: other processes on the machine)")
    print("| verdict | elements judged | error/bound median, p99, max | trace s (one-off) | "
          "judge s | op-by-op s | forward+backward ms | (judge + op-by-op) / "
          "forward+backward |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {j.verdict} | {j.elements} of {j.total} | {j.tightness.median:.3g}, "
          f"{j.tightness.p99:.3g}, {j.tightness.max:.3g} | {s['trace']:.1f} | "
          f"{s['judge']:.1f} | {s['local']:.1f} | {fb * 1e3:.1f} | {spent / fb:.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
