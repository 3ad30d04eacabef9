"""Building a library's block in a dtype when its constructors take no ``dtype=``.

Why not build in float32 and cast: a constant the constructor writes (a LayerScale's
``init_value``, a gate's 0) is then rounded to float32 first, and ``1e-2`` cast from float32
to float64 is not ``1e-2``, so the law that reads γ as constructed would judge the cast, not
the library. Under torch's default dtype set to the dtype checked, ``nn.init.constant_`` and
``torch.ones`` fill the parameters in that dtype directly, as a user building the block in
that dtype gets them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = []

T = TypeVar("T")


def built_in(dtype: torch.dtype, build: Callable[[], T]) -> T:
    """``build()`` under torch's default dtype ``dtype``, restored afterwards."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return build()
    finally:
        torch.set_default_dtype(before)
