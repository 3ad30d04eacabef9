"""The optional built-in backends as test parameters: skipped where their library is
missing, except in CI, and slow where they take seconds to import or compile.

Every adapter test module runs its tests over some of the built-ins; a missing library
(or, for tinygrad, a missing compiler) is a skip on a developer's machine and a failure
under ``CI=true``, where .ci/run installs them all: a skip there would hide an adapter
that no longer imports. One rule, here, for all of them.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from importlib.util import find_spec

import pytest
from _pytest.mark import ParameterSet

from resverify.impl import resolve_backend
from resverify.impl.backend import Backend
from resverify.impl.registry import BUILTINS


def require_installed(name: str) -> None:
    """Skip the calling test where built-in ``name`` cannot be made here, unless CI=true."""
    missing = BUILTINS[name].missing()
    if missing is not None and os.environ.get("CI") != "true":
        pytest.skip(missing)


def installed_backend(name: str) -> Backend:
    """Built-in backend ``name``, or a skip of the calling test where it is missing
    (:func:`require_installed`)."""
    require_installed(name)
    return resolve_backend(name)


def backend_params(names: Iterable[str], slow: Collection[str]) -> list[ParameterSet]:
    """``names`` as pytest parameters, those in ``slow`` marked ``slow``."""
    return [pytest.param(n, marks=[pytest.mark.slow] if n in slow else []) for n in names]


TORCH_MISSING = "torch is not installed (make backends; docs/blocks-install.md)"


def skip_without_torch() -> None:
    """Skip the calling module (or test) where torch is not installed, as a bare ``make
    test`` finds it before ``make backends``, except under ``CI=true``, where its import
    errors stand: every block check drives torch (a JAX block's too)."""
    if find_spec("torch") is None and os.environ.get("CI") != "true":
        pytest.skip(TORCH_MISSING, allow_module_level=True)
