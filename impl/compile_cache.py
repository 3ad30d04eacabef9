"""A small LRU cache of compiled functions, shared by every adapter that compiles.

Compiling a program (torch inductor, XLA, PyTensor's Numba backend) costs from tens of
milliseconds to seconds, running it microseconds; the property suite runs many examples
of one program structure, so each compiling adapter keeps its compiled functions by a key
of its choice (the program and the dtype, say) and ``compiles`` counts how often it had to
compile, which the tests and the timing notes read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

F = TypeVar("F")

CACHE_SIZE = 512
"""Compiled programs kept per backend (least recently used dropped first)."""


class CompiledCache(Generic[F]):
    """At most ``size`` compiled functions by key; ``compiles`` counts the misses."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.compiles = 0
        self._entries: OrderedDict[Hashable, F] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], F]) -> F:
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        self.compiles += 1
        entry = self._entries[key] = build()
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return entry
