"""Symbolic derivations are made once: a repeated one is answered from the cache.

The caches are checked through ``cache_info`` and object identity, not timings; the
answers are immutable, so a caller cannot change what the next caller gets.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sympy as sp

from resverify.spec import symbolic as sym

ONE = sp.Integer(1)

DERIVATIONS: dict[str, tuple[Callable[..., object], Callable[[], object]]] = {
    "jacobian law, symbolic branch": (
        sym.jacobian_law_difference,
        lambda: sym.jacobian_law_difference(sym.symbolic_branch(2), ONE)),
    "vjp law, tanh branch": (
        sym.vjp_law_difference, lambda: sym.vjp_law_difference(sym.tanh_branch(2), ONE)),
    "linear vjp": (sym.linear_vjp_difference, lambda: sym.linear_vjp_difference(2)),
    "expansion": (sym.expansion, lambda: sym.expansion(7)),
    "refutation": (sym.refute_geometric_sum, lambda: sym.refute_geometric_sum(4)),
    "unrolled sum": (sym.unrolled_sum_difference, lambda: sym.unrolled_sum_difference(3)),
}


@pytest.mark.parametrize("name", DERIVATIONS)
def test_a_repeated_derivation_is_answered_from_the_cache(name: str) -> None:
    cached, derive = DERIVATIONS[name]
    first = derive()
    hits = cached.cache_info().hits  # type: ignore[attr-defined]
    again = derive()
    assert again is first, f"{name}: the second derivation built a new answer"
    assert cached.cache_info().hits == hits + 1, cached.cache_info()  # type: ignore[attr-defined]


def test_branches_are_hashable_and_built_once() -> None:
    assert sym.tanh_branch(3) is sym.tanh_branch(3)
    zero = sym.Branch("zero", sym.symbolic_branch(2).xs, sp.zeros(2, 1))
    assert isinstance(zero.values, sp.ImmutableMatrix)
    assert hash(zero) == hash(sym.Branch("zero", zero.xs, sp.zeros(2, 1)))
    assert zero.jacobian is zero.jacobian


def test_a_cached_answer_cannot_be_changed_by_its_caller() -> None:
    law = sym.jacobian_law_difference(sym.symbolic_branch(2), ONE)
    with pytest.raises(TypeError):
        law[0, 0] = 1
    assert all(entry == 0 for entry in sym.jacobian_law_difference(sym.symbolic_branch(2), ONE))


def test_the_depth_sweep_reuses_one_derivation_and_still_checks_every_depth() -> None:
    sym.expansion_sweep(20)
    misses = sym._coefficient_ratio.cache_info().misses
    assert sym.expansion_sweep(60) is None
    info = sym._coefficient_ratio.cache_info()
    assert info.misses == misses and info.hits >= 1, info
    assert not hasattr(sym.expansion_sweep, "cache_info"), "the sweep itself must run again"
