"""The probes a blocks report plots: figures of a torch block, never verdicts.

Why figures: how far a zeroed site's exit lies from its entry, and how much of a LayerScale
site's sum a small γ leaves swamped, say how a block behaves, not whether it is right; the
laws decide that. Each probe runs one example in eval mode (:func:`probes`); a block that
breaks a probe gets a note in its row, its verdict being the laws'.
"""

from __future__ import annotations

from typing import Any

from resverify.blocks.recipe import Recipe
from resverify.blocks.records import Draw
from resverify.blocks.torch_adapter import make_case

__all__ = ["probes"]

GAMMAS = (1e-6, 1e-4, 1e-2, 1.0)
"""The LayerScale values of the swamped-fraction probe."""


def probes(recipe: Recipe, dtypes: list[str], seed: int) -> dict[str, list[dict[str, Any]]]:
    """The report's probe rows of a torch block in each of ``dtypes``: ``zero_branch`` (per
    site, its branch zeroed) and ``layerscale`` (per LayerScale site and γ); none for a
    block of another library (the probes read a torch module's hooks)."""
    if recipe.adapter != "torch":
        return {"zero_branch": [], "layerscale": []}
    return {"zero_branch": [row for d in dtypes for row in _zero_probe(recipe, d, seed)],
            "layerscale": [row for d in dtypes for row in _gamma_probe(recipe, d, seed)]}


def _case(recipe: Recipe, dtype: str, seed: int) -> Any:
    return make_case(recipe, dtype, "eval", Draw(3, 4, seed, 0, 0))


def _max_abs(a: Any, b: Any) -> float | None:
    if a.shape != b.shape:
        return None
    import torch

    return float((a.detach().to(torch.float64) - b.detach().to(torch.float64)).abs().max())


def _zero_probe(recipe: Recipe, dtype: str, seed: int) -> list[dict[str, Any]]:
    """Per site, that site's branch zeroed: max |exit - entry| and max |exit - the
    zero-branch map's exit| (the law's own difference), on one example in eval mode."""
    import torch

    from resverify.blocks.trace import no_drop, observe, site_exit, zeroed

    rows = []
    for i, site in enumerate(recipe.sites):
        row: dict[str, Any] = {"dtype": dtype, "site": site.label, "from_identity": None,
                               "from_law": None, "note": ""}
        try:
            case = _case(recipe, dtype, seed)
            module = zeroed(case.module, list(site.zero))
            with no_drop(module, recipe):
                seen = observe(recipe, module, case.inputs.x.clone(), case.inputs.context)
                s, out = seen.entries[i], seen.exits[i]
                expected = site_exit(module, site, s, torch.zeros_like(s))[1]
            row["from_identity"] = _max_abs(out, s)
            row["from_law"] = _max_abs(out, expected)
            row["note"] = "" if row["from_identity"] is not None else "the site changes shape"
        except Exception as exc:  # a probe is a figure: a broken block's verdict is the law's
            row["note"] = f"not measured: {type(exc).__name__}: {str(exc)[:120]}"
        rows.append(row)
    return rows


def _gamma_probe(recipe: Recipe, dtype: str, seed: int) -> list[dict[str, Any]]:
    """Per LayerScale site and value of :data:`GAMMAS`: the fraction of the site's sum
    bitwise equal to its entry (every γ of the block set to the value), eval mode."""
    import contextlib

    import torch

    from resverify.blocks.trace import no_drop, observe, with_parameter

    scaled = [(i, s) for i, s in enumerate(recipe.sites) if s.scale]
    if not scaled:
        return []
    rows = []
    try:
        case = _case(recipe, dtype, seed)
        for gamma in GAMMAS:
            with contextlib.ExitStack() as stack:
                for _i, site in scaled:
                    assert site.scale is not None
                    stack.enter_context(with_parameter(case.module, site.scale, gamma))
                stack.enter_context(no_drop(case.module, recipe))
                seen = observe(recipe, case.module, case.inputs.x.clone(), case.inputs.context)
            for i, site in scaled:
                z = seen.exits[i] if seen.sums[i] is None else seen.sums[i]
                assert z is not None
                same = z.to(torch.float64) == seen.entries[i].to(torch.float64)
                rows.append({"dtype": dtype, "site": site.label, "gamma": gamma,
                             "swamped": float(same.to(torch.float64).mean())})
    except Exception:  # a probe is a figure; the laws judge a block that breaks here
        return rows
    return rows
