"""The wiring table of ``docs/findings.md``: each wiring bug of
``tests/blocks/planted_wiring.py`` (flax#4567, OLMo#680 out of place and in place, planted in
the second layer of a tiny 2-layer Llama and GPT-2) and its correct twin, judged two ways.

- **Logits moved**: the largest ``|logits - logits of the untouched model|`` on the example
  input over the largest ``|logits of the untouched model|`` (a twin's 0: the hand-written
  forward is the library's, bitwise).
- **Per-layer laws** (:func:`resverify.blocks.check_model_layers`): the block laws on each
  layer as it sits in the model; caught (yes/no), the first failing layer, its failing laws,
  and the op where its stream leaves the identity.
- **End to end, exact** (:func:`resverify.blocks.exact.judge_module` on the whole model,
  ``inputs_embeds`` to logits, float32, seed 0): its verdict, or the refusal
  (:class:`~resverify.blocks.lower.NotInIR`) with its first line. A wiring bug is the
  program the model computes, so the trace is faithful to it and this judgement passes it.

Not part of the test suite::

    PYTHONPATH=. .venv/bin/python tools/wiring_table.py [--families llama,gpt2]
        [--examples 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script

HEADER = ("| model | layer 1 | logits moved | per-layer laws: caught | layer | "
          "failing laws | op where the stream leaves the identity | exact, end to end | "
          "s (laws, exact) |")


def _laws(family: str, form: str | None, planted: bool, examples: int) -> list[str]:
    from resverify.blocks import check_model_layers
    from resverify.blocks.catalog import recipe
    from tests.blocks import planted_wiring as pw

    chosen = pw.FAMILIES[family]
    found = check_model_layers(pw.model(family, form, planted), pw.inputs(),
                               [(n, recipe(chosen.recipe)) for n in chosen.layers],
                               max_examples=examples)
    first = found.first
    if first is None:
        return ["no", "", "", ""]
    where = first.location.line() if first.location else first.unlocated
    return ["yes", f"{first.index} ({first.name})", ", ".join(first.failed), where]


def _exact(family: str, form: str | None, planted: bool) -> str:
    from resverify.blocks.exact import judge_module
    from resverify.blocks.lower import NotInIR
    from tests.blocks import planted_wiring as pw

    whole = pw.Logits(pw.model(family, form, planted))
    try:
        judged = judge_module(whole, (pw.inputs()["inputs_embeds"],), "float32")
    except NotInIR as exc:
        return f"refused: {str(exc).splitlines()[0]}"
    return f"{judged.verdict} ({judged.elements} elements)"


def _moved(family: str, form: str | None, planted: bool) -> str:
    """How far the model's logits lie from the untouched model's, relative to the largest
    of those (0: bitwise the same)."""
    import torch

    from tests.blocks import planted_wiring as pw

    embeds = pw.inputs()["inputs_embeds"]
    with torch.no_grad():
        ours, theirs = (pw.Logits(pw.model(family, f, planted))(embeds.clone())
                        for f in (form, None))
    return f"{float((ours - theirs).abs().max() / theirs.abs().max()):.3g}"


def row(family: str, form: str | None, planted: bool, examples: int) -> str:
    """One table row: the model, what layer 1 carries, how far its logits moved, the two
    judgements, their seconds."""
    moved = _moved(family, form, planted)
    began = time.perf_counter()
    laws = _laws(family, form, planted, examples)
    judged = time.perf_counter()
    exact = _exact(family, form, planted)
    done = time.perf_counter()
    what = "untouched" if form is None else form if planted else f"{form} twin"
    return "| " + " | ".join([family, what, moved, *laws, exact,
                               f"{judged - began:.1f}, {done - judged:.1f}"]) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    from tests.blocks import planted_wiring as pw

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(pw.FAMILIES),
                        help="comma-separated model families (default: all)")
    parser.add_argument("--examples", type=int, default=3, help="examples per law")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in pw.FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; known: {list(pw.FAMILIES)}")
    print(HEADER)
    print("|" + " --- |" * (HEADER.count(" | ") + 1))
    for family in families:
        print(row(family, None, True, args.examples), flush=True)
        for form in pw.FORMS:
            for planted in (True, False):
                print(row(family, form, planted, args.examples), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
