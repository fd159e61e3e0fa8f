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
    call in this thread (grown when a larger one is asked for). The array of the last shape asked for is kept
    too: asked for again, it is handed out as it is (a step asks for a few dozen, ~1 us each otherwise)."""
    try:
        held = _LOCAL.held
    except AttributeError:
        held = _LOCAL.held = {}
    buffer, array = held.get((name, dtype), (None, None))
    if array is not None and array.shape == shape:
        return array
    size = math.prod(shape)
    if buffer is None or buffer.size < size:
        buffer = np.empty(size, dtype)
    array = buffer[:size].reshape(shape)
    held[(name, dtype)] = (buffer, array)
    return array
