"""The planted-bug table of ``docs/findings.md``: each bug of ``tests/blocks/planted_layers.py``
(numeric bugs planted in the kernels of real Hugging Face and timm layers) and its correct
twin, judged three ways.

- **Exact** (:func:`resverify.blocks.exact.judge_recipe`), over seeds ``0..N-1`` (each a
  drawn input, cotangent and set of parameters), in two columns: the whole program's budget
  (every element of the output and every gradient) and the local one (each op of the traced
  graph on the module's own values). A cell says the first seed that caught the bug and how
  many of the N did; the twin (the same dispatch mode, torch's own kernel body) is run on
  the same seeds and its false alarms counted.
- **Structural laws**: the recipe's laws (:func:`resverify.blocks.check.check_block`, what
  ``resverify blocks check NAME`` runs) in the bug's dtype with the bug planted; "yes" if
  any law fails.
- **gradcheck** (``torch.autograd.gradcheck``, its defaults, full Jacobian, the input and
  every parameter) on the layer in float64 with the bug planted (on float64 tensors too),
  and its seconds; a precision bug's kernel, planted on bfloat16 or float32 tensors only,
  runs in a float64 layer only where the layer itself computes in that dtype (Llama's
  RMSNorm computes in float32 in every dtype).

The size column: the catching judgement's largest ``|error| / bound`` at seed 0 (1 is the
edge of the budget, which is a few roundings of the dtype), against the twin's on the same
seed (for the local judgement, at the first op out of budget); in a bfloat16 or float32
layer also the largest error of the output against the same layer run in float64, in units
of the twin's. The claim is pointwise, for the seeds run. Layers whose library is missing
are skipped with a line (timm's ViT needs ``.venv-vision``). Not part of the test suite::

    PYTHONPATH=. .venv/bin/python tools/planted_table.py [--seeds 20] [--layers hf.]
        [--bugs NAME,...] [--law-examples 25] [--no-gradcheck]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script


@dataclass
class Column:
    """One judgement's catches over the seeds run."""

    first: int | None = None
    caught: int = 0

    def add(self, seed: int, caught: bool) -> None:
        if caught:
            self.caught += 1
            self.first = seed if self.first is None else self.first

    def cell(self, seeds: int) -> str:
        if self.first is None:
            return f"no (0/{seeds})"
        return f"seed {self.first} ({self.caught}/{seeds})"


def _exact(bug: Any, layer: Any, seeds: int) -> tuple[Column, Column, Column, Column, Any]:
    """The whole and local columns over ``seeds``, the twin's false alarms in each, and seed
    0's judgements of the bug and its twin."""
    from resverify.blocks.exact import judge_recipe

    whole, local, twin_whole, twin_local = Column(), Column(), Column(), Column()
    first: tuple[Any, Any] = (None, None)
    for seed in range(seeds):
        judged = []
        for planted in (True, False):
            with bug.mode(planted):
                judged.append(judge_recipe(layer, bug.dtype, seed))
        for (w, loc), judgement in zip(((whole, local), (twin_whole, twin_local)), judged,
                                       strict=True):
            w.add(seed, bool(judgement.misses))
            loc.add(seed, judgement.local is not None and not judgement.local.passed)
        first = (judged[0], judged[1]) if seed == 0 else first
    return whole, local, twin_whole, twin_local, first


def _size(bug: Any, planted: Any, twin: Any) -> str:
    """The catching judgement's ``|error|/bound`` max at seed 0, the bug's vs the twin's."""
    if bug.caught_by == "local" or (not planted.misses and planted.local is not None
                                    and planted.local.first is not None):
        unit = planted.local.first
        if unit is None:
            return f"local max {planted.local.tightness.max:.3g} vs {twin.local.tightness.max:.3g}"
        same = next((u for u in twin.local.units if u.node == unit.node), None)
        op = unit.target.split(".")[1] if unit.target.startswith("aten.") else unit.target
        return (f"{op} {unit.worst:.3g} vs "
                f"{same.worst if same else 0:.2g}")
    return f"whole {planted.tightness.max:.3g} vs {twin.tightness.max:.2g}"


def _rounding_units(bug: Any, layer: Any) -> str:
    """The output's largest error against the float64 run of the same layer (its inputs and
    parameters rounded to the dtype), the bug's in units of the twin's."""
    import torch

    from resverify.blocks.trace import TORCH_DTYPES

    if bug.dtype == "float64":
        return ""
    kind = TORCH_DTYPES[bug.dtype]
    torch.manual_seed(0)
    block = layer.factory(kind).eval()
    x = _input(layer, kind)
    with torch.no_grad():
        reference = layer.run(block.double(), x.double(), {})
        block = block.to(kind)
        errors = []
        for planted in (True, False):
            with bug.mode(planted):
                errors.append(float((layer.run(block, x, {}).double() - reference).abs().max()))
    return f"; output error {errors[0] / errors[1]:.2f}× the twin's"


def _laws(bug: Any, layer: Any, examples: int) -> str:
    """``yes`` (and the laws) if a structural law fails with the bug planted, else ``no``."""
    from resverify.blocks.check import check_block

    with bug.mode(True):
        records = check_block(layer, [bug.dtype], max_examples=examples)
    failed = sorted({r.law for r in records if r.verdict == "fail"})
    judged = sum(r.verdict == "pass" for r in records) + len(failed)
    return f"yes ({', '.join(failed)})" if failed else f"no ({judged} law runs pass)"


def _input(layer: Any, kind: Any) -> Any:
    """The layer's input at the judged sizes (:data:`resverify.blocks.exact.SIZES`), drawn
    from seed 0 in float64 and rounded to ``kind``."""
    import torch

    from resverify.blocks.exact import SIZES

    shape = [d if isinstance(d, int) else SIZES[d] for d in layer.shape]
    return torch.randn(shape, generator=torch.Generator().manual_seed(0),
                       dtype=torch.float64).to(kind)


def _gradcheck(bug: Any, layer: Any) -> str:
    """gradcheck's verdict on the float64 layer with the bug planted, and its seconds; where
    it fails, the twin is run too, since gradcheck fails some correct layers (Llama's
    RMSNorm computes in float32 inside the float64 layer): a failure shared with the twin
    is no catch."""
    import torch

    from resverify.blocks.exact import recipe_module
    from tools.gradcheck_side import full_gradcheck

    module = recipe_module(layer, "float64", 0)[0]
    x = _input(layer, torch.float64)
    probe = _in_float64(bug, True)
    with probe:
        module(x.detach().requires_grad_(True)).sum().backward()
    if not probe.calls:  # gradcheck would judge the correct layer
        return "no (the kernel never runs in float64)"
    with _in_float64(bug, True):
        passed, spent = full_gradcheck(module, x)
    if passed:
        return f"no ({spent:.0f} s)"
    with _in_float64(bug, False):
        twin_passed, _ = full_gradcheck(module, x)
    return f"yes ({spent:.0f} s)" if twin_passed else f"no: fails the twin too ({spent:.0f} s)"


def _in_float64(bug: Any, planted: bool) -> Any:
    """The bug's mode (``planted``) or its twin's for the float64 layer: its kernels planted
    on float64 tensors too, except a precision bug's (rounding to a narrower dtype is no bug
    of a float64 kernel), which run only where the float64 layer computes in the bug's own
    dtype."""
    import torch

    from tests.blocks.planted_kernels import Kernels

    if bug.kind.startswith("precision"):
        return bug.mode(planted)
    return Kernels(bug.kernels(planted), bug.fires_on | {torch.float64})


def _row(bug: Any, seeds: int, examples: int, gradcheck: bool) -> str:
    from resverify.blocks.catalog import recipe

    layer = recipe(bug.layer)
    start = time.perf_counter()
    whole, local, twin_whole, twin_local, (planted, twin) = _exact(bug, layer, seeds)
    spent = (time.perf_counter() - start) / (2 * seeds)
    size = _size(bug, planted, twin) + _rounding_units(bug, layer)
    grad = _gradcheck(bug, layer) if gradcheck else "not run"
    return (f"| {bug.name} | {bug.layer} {bug.dtype} | {bug.kind} | {size} | "
            f"{whole.cell(seeds)} | {local.cell(seeds)} | "
            f"{twin_whole.caught}/{seeds}, {twin_local.caught}/{seeds} | "
            f"{_laws(bug, layer, examples)} | {grad} | {spent:.1f} |")


HEADER = ("| bug | layer, dtype | kind | size at seed 0: bug vs twin | exact, whole program | "
          "exact, local | twin's false alarms (whole, local) | structural laws | "
          "gradcheck (float64) | s per judgement |")


def main(argv: Sequence[str] | None = None) -> int:
    from tests.blocks.planted_layers import BUGS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds judged per bug")
    parser.add_argument("--bugs", default="", help="comma-separated bug names (default: all)")
    parser.add_argument("--layers", default="", help="only the bugs of layers whose recipe "
                        "name starts with this (hf., timm.)")
    parser.add_argument("--law-examples", type=int, default=25,
                        help="examples per structural law (default: the ci profile's 25)")
    parser.add_argument("--no-gradcheck", action="store_true", help="leave gradcheck out")
    args = parser.parse_args(argv)
    names = [n for n in args.bugs.split(",") if n] or \
        [n for n, bug in BUGS.items() if bug.layer.startswith(args.layers)]
    unknown = [n for n in names if n not in BUGS]
    if unknown:
        parser.error(f"unknown bugs {unknown}; known: {list(BUGS)}")
    print(HEADER)
    print("|" + " --- |" * HEADER.count(" | ") + " --- |")
    for name in names:
        try:
            print(_row(BUGS[name], args.seeds, args.law_examples, not args.no_gradcheck),
                  flush=True)
        except Exception as exc:  # a layer whose library is missing: said, and skipped
            if "recipe" not in str(exc) and "not installed" not in str(exc):
                raise
            print(f"| {name} | {BUGS[name].layer}: skipped, {str(exc)[:80]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
