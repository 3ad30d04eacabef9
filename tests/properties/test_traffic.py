"""A backend's calls and warnings in one property test (resverify.properties.traffic)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from resverify.impl import NumpyBackend
from resverify.properties.assertions import PropertyFailure, send
from resverify.properties.laws_structure import check_bitwise_deterministic
from resverify.properties.strategies import relu_block
from resverify.properties.traffic import watching
from resverify.spec.request import Value
from tests.verdict_backends import PERIOD, WARNING, LastBitEveryTenthCall, WarnsOnEveryCall

REQUEST = relu_block(np.array([1.0, -2.0]), Fraction(1, 2), np.ones(2)).request("float64")


def test_backend_warning_is_recorded_and_never_raised_under_warnings_as_errors() -> None:
    with watching() as traffic, warnings.catch_warnings():
        warnings.simplefilter("error")  # as pytest's filterwarnings = error, or -W error
        sent = [send(WarnsOnEveryCall(), REQUEST) for _ in range(3)]
    reference = NumpyBackend().run(REQUEST)
    assert isinstance(reference, Value)
    for each in sent:
        assert isinstance(each.result, Value), each.result
        assert np.array_equal(each.result.output, reference.output), (each.result, reference)
    assert traffic.calls == 3, traffic
    assert traffic.heard() == [f"RuntimeWarning: {WARNING} (3 calls)"], traffic.heard()


def test_backend_without_warnings_leaves_none_recorded() -> None:
    with watching() as traffic:
        send(NumpyBackend(), REQUEST)
    assert (traffic.calls, traffic.heard()) == (1, []), traffic


def test_difference_between_runs_carries_the_runs_it_took_to_show() -> None:
    backend = LastBitEveryTenthCall()
    with watching() as traffic:
        for _ in range(PERIOD // 2 - 1):  # two calls a check: calls 1 to 8 agree
            check_bitwise_deterministic(backend, REQUEST)
        with pytest.raises(PropertyFailure) as caught:
            check_bitwise_deterministic(backend, REQUEST)  # calls 9 and 10: 10 differs
    assert caught.value.runs == traffic.calls == PERIOD, (caught.value.runs, traffic)
    assert f"first seen after {PERIOD} runs" in str(caught.value), str(caught.value)
