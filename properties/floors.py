"""The floors of the laws: what each law's examples must reach under the ``ci`` profile.

A floor is a list of tags of :mod:`resverify.properties.reach`, declared on a property test
with ``@pytest.mark.reaches(*FLOOR)``. The report holds every law to its floor per backend
and dtype (the coverage table: a tag no example reached is listed as unreached), and
``tests/properties/test_coverage_floor.py`` fails when the reference backend's run under
``ci`` leaves one unreached, so a change to the strategies cannot starve a law silently.
A floor names what the law is written for, not everything it happens to reach.
"""

from __future__ import annotations

from resverify.properties.strategies import FAMILY_OPS, SMOOTH_FAMILIES

__all__ = []

BRANCHES = tuple(sorted({f"op:{op}" for ops in FAMILY_OPS.values() for op in ops}))
"""Every op of every branch family, each on a path to the output with α ≠ 0."""
SMOOTH = tuple(sorted({f"op:{op}" for f in SMOOTH_FAMILIES for op in FAMILY_OPS[f]}))
"""The ops of the smooth families (relu left out: its kink defeats central differences)."""
_VALUES = ("alpha:exact", "alpha:inexact", "size:small", "size:wide")

RESIDUAL = ("op:linear", *_VALUES)
"""A law over generated residual stacks that is not split by family: a linear branch, α
exact and rounded by the dtype, small inputs and wide ones (whose linear layers sum over
a width). Every family in every dtype is the split laws' floor: 25 examples drawn at
random meet each of seven families only by chance."""
ORACLE = (*BRANCHES, *_VALUES, "alpha:zero", "size:empty", "size:scalar", "depth:1",
          "depth:2", "depth:3", "shared")
"""The oracle law (split by family): every branch op, each class of α (zero in a pinned
example: a zero α leaves its branch unjudged), every size class, one to three merges, an
operand read twice."""
TANGENT = (*BRANCHES, *_VALUES, "mode:jvp")
"""The tangent oracle law (split by family): every branch op, α exact and rounded, small
and wide inputs, in forward mode."""
FORWARD = (*RESIDUAL, "mode:jvp")
"""A forward-mode law over generated stacks, not split: as :data:`RESIDUAL`, with tangents."""
STACKS = (*sorted({f"op:{op}" for f, ops in FAMILY_OPS.items() if f != "linear"
                   for op in ops}), "depth:2", "depth:3", "size:small")
"""Stacks of one elementwise family: each family's ops, two and three blocks deep."""
SMOOTH_DIFFERENCES = (*SMOOTH, *_VALUES)
"""Central differences: the smooth ops with exact and rounded α on small and wide inputs."""
NORM_STACKS = ("op:layer_norm", "op:rms_norm", "op:linear", *_VALUES)
"""Pre-norm and post-norm stacks: both norms, a linear branch, α exact and rounded."""
SHARED = ("shared", "depth:1", "depth:2", "depth:3")
"""An operand read twice, in stacks one to three deep."""
UNROLLED = ("alpha:zero", "alpha:exact", "alpha:inexact", "depth:1", "depth:2", "depth:3",
            "depth:4+")
"""A stack's gradient as ``Π(1 + α_l)``: every class of α, one merge to more than three."""
