"""Bench section ``blocks``: each catalog block's check against its own forward+backward.

Why this baseline: what a user pays to check a block should be read against what running
the block costs, not in seconds a loaded machine makes meaningless. For every recipe the
installed catalog holds, the row is how many forward+backward passes of that block (built
as the checker builds it, in float32 at the drawn sizes' upper end, batch 3 by sequence 4,
on one thread as the checker runs it) one default check costs: every law, eager, float32,
the ``ci`` profile's examples. The two alternate round by round; the pass is calibrated to
about 50 ms a round, the check runs once a round (it takes seconds). ``--quick`` checks one
law with two examples on the first block only (a smoke run, its figure not meaningful).

A JAX block (Haiku's ResNet blocks) is timed the same way with its own driver
(:func:`resverify.blocks.check.check_block` through its Haiku adapter) against one
``jax.vjp`` of the block's call, eager as the driver runs it.

Catalog sources that do not import here (timm and torchvision outside ``.venv-vision``)
are rows skipped with the reason.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

from tools.bench_timing import Row, calibrate, per_call, skipped

if TYPE_CHECKING:
    from resverify.blocks.recipe import Recipe

SECTION = "blocks"
DTYPE = "float32"
BATCH, SEQ = 3, 4


def _forward_backward(recipe: Recipe) -> Callable[[], object]:
    import torch

    from resverify.blocks.torch_adapter import build
    from resverify.blocks.trace import TORCH_DTYPES, Inputs

    module = build(recipe, DTYPE, 0).eval()
    inputs = Inputs.draw(recipe, TORCH_DTYPES[recipe.stream_dtype or DTYPE], BATCH, SEQ, 0)

    def once() -> object:
        x = inputs.x.detach().requires_grad_(True)
        out = recipe.run(module, x, inputs.context)
        return torch.autograd.grad(out, x, torch.ones_like(out))

    return once


def _jax_forward_backward(recipe: Recipe) -> Callable[[], object]:
    import jax

    from resverify.blocks.check import Draw
    from resverify.blocks.haiku_adapter import make_case, transforms

    case = make_case(recipe, DTYPE, "eval", Draw(BATCH, SEQ, 0, 0, 0))  # type: ignore[arg-type]
    whole, _ = transforms(case.recipe)  # type: ignore[arg-type]
    block, x = case.handle, jax.numpy.asarray(case.inputs.x.numpy())  # float32: exact

    def once() -> object:
        y, pull = jax.vjp(lambda x: whole.apply(block.params, block.state, None, x, False)[0], x)
        return jax.block_until_ready(pull(y))

    return once


def _one_thread(fn: Callable[[], object]) -> Callable[[], object]:
    import torch

    def run() -> object:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(threads)

    return run


def _row(recipe: Recipe, quick: bool) -> Row:
    from resverify.blocks.check import check_block
    from resverify.blocks.haiku_adapter import JaxRecipe

    jax_side = isinstance(recipe, JaxRecipe)
    passes = _jax_forward_backward(recipe) if jax_side else _one_thread(_forward_backward(recipe))
    calls = calibrate(passes, 0.05)
    laws, examples = (["decomposition"], 2) if quick else (None, None)
    fwd, check = [], []
    for _ in range(1 if quick else 2):
        fwd.append(per_call(passes, calls))
        check.append(per_call(lambda: check_block(recipe, [DTYPE], laws,
                                          max_examples=examples), 1))
    fwd.append(per_call(passes, calls))
    base, cost = statistics.median(fwd), statistics.median(check)
    return Row(SECTION, f"{recipe.name}, {DTYPE}", "forward+backward",
               "one law, 2 examples" if quick else "default check", base, cost,
               cost / max(base, 1e-12), unit="x baseline",
               note=f"{len(recipe.sites)} sites, batch {BATCH} x seq {SEQ}")


def rows(quick: bool = False) -> list[Row]:
    """One row per installed catalog block (the first only with ``quick``), and one skipped
    row per catalog source that did not import."""
    try:
        from resverify.blocks.catalog import catalog
        from resverify.blocks.catalog import skipped as missing
    except ImportError as exc:  # torch absent: nothing to check
        return [skipped(SECTION, "every block", f"{type(exc).__name__}: {exc}")]
    recipes = [r for r in catalog().values() if DTYPE in r.dtypes]
    out = [_row(recipe, quick) for recipe in (recipes[:1] if quick else recipes)]
    return out + [skipped(SECTION, f"{source} blocks", reason)
                  for source, reason in missing().items()]
