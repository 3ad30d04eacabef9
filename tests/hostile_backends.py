"""Hostile engines: backends that misbehave in every way short of giving wrong numbers.

Each in-process adapter runs the NumPy reference and then does one hostile thing: raises,
answers NaN, the wrong shape, the wrong dtype or ``None``, writes into its inputs, sleeps
past the per-test timeout, calls ``os._exit`` or segfaults. ``resverify check`` must turn
each into a classified failure of that test and go on. The same adapters are served over
the ``cmd:`` protocol with ``python -m resverify.impl.serve tests.hostile_backends:Name``.

Run as a script, this module is an external engine that breaks the protocol itself
(``python tests/hostile_backends.py half_line|garbage|exits_mid_run``): it answers the
hello properly, then writes half a line and hangs, writes garbage, or exits after a few
answers.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np

from resverify.impl.backend import Capabilities
from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.request import Request, Result, ResultError, Value

_REFERENCE = NumpyBackend()
CAPABILITIES = Capabilities(dtypes=("float64", "float32"), ops=_REFERENCE.capabilities.ops)


class _Hostile:
    """The reference, with one hostile step after it (``spoil``)."""

    name = "hostile"
    capabilities = CAPABILITIES

    def run(self, request: Request) -> Result:
        return self.spoil(request, _REFERENCE.run(request))

    def spoil(self, request: Request, result: Result) -> Result:
        return result


class _SpoilsValues(_Hostile):
    """Spoils values only: a typed error result passes through."""

    def spoil(self, request: Request, result: Result) -> Result:
        return result if isinstance(result, ResultError) else self.spoil_value(result)

    def spoil_value(self, value: Value) -> Result:
        return value


class Raises(_Hostile):
    name = "hostile-raises"

    def spoil(self, request: Request, result: Result) -> Result:
        raise RuntimeError("the engine fell over")


class ReturnsNaN(_SpoilsValues):
    name = "hostile-nan"

    def spoil_value(self, result: Value) -> Result:
        return Value(np.full_like(result.output, np.nan), result.grads)


class WrongShape(_SpoilsValues):
    name = "hostile-wrong-shape"

    def spoil_value(self, result: Value) -> Result:
        longer = np.append(result.output.ravel(), result.output.dtype.type(0))
        return Value(longer, result.grads)


class WrongDtype(_SpoilsValues):
    name = "hostile-wrong-dtype"

    def spoil_value(self, result: Value) -> Result:
        other = np.float32 if result.output.dtype == np.float64 else np.float64
        return Value(result.output.astype(other), result.grads)


class ReturnsNone(_Hostile):
    name = "hostile-none"

    def spoil(self, request: Request, result: Result) -> Result:
        return None  # type: ignore[return-value]


class MutatesInputs(_Hostile):
    name = "hostile-mutates"

    def spoil(self, request: Request, result: Result) -> Result:
        for array in request.inputs.values():
            array += 1
        return result


NEVER = 24 * 3600.0
"""How long a hanging backend sleeps: it never answers within any test's limit."""


class Sleeps(_Hostile):
    name = "hostile-sleeps"

    def spoil(self, request: Request, result: Result) -> Result:
        time.sleep(NEVER)
        return result


class Exits(_Hostile):
    name = "hostile-exits"

    def spoil(self, request: Request, result: Result) -> Result:
        os._exit(3)


class Segfaults(_Hostile):
    name = "hostile-segfaults"

    def spoil(self, request: Request, result: Result) -> Result:
        ctypes.string_at(0)
        return result


class ClaimsOnlySum(_Hostile):
    """Claims a single op no property can run on alone: nothing gets checked."""

    name = "claims-only-sum"
    capabilities = Capabilities(dtypes=("float64",), ops=("sum",))


IN_PROCESS = {"Raises": "raised", "ReturnsNaN": "law", "WrongShape": "bad_result",
              "WrongDtype": "bad_result", "ReturnsNone": "bad_result", "MutatesInputs": "law",
              "Sleeps": "timeout", "Exits": "crash", "Segfaults": "crash"}
"""Each hostile adapter and the failure kind it must get when run in-process."""


def _engine(mode: str) -> int:
    """An external engine that answers the hello, then breaks the protocol per ``mode``."""
    from resverify.impl.serve import answer

    engine = _Hostile()
    engine.name = f"engine-{mode.replace('_', '-')}"
    answered = 0
    for line in sys.stdin:
        if '"hello"' in line or answered < 3 or mode not in PROTOCOL_BREAKERS:
            sys.stdout.write(answer(engine, line) + "\n")
            sys.stdout.flush()
            answered += '"hello"' not in line
            continue
        if mode == "half_line":
            sys.stdout.write('{"resverify": 1, "kind": "res')
            sys.stdout.flush()
            time.sleep(NEVER)
        elif mode == "garbage":
            sys.stdout.write("this is not a JSON document\n")
            sys.stdout.flush()
        else:
            return 7
    return 0


PROTOCOL_BREAKERS = {"half_line": "timeout", "garbage": "bad_result", "exits_mid_run": "crash"}
"""Each external engine mode and the failure kind it must get."""


if __name__ == "__main__":
    sys.exit(_engine(sys.argv[1]))
