"""Pinned examples: the declared list of every property test's explicit examples, and the
seed fixtures (resverify.spec.fixtures) and past corner cases they pin.

Why a list of our own. The corpus exporter (:mod:`resverify.properties.corpus`) runs each
property's law on every pinned example, outside pytest, and records what it sends. It must
find those examples, and the body of the test to run them on, without reading Hypothesis's
private attributes. So a property test pins its examples with :func:`example` (in place of
``hypothesis.example``, with the same arguments): each one is handed to Hypothesis as an
explicit example, exactly as before, and declared here (:data:`PINNED`), with the body
it decorates, for the corpus to read. Put every ``example`` below ``@given``, next to the
``def``, where it decorates the test's own body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from hypothesis import example as hypothesis_example
from hypothesis import is_hypothesis_test

from resverify.properties.cases import Case
from resverify.properties.strategies import merge_case
from resverify.spec import fixtures
from resverify.spec.errors import UsageError

__all__ = []

Test = TypeVar("Test", bound=Callable[..., Any])


@dataclass
class Pinned:
    """One property test's pinned examples, in the order they are written (top first), and
    the body they decorate (the test before ``@given``)."""

    body: Callable[..., Any]
    examples: list[Mapping[str, Any]] = field(default_factory=list)


PINNED: dict[str, Pinned] = {}
"""``module.test_name`` -> its pinned examples (filled as the test modules are imported)."""


def _key(test: Callable[..., Any]) -> str:
    return f"{test.__module__}.{test.__name__}"


def example(**values: Any) -> Callable[[Test], Test]:
    """``hypothesis.example(**values)`` that also declares the example in :data:`PINNED`.

    Decorators apply from the bottom up, so each one goes in front of those below it; a
    body seen for the first time (a module imported again) starts its list afresh."""

    def pin(test: Test) -> Test:
        if is_hypothesis_test(test):
            raise UsageError(f"pinned.example on {test.__name__}: put it below @given, next "
                            "to the def, where it decorates the test's own body")
        held = PINNED.get(_key(test))
        if held is None or held.body is not test:
            held = PINNED[_key(test)] = Pinned(test)
        held.examples.insert(0, dict(values))
        return hypothesis_example(**values)(test)

    return pin


def pinned_examples(test: Callable[..., Any]) -> Pinned | None:
    """The pinned examples of the property test ``test`` (None when it pins none)."""
    return PINNED.get(_key(test))

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
