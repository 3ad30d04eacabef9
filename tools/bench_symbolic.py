"""Bench section ``symbolic``: a SymPy derivation made the first time against asked again.

"First" clears every cache of :mod:`resverify.spec.symbolic` and SymPy's own before it
derives, as a fresh process would; "again" asks the same question with the caches warm.
The depth sweep checks ``(1+a)^L`` for every L = 1..1000 from one cached derivation; its
row's target is an absolute one (well under a second once derived).
"""

from __future__ import annotations

from collections.abc import Callable

from tools.bench_timing import Row, interleaved

SECTION = "symbolic"
TARGET = 100.0


def _clear() -> None:
    from sympy.core.cache import clear_cache

    from resverify.spec import symbolic

    for value in vars(symbolic).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()
    clear_cache()


def _cases() -> dict[str, Callable[[], object]]:
    import sympy as sp

    from resverify.spec import symbolic as sym

    one = sp.Integer(1)
    return {
        "jacobian law, symbolic branch n=3":
            lambda: sym.jacobian_law_difference(sym.symbolic_branch(3), one),
        "vjp law, tanh branch n=3": lambda: sym.vjp_law_difference(sym.tanh_branch(3), one),
        "depth law (1+a)^L, symbolic L": lambda: sym.depth_induction(True).holds,
        "variance identity (sympy.stats)": sym.variance_identity,
    }


def _row(case: str, derive: Callable[[], object], rounds: int) -> Row:
    def first() -> object:
        _clear()
        return derive()

    timing = interleaved({"first": first, "again": derive}, rounds=rounds, target=0.0)
    ratio = timing.ratio("first", "again")
    return Row(SECTION, case, "first derivation", "repeated", timing.seconds["first"],
               timing.seconds["again"], ratio, f">= {TARGET:g}x faster", ratio >= TARGET)


def rows(quick: bool = False) -> list[Row]:
    """Each derivation first and again, and the depth sweep after its derivation."""
    from resverify.spec import symbolic as sym

    rounds = 2 if quick else 5
    cases = _cases()
    if quick:
        cases = {k: v for k, v in cases.items() if "jacobian" in k}
    out = [_row(case, derive, rounds) for case, derive in cases.items()]
    depth = 100 if quick else 1000

    def first() -> object:
        _clear()
        return sym.expansion_sweep(depth)

    timing = interleaved({"first": first, "again": lambda: sym.expansion_sweep(depth)},
                         rounds=rounds, target=0.0)
    again = timing.seconds["again"]
    out.append(Row(SECTION, f"(1+a)^L checked for L=1..{depth}", "first (derives)",
                   "after the first", timing.seconds["first"], again,
                   timing.ratio("first", "again"), "< 1 s after the first", again < 1.0,
                   note="the sweep runs again every time; only its derivation is cached"))
    return out
