"""Max-min fair water-filling, vectorised over groups.

Shared by the `fair-share` and `doorman-fair` policies and by the report's fair reference `F_b`.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from allocator.scratch import scratch

NETWORK_MAX_BROKERS = 8  # up to here a sorting network beats np.sort (~3 times at 5 brokers); beyond, np.sort


def max_min_fair(capacity: np.ndarray, wants: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """Split each group's `capacity[G]` over its brokers' `wants[G, B]`, max-min fairly.

    Every broker gets `min(want, level)`, where the water level is the one that hands out the whole capacity,
    or everything wanted when the wants add up to less. Absent brokers (`present` False) want nothing.
    A negative or infinite capacity is unlimited: everyone gets what it wants.
    """
    capacity = np.asarray(capacity, dtype=np.float64)
    wants = np.clip(np.asarray(wants, dtype=np.float64), 0.0, None)
    if present is not None:
        wants = np.where(present, wants, 0.0)
    level = water_level(np.where(capacity < 0, np.inf, capacity), np.ascontiguousarray(wants.T))
    return np.minimum(wants, level[:, None])


def water_level(capacity: np.ndarray, wants: np.ndarray) -> np.ndarray:
    """[g] the max-min fair level of each group (at least 0; +inf when everything wanted fits).

    `capacity [g]` non-negative or +inf, `wants [B, g]` non-negative, broker-major. With the wants in ascending
    order `w_0 <= ... <= w_{B-1}`, the candidate level at position i hands out what the i lower wants take and
    splits the rest equally among the others, `(capacity - w_0 - ... - w_{i-1}) / (B - i)`; the level is the
    candidate at the first position whose want reaches it (from there on, everybody wants more than it).
    """
    n_brokers, n_groups = wants.shape
    ascending = _ascending(wants)
    handed_below = scratch("water_level.candidate", wants.shape)  # the running sum of the wants below (never a
    handed_below[0] = 0.0  # huge want taken back out: that would lose the small ones' precision)
    for i in range(1, n_brokers):
        np.add(handed_below[i - 1], ascending[i - 1], out=handed_below[i])
    candidate_level = np.subtract(capacity, handed_below, out=handed_below)
    saturated = scratch("water_level.saturated", wants.shape, bool)
    with np.errstate(invalid="ignore"):  # inf - inf where the capacity is unlimited
        candidate_level /= np.arange(n_brokers, 0, -1, dtype=np.float64)[:, None]  # the remaining slots
        np.greater_equal(ascending, candidate_level, out=saturated)
    level = np.full(n_groups, np.inf)
    for i in reversed(range(n_brokers)):  # the first saturated position is chosen last
        level = np.where(saturated[i], candidate_level[i], level)  # a masked np.copyto costs ~3 times more
    return np.maximum(level, 0.0, out=level)


def _ascending(wants: np.ndarray) -> np.ndarray:
    """[B, g] the wants sorted along brokers: np.sort runs a small sort per group, a sorting network runs its
    comparators (np.minimum / np.maximum of two rows) once over all groups."""
    n_brokers = len(wants)
    if n_brokers > NETWORK_MAX_BROKERS:
        return np.sort(wants, axis=0)
    ascending = scratch("water_level.ascending", wants.shape)
    np.copyto(ascending, wants)
    smaller = scratch("water_level.smaller", wants.shape[1:])
    for i, j in sorting_network(n_brokers):
        np.minimum(ascending[i], ascending[j], out=smaller)
        np.maximum(ascending[i], ascending[j], out=ascending[j])
        ascending[i] = smaller
    return ascending


@cache
def sorting_network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for n entries: comparators (i, j), i < j, each putting the smaller value at i.

    Built for the next power of two with the entries beyond n taken as +inf; a comparator touching one of those
    never moves anything, so it is left out (19 comparators for 8 entries, 9 for 5).
    """
    comparators = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        comparators.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(comparators)
