"""Backends for the tests of verdicts that must not drift, importable from a child process
(``--backend tests.verdict_backends:NAME`` from the repository root).

* :class:`WarnsOnEveryCall`: the reference backend, right in every value, that warns on
  every call as a library does with a benign warning (NumPy's ``Mean of empty slice`` on a
  zero-width row): its verdict must be the reference's, whatever the pytest configuration.
* :class:`LastBitEveryTenthCall`: right, except that every tenth call of a process flips
  the last bit of the first output element (a racy reduction that loses now and then): a
  replay needs ten runs of one request in a fresh process to show it.
"""

from __future__ import annotations

import warnings

import numpy as np

from resverify.impl import NumpyBackend
from resverify.spec.request import Request, Result, Value

WARNING = "Mean of empty slice"
PERIOD = 10


class WarnsOnEveryCall(NumpyBackend):
    name = "warns-on-every-call"

    def run(self, request: Request) -> Result:
        warnings.warn(WARNING, RuntimeWarning, stacklevel=2)
        return super().run(request)


class LastBitEveryTenthCall(NumpyBackend):
    name = "last-bit-every-tenth-call"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def run(self, request: Request) -> Result:
        result = super().run(request)
        self.calls += 1
        if self.calls % PERIOD or not isinstance(result, Value) or not result.output.size:
            return result
        out = np.array(result.output, copy=True)
        flat = out.reshape(-1)
        flat[0] = np.nextafter(flat[0], np.inf, dtype=out.dtype)
        return Value(out, result.grads, result.tangent)
