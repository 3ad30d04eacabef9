"""Turn a backend name from the command line or pytest into a backend object."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from resverify.impl.backend import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.spec.errors import UsageError


def _torch(device: str) -> Callable[[], Backend]:
    def make() -> Backend:
        from resverify.impl.torch_backend import TorchBackend

        return TorchBackend(device)
    return make


def _torch_compile() -> Backend:
    from resverify.impl.compiled_backends import TorchCompileBackend

    return TorchCompileBackend()


def _jax_jit() -> Backend:
    from resverify.impl.compiled_backends import JaxJitBackend

    return JaxJitBackend()


def _tensorflow() -> Backend:
    from resverify.impl.tensorflow_backend import TensorflowBackend

    return TensorflowBackend()


def _tinygrad() -> Backend:
    from resverify.impl.tinygrad_backend import TinygradBackend

    return TinygradBackend()


def _pytensor() -> Backend:
    from resverify.impl.pytensor_backend import PytensorBackend

    return PytensorBackend()


def _jax() -> Backend:
    from resverify.impl.functional_backends import JaxBackend

    return JaxBackend()


def _autograd() -> Backend:
    from resverify.impl.functional_backends import AutogradBackend

    return AutogradBackend()


BUILTIN: dict[str, Callable[[], Backend]] = {
    "numpy": NumpyBackend,
    "torch": _torch("cpu"),
    "torch-cuda": _torch("cuda"),
    "torch-compile": _torch_compile,
    "jax": _jax,
    "jax-jit": _jax_jit,
    "autograd": _autograd,
    "tensorflow": _tensorflow,
    "tinygrad": _tinygrad,
    "pytensor": _pytensor,
}


def _working_folder_importable() -> None:
    """Let ``module:attr`` name a module in the working folder, as ``python -m`` would.

    The folder goes last on ``sys.path``, so it never shadows an installed package; the
    only top-level name resverify installs is ``resverify``.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def resolve_backend(name: str) -> Backend:
    """A built-in name (``numpy``), ``package.module:attr`` naming a backend or a factory,
    or ``cmd:COMMAND`` for an engine in another process (:mod:`resverify.impl.external`)."""
    if name in BUILTIN:
        try:
            return BUILTIN[name]()
        except UsageError:
            raise
        except Exception as exc:  # a broken optional library, say
            raise UsageError(
                f"cannot create backend {name!r}: {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    if name.startswith("cmd:"):
        from resverify.impl.external import ExternalBackend

        return ExternalBackend(name.removeprefix("cmd:"))
    if ":" not in name:
        raise UsageError(
            f"unknown backend {name!r}; use one of {sorted(BUILTIN)}, module:attr or cmd:COMMAND"
        )
    module_name, _, attr = name.partition(":")
    _working_folder_importable()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an adapter module may fail to import in any way
        raise UsageError(
            f"cannot import backend module {module_name!r}: {type(exc).__name__}: "
            f"{_one_line(exc)}") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"module {module_name!r} has no attribute {attr!r}") from None
    backend = target
    if isinstance(target, type) or (callable(target) and not isinstance(target, Backend)):
        try:
            backend = target()
        except Exception as exc:
            raise UsageError(
                f"cannot create backend {name!r}: {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    if not isinstance(backend, Backend):
        raise UsageError(f"{name!r} is not a backend (needs name, capabilities and run())")
    return backend


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
