"""What exactly was checked: a backend's library, version, device and numerics settings.

A conformance statement is only as precise as its description of the system under test:
"torch passed" says little when float32 products may run as TF32 on one machine and in
full precision on another, or when JAX rounds float32 matmul inputs to bfloat16 under its
default precision on a GPU. :func:`describe_backend` answers, for any backend, a flat
``dict[str, str]`` that reports can print as is:

* always: ``backend`` (its name), ``library``, ``version`` (``"unknown"`` when the
  library's distribution cannot be found) and ``device``;
* then the settings that change numerics, named as the library spells them, e.g. torch's
  ``float32_matmul_precision``, ``cuda.matmul.allow_tf32``, ``cudnn.allow_tf32`` and
  ``deterministic_algorithms``; JAX's ``jax_enable_x64``, ``jax_default_matmul_precision``
  and ``platform``; a ``cmd:`` engine's ``command``; a compiled variant's ``compiler`` and
  ``compiler_backend``.

A backend may describe itself with an ``about()`` method returning such a mapping, or an
``about`` attribute holding one (an adapter says which library and version it wraps this
way: ``about = {"library": "minigrad", "version": "0.7.2"}``); it is preferred (the
compiled variants use it to add their compiler to their eager twin's description), and a
``library`` without a ``version`` gets the installed distribution's version. The built-in
adapters are recognised by class, looked up in ``sys.modules`` only: describing a backend
never imports a library the backend did not already import.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Mapping
from typing import Any

from resverify.spec.codec import FORMAT_VERSION
from resverify.spec.errors import UsageError

About = dict[str, str]

UNKNOWN = "unknown"


def describe_backend(backend: Any) -> About:
    """The library, version, device and numerics settings of ``backend`` (all strings).

    >>> from resverify.impl import NumpyBackend
    >>> describe_backend(NumpyBackend())["library"]
    'numpy'
    """
    own = getattr(backend, "about", None)
    if own is None:
        info = _builtin(backend)
    else:
        try:
            info = _strings(own(), "about()") if callable(own) else _strings(own, "about")
        except Exception as exc:  # a third-party about() may fail in any way
            info = {"about_error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    return {**_common(backend, info), **info}


def distribution_version(name: str) -> str:
    """The installed version of distribution ``name`` without importing it, or ``unknown``."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN


def _common(backend: Any, info: Mapping[str, str]) -> About:
    """The four keys every description has, from the backend where ``info`` lacks them."""
    library = info.get("library") or _library_of(backend)
    capabilities = getattr(backend, "capabilities", None)
    return {
        "backend": str(getattr(backend, "name", type(backend).__name__)),
        "library": library,
        "version": info.get("version") or distribution_version(library),
        "device": info.get("device") or str(getattr(capabilities, "device", UNKNOWN)),
    }


def _library_of(backend: Any) -> str:
    """The top-level package of the backend's class (its own module for an adapter file)."""
    return type(backend).__module__.split(".")[0]


def _strings(info: Any, what: str = "about()") -> About:
    if not isinstance(info, Mapping):
        verb = "return" if what.endswith("()") else "be"
        raise UsageError(f"{what} must {verb} a mapping, got {type(info).__name__}")
    return {str(k): str(v) for k, v in info.items()}


def _builtin(backend: Any) -> About:
    """The description of a built-in adapter, else nothing beyond the common keys."""
    for module, cls, describe in _DESCRIBERS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(backend, getattr(loaded, cls)):
            return describe(backend)
    return {}


def numpy_about(backend: Any = None) -> About:
    """The reference backend: resverify's own autograd over NumPy."""
    import numpy

    return {"library": "numpy", "version": numpy.__version__, "device": "cpu",
            "implementation": "resverify reference autograd, reverse and forward mode "
                              "(resverify.impl.tensor)"}


def torch_about(backend: Any) -> About:
    """torch's version and the flags that decide how float32 products are computed."""
    import torch  # already imported by the torch adapter

    return {
        "library": "torch",
        "version": str(torch.__version__),
        "device": str(getattr(backend, "device", "cpu")),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_tf32": str(torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": str(torch.backends.cudnn.allow_tf32),
        "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
        "num_threads": str(torch.get_num_threads()),
    }


def jax_about(backend: Any) -> About:
    """jax's version, x64 switch, default matmul precision and platform."""
    import jax  # already imported by the jax adapter

    config: Any = jax.config  # its flags are attributes the stubs do not list
    precision = config.jax_default_matmul_precision
    return {
        "library": "jax",
        "version": jax.__version__,
        "jaxlib": distribution_version("jaxlib"),
        "device": jax.default_backend(),
        "platform": jax.default_backend(),
        "jax_enable_x64": str(bool(config.jax_enable_x64)),
        "jax_default_matmul_precision": "default" if precision is None else str(precision),
    }


def autograd_about(backend: Any) -> About:
    """HIPS autograd over NumPy: both versions matter (NumPy does the arithmetic)."""
    import numpy

    return {"library": "autograd", "version": distribution_version("autograd"),
            "device": "cpu", "numpy": numpy.__version__}


def cmd_about(backend: Any) -> About:
    """A ``cmd:`` engine: what its hello said of itself (its ``version``, and the settings of
    its ``about``, ``library`` among them), then its command line, the name its hello gave
    and the protocol version. An engine that says nothing is library ``cmd``, version
    ``unknown``; what the engine says never hides the command that ran it."""
    import shlex

    told = dict(getattr(backend, "told", {}))
    return {**told, "library": told.get("library") or "cmd",
            "version": getattr(backend, "version", None) or UNKNOWN,
            "device": str(backend.capabilities.device),
            "command": shlex.join(backend.argv), "engine_name": str(backend.name),
            "protocol": str(FORMAT_VERSION)}


_DESCRIBERS: tuple[tuple[str, str, Callable[[Any], About]], ...] = (
    ("resverify.impl.numpy_backend", "NumpyBackend", numpy_about),
    ("resverify.impl.torch_backend", "TorchBackend", torch_about),
    ("resverify.impl.functional_backends", "JaxBackend", jax_about),
    ("resverify.impl.functional_backends", "AutogradBackend", autograd_about),
    ("resverify.impl.external", "ExternalBackend", cmd_about),
)
"""(module, class, describer): the built-in adapters, recognised only once imported."""
