"""Handing the heap's free pages back to the operating system after each telemetry batch.

A run that falls behind for a moment (a stalled host, a burst of overdue realtime ticks) builds up telemetry
rows and reports faster than it writes them; once they are written the memory is free again, but glibc keeps
the freed pages of its arenas, so the process's RSS stays at the burst's peak for the rest of the run. A long
realtime run would then look like it leaks a step at every stall. `malloc_trim(0)` returns those pages
(measured: 5 minutes of 16 brokers at 0.1 s with two 5 s stalls ended at 283 MB without it, 173 MB with it,
the Python objects alive being the same). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


_MALLOC_TRIM = _malloc_trim()


def release_free_heap() -> bool:
    """Give the free pages of every malloc arena back to the system; True if the C library could."""
    return _MALLOC_TRIM is not None and bool(_MALLOC_TRIM(0))
