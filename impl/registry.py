"""Turn a backend name from the command line or pytest into a backend object.

Names come from four places, in this order: the built-in adapters (:data:`BUILTIN`),
plug-ins (an installed distribution that names a backend in the ``resverify.backends``
entry-point group, e.g. ``[project.entry-points."resverify.backends"] my-engine =
"my_pkg.engine:MyBackend"``), ``cmd:COMMAND`` for an engine in another process, and
``module:attr``. A plug-in cannot take a built-in name: the built-in wins, and
``resverify backends`` shows the plug-in as shadowed.

Each built-in records what ``resverify backends`` lists without importing its library
(torch takes seconds to import): the distribution it needs, the import name to look for
with :func:`importlib.util.find_spec`, and the capabilities its adapter declares, modes
included (a test checks them against the adapter's own wherever the library is installed).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from resverify.impl.backend import Backend, Capabilities
from resverify.impl.numpy_backend import NumpyBackend
from resverify.impl.pytensor_backend import CLAIMED_OPS as PYTENSOR_OPS
from resverify.impl.tinygrad_backend import CLAIMED_OPS as TINYGRAD_OPS
from resverify.spec.errors import UsageError
from resverify.spec.ops import OP_TABLE

ENTRY_POINT_GROUP = "resverify.backends"
"""The entry-point group an installed distribution registers backend names in."""

ALL_FLOATS = ("float64", "float32", "float16", "bfloat16")
CORE_OPS = tuple(name for name, op in OP_TABLE.items() if not op.norm)
"""Every op but the normalisations, in the table's order (read from ``OP_TABLE``)."""
WITH_NORMS = tuple(OP_TABLE)
"""Every op, the norms included, in the table's order."""


@dataclass(frozen=True)
class Builtin:
    """A built-in backend: how to make it and what it needs, known without importing it."""

    name: str
    make: Callable[[], Backend]
    module: str
    """The top-level import name of the library (``find_spec`` tells if it is installed)."""
    distribution: str
    """The distribution whose version the listing shows."""
    extra: str | None
    """The resverify extra that installs it (None: always installed)."""
    capabilities: Capabilities
    needs: tuple[str, ...] = ()
    """Programs the adapter runs, looked up on the PATH."""

    def missing(self) -> str | None:
        """Why the backend cannot be made here (a library or a program missing), else None."""
        if importlib.util.find_spec(self.module) is None:
            return f"{self.module} is not installed (pip install 'resverify[{self.extra}]')"
        for program in self.needs:
            if shutil.which(program) is None:
                return f"{program} is not on the PATH"
        return None


def _lazy(module: str, cls: str, *args: Any) -> Callable[[], Backend]:
    """A factory that imports ``resverify.impl.<module>`` only when the backend is made."""

    def make() -> Backend:
        made: Backend = getattr(importlib.import_module(f"resverify.impl.{module}"), cls)(*args)
        return made

    return make


BOTH_MODES = ("vjp", "jvp")


def _builtins() -> dict[str, Builtin]:
    every = Capabilities(dtypes=ALL_FLOATS, modes=BOTH_MODES)
    table = (
        Builtin("numpy", NumpyBackend, "numpy", "numpy", None, NumpyBackend.capabilities),
        Builtin("torch", _lazy("torch_backend", "TorchBackend", "cpu"),
                "torch", "torch", "torch", every),
        Builtin("torch-cuda", _lazy("torch_backend", "TorchBackend", "cuda"),
                "torch", "torch", "torch",
                Capabilities(dtypes=ALL_FLOATS, device="cuda", modes=BOTH_MODES)),
        Builtin("torch-compile", _lazy("compiled_backends", "TorchCompileBackend"),
                "torch", "torch", "torch", every),
        Builtin("jax", _lazy("functional_backends", "JaxBackend"), "jax", "jax", "jax", every),
        Builtin("jax-jit", _lazy("compiled_backends", "JaxJitBackend"),
                "jax", "jax", "jax", every),
        Builtin("autograd", _lazy("functional_backends", "AutogradBackend"),
                "autograd", "autograd", "autograd",
                Capabilities(dtypes=("float64", "float32"), modes=BOTH_MODES)),
        Builtin("tensorflow", _lazy("tensorflow_backend", "TensorflowBackend"),
                "tensorflow", "tensorflow-cpu", "tensorflow", every),
        Builtin("tinygrad", _lazy("tinygrad_backend", "TinygradBackend"),
                "tinygrad", "tinygrad", "tinygrad",
                Capabilities(dtypes=("float64", "float32", "float16"), ops=TINYGRAD_OPS),
                needs=("clang",)),
        Builtin("pytensor", _lazy("pytensor_backend", "PytensorBackend"),
                "pytensor", "pytensor", "pytensor",
                Capabilities(dtypes=("float64", "float32"), ops=PYTENSOR_OPS)),
    )
    return {b.name: b for b in table}


BUILTINS: dict[str, Builtin] = _builtins()
BUILTIN: dict[str, Callable[[], Backend]] = {name: b.make for name, b in BUILTINS.items()}
"""Every built-in name and its factory."""


def plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """Every backend name installed distributions register in :data:`ENTRY_POINT_GROUP`."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _working_folder_importable() -> None:
    """Let ``module:attr`` name a module in the working folder, as ``python -m`` would.

    The folder goes last on ``sys.path``, so it never shadows an installed package; the
    only top-level name resverify installs is ``resverify``.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def resolve_backend(name: str) -> Backend:
    """A built-in name (``numpy``), a plug-in's name, ``package.module:attr`` naming a
    backend or a factory, or ``cmd:COMMAND`` for an engine in another process
    (:mod:`resverify.impl.external`)."""
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
    found = plugins().get(name)
    if found is not None:
        return _instantiate(name, load_plugin(found))
    if ":" not in name:
        raise _unknown(name)
    return _instantiate(name, import_attribute(name))


def import_attribute(ref: str, what: str = "backend",
                     example: str = "examples.toy_adapter:ToyBackend",
                     fits: Callable[[Any], bool] | None = None) -> Any:
    """The object ``module:attr`` names, the working folder importable; every failure one
    :class:`UsageError` line (``what`` says what the object is for, ``example`` a valid
    reference). A misspelt ``attr`` gets the closest name of the module, among those whose
    object ``fits`` (what the caller can use: a recipe, not the class it was built from)
    when any does."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{what} {ref!r} names no {'attribute' if module_name else 'module'}"
                         f"; write module:attr, e.g. {example}")
    _working_folder_importable()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a user's module may fail to import in any way
        raise _import_failure(module_name, exc, what) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        names = dir(module)
        usable = [n for n in names if fits is not None and fits(getattr(module, n, None))]
        raise UsageError(f"module {module_name!r} has no attribute {attr!r}"
                         f"{_did_you_mean(attr, usable or names)}") from None


def _did_you_mean(typed: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to ``typed`` (case aside), or
    ``""``."""
    by_folded = {k.lower(): k for k in known}
    close = difflib.get_close_matches(typed.lower(), by_folded, n=1)
    return f" (did you mean {by_folded[close[0]]!r}?)" if close else ""


def _unknown(name: str) -> UsageError:
    """A name without ``:``: a misspelt built-in or plug-in, or a module missing its attribute."""
    names = [*BUILTIN, *plugins()]
    suggestion = _did_you_mean(name, names)
    if not suggestion and _is_module(name):
        return UsageError(f"{name} has no ':attr'; write {name}:ClassName, naming the backend "
                          f"object, class or factory in it")
    return UsageError(
        f"unknown backend {name!r}{suggestion}; use one of {sorted(BUILTIN)}, an installed "
        f"plug-in ({', '.join(sorted(plugins())) or 'none installed'}), module:attr or "
        f"cmd:COMMAND")


def _is_module(name: str) -> bool:
    """Whether ``name`` is an importable module here (its parent packages may be imported)."""
    _working_folder_importable()
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package, or no module name at all
        return False


def _import_failure(module_name: str, exc: Exception, what: str = "backend") -> UsageError:
    """One line: the exception, and the file that raised it or the folders searched."""
    failed = f"{type(exc).__name__}: {_one_line(exc)}"
    missing = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and missing and (
            module_name == missing or module_name.startswith(f"{missing}.")):
        return UsageError(
            f"cannot import {what} module {module_name!r}: {failed} (searched the "
            f"environment's import path, then the working folder {os.getcwd()})")
    origin = _origin(module_name)
    where = f" ({origin})" if origin else f" (working folder {os.getcwd()})"
    return UsageError(f"cannot import {what} module {module_name!r}{where}: {failed}")


def _origin(module_name: str) -> str | None:
    """The file ``module_name`` is loaded from, when it can be found without importing it."""
    try:
        spec = importlib.util.find_spec(module_name)
    except Exception:  # a parent package that fails to import
        return None
    return spec.origin if spec is not None and spec.has_location else None


def load_plugin(entry: importlib.metadata.EntryPoint) -> Any:
    """The object a plug-in's entry point names; any failure is a one-line UsageError."""
    dist = entry.dist.name if entry.dist is not None else "an unknown distribution"
    try:
        return entry.load()
    except Exception as exc:  # a plug-in may fail to import in any way
        raise UsageError(
            f"cannot load plug-in backend {entry.name!r} ({entry.value}, from {dist}): "
            f"{type(exc).__name__}: {_one_line(exc)}") from None


def _instantiate(name: str, target: Any) -> Backend:
    """``target`` itself when it is a backend, else what calling it (a class or a factory)
    returns, checked to be a backend."""
    backend = target
    if isinstance(target, type) or (callable(target) and not isinstance(target, Backend)):
        try:
            backend = target()
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(
                f"cannot create backend {name!r}: {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    if not isinstance(backend, Backend):
        raise UsageError(f"{name!r} is not a backend (needs name, capabilities and run())")
    return backend


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]

