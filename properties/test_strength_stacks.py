"""Stacks whose blocks all use one branch family (property 1, deep and repetitive).

An engine that pools buffers by shape, caches per op, or keeps one saved activation per
op type is right with a single block of each kind and wrong as soon as two same-shaped
blocks of one family share it. The general strategy mixes families, so a stack of two or
more same-shaped tanh (or relu, or gate) blocks comes only now and then; here every block
of the stack uses one elementwise family the backend claims, 2 to 5 blocks deep. Found by
the mutant catalog: :class:`tests.mutants.SharedTanhBuffer` survived the rest of
the suite.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import FAMILY_OPS, claimed_ops, residual_cases
from resverify.spec.ir import DTYPES, Input, Node, Program

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
ELEMENTWISE = tuple(f for f in FAMILY_OPS if f != "linear")


@st.composite
def one_family_stacks(draw: st.DrawFn) -> Case:
    """A residual stack of 2..5 blocks, every branch from one claimed elementwise family."""
    usable = [f for f in ELEMENTWISE if FAMILY_OPS[f] <= claimed_ops()]  # "scale" at least
    family = draw(st.sampled_from(usable))
    return draw(residual_cases(families=[family], max_depth=5).filter(
        lambda c: sum(n.op == "residual_add" for n in c.program.nodes) >= 2))


def tanh_stack(x: np.ndarray, alphas: list[Fraction]) -> Case:
    """``h_l = h_{l-1} + α_l·tanh(h_{l-1})`` over x, all-ones cotangent."""
    nodes, h = [], "x"
    for i, a in enumerate(alphas):
        nodes += [Node(f"t{i}", "tanh", (h,)), Node(f"s{i}", "scale", (f"t{i}",), a),
                  Node(f"h{i}", "residual_add", (h, f"s{i}"))]
        h = f"h{i}"
    return Case(Program((Input("x", x.shape),), tuple(nodes), h), {"x": x}, np.ones(x.shape))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(case=one_family_stacks())
@example(case=tanh_stack(np.array([0.5, -1.0, 0.25]), [Fraction(1, 2), Fraction(1, 2)]))
def test_stack_of_one_branch_family_matches_spec(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))
