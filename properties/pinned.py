"""Seed fixtures (resverify.spec.fixtures) and past corner cases, pinned as explicit examples."""

from __future__ import annotations

import numpy as np

from resverify.properties.cases import Case
from resverify.properties.strategies import merge_case
from resverify.spec import fixtures

__all__ = ["ALONG_ROWS", "S06", "S07", "S10", "S11_PLAIN", "S11_RESIDUAL", "S17", "S17_AT_ZERO"]

S06 = Case.from_request(fixtures.linear_block_request())
S07 = Case.from_request(fixtures.linear_block_request(w=np.zeros((2, 2))))
S10 = Case.from_request(fixtures.shared_operand_request())
S11_PLAIN = Case.from_request(fixtures.stack_request(4, residual=False))
S11_RESIDUAL = Case.from_request(fixtures.stack_request(4, residual=True))
S17 = Case.from_request(fixtures.relu_block_request(True, [1.0, 1.0]))
# relu exactly at its kink: the declared derivative there is 0
S17_AT_ZERO = S17.with_values(x=np.array([0.0, 2.0]))

# op(a, b) with b of shape [3] broadcast along the rows of a [2, 3]; the cotangent's rows
# differ, so b's gradient (add: [5, 7, 9]) comes out right only when the rows are summed
# (an all-ones cotangent gives the right values whichever axes are summed)
_ROWS = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
ALONG_ROWS = {op: merge_case(op, _ROWS, np.array([1.0, -2.0, 3.0]), _ROWS)
              for op in ("add", "mul")}
