"""False alarms of the exact judgement: one correct block judged on many drawn examples.

Why: a verdict of the exact judgement is only worth its budget if a correct layer never
fails it; issue 37 asks for 0 false alarms in at least 1,000 drawn examples per layer and
dtype. Each seed draws the block's parameters, its input and its cotangent anew
(:func:`resverify.blocks.exact.judge_recipe`), and every element of the output and every
gradient is judged. Prints, per block and dtype: the examples judged, how many failed
(their seeds), how many were only partly judged, the largest ``|error| / bound`` over all of
them and the seconds; exits 1 if any example failed. A long campaign (minutes per hundred
examples): run it before resolving, never in the test suite.

    .venv/bin/python tools/exact_alarms.py hf.BertLayer --dtype float64 --seeds 1000
    .venv/bin/python tools/exact_alarms.py tests.blocks.exact_modules:RECIPES --seeds 200
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script


def _campaign(name: str, recipe: object, dtype: str, seeds: range) -> tuple[str, bool]:
    from resverify.blocks.exact import judge_recipe
    from resverify.blocks.recipe import Recipe

    assert isinstance(recipe, Recipe)
    failed: list[int] = []
    partly = 0
    worst = 0.0
    start = time.perf_counter()
    lowered = None  # traced once: each seed draws new parameters, input and cotangent
    for seed in seeds:
        judgement = judge_recipe(recipe, dtype, seed, lowered)
        lowered = judgement.lowered
        if not judgement.passed:
            failed.append(seed)
        partly += judgement.verdict == "partly judged"
        worst = max(worst, judgement.tightness.max)
    spent = time.perf_counter() - start
    seen = ", ".join(map(str, failed[:10])) + (" ..." if len(failed) > 10 else "")
    line = (f"{name} {dtype}: {len(seeds)} examples (seeds {seeds.start}-{seeds.stop - 1}), "
            f"{len(failed)} failed{f' (seeds {seen})' if failed else ''}, {partly} partly "
            f"judged, max |error|/bound {worst:.3g}, {spent:.0f} s")
    return line, not failed


def main(argv: Sequence[str] | None = None) -> int:
    from resverify.cli.block_selection import select

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", metavar="NAME",
                        help="catalog names or module:RECIPE(S), as resverify blocks takes")
    parser.add_argument("--dtype", action="append", default=[],
                        help="only this dtype (repeatable; default: every dtype claimed)")
    parser.add_argument("--seeds", type=int, default=1000, help="examples (default 1000)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    args = parser.parse_args(argv)
    ok = True
    for one in select(args.names, False):
        recipe = one.recipe
        for dtype in [d for d in recipe.dtypes if not args.dtype or d in args.dtype]:
            line, passed = _campaign(recipe.name, recipe, dtype,
                                     range(args.first, args.first + args.seeds))
            print(line, flush=True)
            ok = ok and passed
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
