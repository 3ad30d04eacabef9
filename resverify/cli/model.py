"""``resverify model NAME... [--dtype D] [--layers N] [--hidden H] [--seq S] [--batch B]``:
a whole model judged exactly, end to end and layer by layer.

Each model of :mod:`resverify.blocks.catalog.models` is built from a tiny config at the
sizes asked, traced once and judged in each dtype it claims (``--dtype`` keeps only those):
its output, the stream after every residual layer and every parameter's gradient, against
the exact oracle (:func:`resverify.blocks.exact_model.judge_model`). Per model and dtype it
prints the end-to-end line (as ``resverify blocks check --exact`` does), the part a failure
is charged to (the first layer out of budget, with its first op out of its own budget and
the submodule that ran it), and a row per part: the embeddings, each layer, the final norm,
the head (judged/total, ``|error| / bound`` median, p99, max, verdict). Then the layer
laws (:func:`~resverify.blocks.exact_model.model_laws`): the zero-branch identity, stream
dtype and no-aliasing laws on each residual layer as it sits in the model, which see what
the exact judgement of the traced model cannot, a wiring bug (the trace is faithful to it);
the first failing layer is named with the op where its stream leaves the identity. The
verdicts are pointwise: the inputs drawn from ``--seed``.

The report is the one ``blocks check --exact`` writes (its ``exact`` section, a block per
model, each judgement holding its ``layers`` rows; the table "exact judgement" a row per
part), through the one writer, in ``--report-dir``; every request judged is saved as a
vector under ``<report-dir>/vectors/exact/`` and a failure's line names it and the command
that replays it. Ctrl-C (or SIGTERM) stops the judging and still writes the report of what
finished. Exit status: 0 when every judgement passed (or was partly judged), 1 when an
element or an op is outside its budget, a layer fails a law, or the run was interrupted, 2
on a usage error (an unknown model or dtype, a size that builds no model).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resverify.cli.blocks_output import add_output_arguments

if TYPE_CHECKING:
    from resverify.blocks.catalog.models import ModelEntry, Sizes
    from resverify.blocks.model_layers import ModelLayers
    from resverify.reports.exact import ExactRun

__all__: list[str] = []

NAME = "model"
HELP = "judge a whole model of the catalog exactly, end to end and layer by layer"
DEFAULT_DIR = Path("resverify-report") / "model"
KNOBS = ("layers", "hidden", "seq", "batch")
"""The size knobs a user sets (each model's defaults: 2 layers, hidden 16, seq 4, batch 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="model names (hf.LlamaForCausalLM, hf.GPT2LMHeadModel, "
                        "hf.ViTModel); none: list them")
    parser.add_argument("--dtype", action="append", default=[], metavar="DTYPE",
                        help="only this dtype (repeatable; default: every dtype the model "
                        "claims, float32 and bfloat16)")
    for knob, what in (("layers", "residual layers"), ("hidden", "model width"),
                       ("seq", "tokens (a ViT: patches, a square)"), ("batch", "batch size")):
        parser.add_argument(f"--{knob}", type=int, default=None, metavar="N",
                            help=f"{what} (default: the model's own tiny size)")
    parser.add_argument("--seed", type=int, default=0, metavar="K",
                        help="seed of the parameters, input and cotangent drawn (default 0)")
    add_output_arguments(parser, DEFAULT_DIR)


def run(args: argparse.Namespace) -> int:
    from resverify.blocks.catalog.models import model_entry, models
    from resverify.cli.blocks import require_torch
    from resverify.cli.blocks_exact import run_exact
    from resverify.cli.blocks_output import outputs

    if not args.names:
        for entry in models().values():
            print(f"{entry.name}: layers {entry.layers.format('k')}, input {entry.input}, "
                  f"dtypes {', '.join(entry.dtypes)}; {entry.notes}")
        return 0
    require_torch()
    asked = [(entry, _sizes(entry, args), _dtypes(entry, args.dtype))
             for entry in (model_entry(n) for n in args.names)]
    out = outputs(args)
    folder = out["folder"] / "vectors" / "exact"
    jobs = [partial(judge_entry, entry, sizes, dtypes, args.seed, folder)
            for entry, sizes, dtypes in asked]
    return run_exact(jobs, args.seed, out, not args.no_plots)


def _sizes(entry: ModelEntry, args: argparse.Namespace) -> Sizes:
    """The entry's sizes with the knobs given, checked (a UsageError names a bad one)."""
    from dataclasses import replace

    given = {k: getattr(args, k) for k in KNOBS if getattr(args, k) is not None}
    sizes = replace(entry.sizes, **given).checked()
    entry.example(sizes)  # a ViT's seq must be a square
    return sizes


def _dtypes(entry: ModelEntry, asked: Sequence[str]) -> list[str]:
    from resverify.spec.errors import UsageError

    unknown = [d for d in asked if d not in entry.dtypes]
    if unknown:
        raise UsageError(f"--dtype {', '.join(unknown)}: {entry.name} claims "
                         f"{', '.join(entry.dtypes)}")
    return [d for d in entry.dtypes if not asked or d in asked]


def judge_entry(entry: ModelEntry, sizes: Sizes, dtypes: Sequence[str], seed: int,
                folder: Path, say: Callable[[str], None] = print) -> ExactRun:
    """``entry``'s model judged in each of ``dtypes``, each said as it comes (the progress
    line first: a trace and judgement take seconds to minutes) and saved as a vector under
    ``folder``; a model the IR cannot express is ``not_traced`` and not tried again. On
    Ctrl-C the dtypes judged so far go with the KeyboardInterrupt (``finished``), for
    :func:`~resverify.cli.blocks_exact.run_exact` to report."""
    from resverify.blocks.catalog.hf import VERSION
    from resverify.blocks.exact_model import judge_model, model_laws
    from resverify.blocks.lower import NotInIR
    from resverify.cli.blocks_exact import saved_doc
    from resverify.reports.exact import ExactRun

    judged: list[dict[str, Any]] = []
    refused = None

    def run() -> ExactRun:
        return ExactRun(entry.name, f"resverify.blocks.catalog.models:{entry.name}",
                        "transformers", VERSION, judged, refused)

    for dtype in dtypes:
        say(f"{entry.name} {dtype}: judging {sizes.layers} layers, hidden {sizes.hidden}, "
            f"seq {sizes.seq}, batch {sizes.batch} (seed {seed}) ...")
        try:
            found = judge_model(entry, dtype, sizes, seed)
        except NotInIR as exc:
            refused = {"dtype": dtype, "ops": exc.ops, "nodes": len(exc.refused),
                       "reason": str(exc)}
            say(f"{entry.name}: not traced, the IR lacks {', '.join(exc.ops)} "
                f"({len(exc.refused)} nodes)")
            break
        except KeyboardInterrupt as exc:  # the dtypes judged before it are kept
            if judged:
                exc.finished = run()  # type: ignore[attr-defined]
            raise
        doc = saved_doc(entry.name, found.judgement, found.as_doc(), found.lines(), folder, say)
        judged.append(doc | {"layer_laws": _laws(model_laws(entry, dtype, sizes, seed), say)})
    return run()


def _laws(found: ModelLayers | str, say: Callable[[str], None]) -> dict[str, Any]:
    """The layer laws' verdict as the report holds it, its lines said: ``fail`` when a layer
    fails a law (its first such layer and the op where its stream left the identity),
    ``unjudged`` when no law was run (``reason``)."""
    if isinstance(found, str):
        say(f"  layer laws: {found}")
        return {"verdict": "unjudged", "reason": found, "first": None, "layers": []}
    lines = found.lines()
    say(f"  layer laws: {lines[0]}")
    for line in lines[1:]:
        say(f"    {line}")
    return {"verdict": "pass" if found.first is None else "fail", "reason": "",
            **found.as_doc()}
