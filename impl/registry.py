"""Turn a backend name from the command line or pytest into a backend object."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from impl.backend import Backend
from impl.numpy_backend import NumpyBackend
from spec.errors import UsageError


def _torch(device: str) -> Callable[[], Backend]:
    def make() -> Backend:
        from impl.torch_backend import TorchBackend

        return TorchBackend(device)
    return make


def _jax() -> Backend:
    from impl.functional_backends import JaxBackend

    return JaxBackend()


def _autograd() -> Backend:
    from impl.functional_backends import AutogradBackend

    return AutogradBackend()


BUILTIN: dict[str, Callable[[], Backend]] = {
    "numpy": NumpyBackend,
    "torch": _torch("cpu"),
    "torch-cuda": _torch("cuda"),
    "jax": _jax,
    "autograd": _autograd,
}


def resolve_backend(name: str) -> Backend:
    """A built-in name (``numpy``), ``package.module:attr`` naming a backend or a factory,
    or ``cmd:COMMAND`` for an engine in another process (:mod:`impl.external`)."""
    if name in BUILTIN:
        return BUILTIN[name]()
    if name.startswith("cmd:"):
        from impl.external import ExternalBackend

        return ExternalBackend(name.removeprefix("cmd:"))
    if ":" not in name:
        raise UsageError(
            f"unknown backend {name!r}; use one of {sorted(BUILTIN)}, module:attr or cmd:COMMAND"
        )
    module_name, _, attr = name.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load backend {name!r}: {exc}") from None
    backend = target
    if isinstance(target, type) or (callable(target) and not isinstance(target, Backend)):
        try:
            backend = target()
        except Exception as exc:
            raise UsageError(f"cannot create backend {name!r}: {exc}") from None
    if not isinstance(backend, Backend):
        raise UsageError(f"{name!r} is not a backend (needs name, capabilities and run())")
    return backend
