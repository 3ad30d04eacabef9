"""resverify's numeric reference implementation and backend adapters.

The ops themselves are defined in :mod:`resverify.spec.ops` (one entry per op, its
reference NumPy rule included); here they are run on Tensors and in array libraries.

Public API: :class:`Tensor` (a value with reverse-mode ``backward(seed)``), the ops in
:mod:`resverify.impl.ops` (``apply_op`` for any op, and ``add``, ``residual_add``, ``mul``,
``scale``, ``linear``, ``relu``, ``tanh``, ``sum_all``), the :class:`Backend` protocol
with :class:`Capabilities`, the reference :class:`NumpyBackend`, and
:func:`resolve_backend` for names given by users.
"""

from resverify.impl.backend import Backend, Capabilities
from resverify.impl.numpy_backend import NumpyBackend
from resverify.impl.registry import resolve_backend
from resverify.impl.tensor import Tensor

__all__ = ["Backend", "Capabilities", "NumpyBackend", "Tensor", "resolve_backend"]
