"""``resverify blocks check --exact NAME... | --all``: each block traced into the IR and judged
against the exact oracle (:func:`resverify.blocks.exact.judge_recipe`).

For each block and each dtype it claims (``--dtype`` keeps only those), one line: the
verdict on every element of the output and of every gradient (the input's, each
parameter's), the tightness of the budgets (median, 99th percentile and maximum of
``|error| / bound``) and the seconds; the verdict is pointwise (the inputs drawn from
``--seed``). Under it, the local verdict (:mod:`resverify.blocks.local`): how many ops of
the traced graph were judged alone on the module's own intermediate values, the tightness of
their one-step budgets, the first op out of its budget (``first op out of budget: addmm
(aten.addmm.default), 53 of 128 elements, |error|/bound max 29.6``), and whether the graph's
run matched the eager one bitwise. A block fails when either verdict fails. A block the IR
cannot express yet is one line listing the ATen ops that stop it
(:class:`~resverify.blocks.lower.NotInIR`), and is not judged in its other dtypes.

Each request judged (the traced program, the module's parameters, the drawn input and
cotangent) is saved as a vector under ``<report-dir>/vectors/exact/``, so an engine in any
language can be judged on the same real layer (``resverify replay PATH --backend NAME``, or
``resverify vectors run`` style through the external protocol); a failing block's line is
followed by its vector and that command. Its ``vector`` record names the block, the dtype
and the verdict line.

Exit status: 0 when every block judged passed (blocks that cannot be traced do not fail the
run: they were not judged), 1 when an element of some block is outside its budget or an op
outside its own, 2 on a usage error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resverify.blocks.recipe import Recipe

__all__: list[str] = []


def check_exact(recipes: Sequence[Recipe], dtypes: Sequence[str], seed: int, folder: Path,
                say: Callable[[str], None] = print) -> int:
    """Judge each recipe's block in each of its (chosen) dtypes, saving each request judged
    under ``folder``; the exit status."""
    from resverify.blocks.exact import judge_recipe
    from resverify.blocks.exact_check import replayed, save_judgement
    from resverify.blocks.lower import NotInIR

    failed = traced = refused = partly = 0
    for recipe in recipes:
        if recipe.adapter != "torch":
            say(f"{recipe.name}: not traced, the exact judgement traces torch modules only")
            refused += 1
            continue
        for dtype in [d for d in recipe.dtypes if not dtypes or d in dtypes]:
            try:
                judgement = judge_recipe(recipe, dtype, seed)
            except NotInIR as exc:
                say(f"{recipe.name}: not traced, the IR lacks {', '.join(exc.ops)} "
                    f"({len(exc.refused)} nodes)")
                refused += 1
                break
            traced += 1
            failed += not judgement.passed
            partly += judgement.verdict == "partly judged"
            spent = sum(judgement.seconds.values())
            say(f"{recipe.name}  {judgement} [{spent:.2f} s]")
            saved = save_judgement(recipe.name, judgement, folder)
            if not judgement.passed:
                say(f"  vector {saved}{replayed(saved, judgement)}")
    say(f"exact: {traced} judged ({failed} fail, {partly} partly judged), {refused} blocks "
        "not traced; "
        "pointwise verdicts (the inputs drawn)" + (f"; requests saved under {folder}"
                                                   if traced else ""))
    return 1 if failed else 0
