"""A pytest plugin that starves the strategies of tanh (``-p tests.properties.starve_tanh``):
the tanh family builds a scale branch instead, and a gate never takes tanh(x) as its gate.
A deliberate strategy change, to show that the coverage floor notices it
(``tests/properties/test_coverage_floor.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from resverify.properties import strategies

_branch: Callable[..., Any] = strategies._branch


def _without_tanh(b: Any, layer: int, h: str, shape: Any, family: str, ops: frozenset[str],
                  sizes: Any, project: bool) -> Any:
    family = "scale" if family == "tanh" else family
    return _branch(b, layer, h, shape, family, ops - {"tanh"}, sizes, project)


def pytest_configure(config: pytest.Config) -> None:
    strategies._branch = _without_tanh
