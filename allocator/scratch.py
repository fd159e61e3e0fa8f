"""Scratch arrays for the temporaries of the vectorised allocation, kept from call to call in each thread.

Why: a broker's allocation builds a few dozen [B, G] temporaries (200 KB each at 5,000 groups x 5 brokers).
Allocated afresh, each one above glibc's initial 128 KB mmap threshold is a new mapping, page-faulted in and
unmapped again, and freeing smaller ones leaves more than the 128 KB trim threshold free at the top of the heap,
which glibc gives back to the system and the next call faults in again: in a new process that costs more than
the arithmetic. A scratch array is allocated once and reused, so its pages stay mapped and in cache.

The rule: `scratch(name, shape)` hands out the same memory every time it is asked for `name` (in one thread),
so an array from it is valid until the next request of that name; a function uses its own names, and what it
returns from scratch its caller must use before calling it again.
"""

from __future__ import annotations

import math
import threading

import numpy as np

_LOCAL = threading.local()  # per thread: two brokers allocating at once in one process never share a buffer


def scratch(name: str, shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array of `shape` and `dtype` for the temporary `name`, reused from call to
    call in this thread (grown when a larger one is asked for)."""
    buffers = _LOCAL.__dict__.setdefault("buffers", {})
    size = math.prod(shape)
    buffer = buffers.get((name, dtype))
    if buffer is None or buffer.size < size:
        buffer = buffers[(name, dtype)] = np.empty(size, dtype)
    return buffer[:size].reshape(shape)
