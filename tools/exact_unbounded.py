"""Why a layer is only partly judged: the nodes where its budget first turns infinite.

Why: in bfloat16 most elements of a real attention layer got an infinite bound, and the
element that shows it is far downstream of the rule that lost it. For each block and seed
this judges the block (:func:`resverify.blocks.exact.judge_recipe`), prints its verdict
line, then every node whose bound turns infinite while all it was given is finite, forward
and reverse (:func:`resverify.spec.unbounded.origins`), and the first node whose error bound
reached its magnitude (``loose``: where the analysis stopped carrying information).

    .venv/bin/python tools/exact_unbounded.py hf.BertLayer --dtype bfloat16
    .venv/bin/python tools/exact_unbounded.py hf.GPT2Block hf.LlamaDecoderLayer --seed 3
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.* as a script


def main(argv: Sequence[str] | None = None) -> int:
    from resverify.blocks.exact import judge_recipe
    from resverify.cli.block_selection import select
    from resverify.spec.unbounded import origins

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", metavar="NAME",
                        help="catalog names or module:RECIPE(S), as resverify blocks takes")
    parser.add_argument("--dtype", default="bfloat16", help="the dtype (default bfloat16)")
    parser.add_argument("--seed", type=int, default=0, help="the seed (default 0)")
    args = parser.parse_args(argv)
    for one in select(args.names, False):
        judgement = judge_recipe(one.recipe, args.dtype, args.seed)
        print(f"{one.recipe.name} {str(judgement).splitlines()[0]}")
        assert judgement.request is not None
        for origin in origins(judgement.request):
            print(f"  {origin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
