"""Max-min fair water-filling, vectorised over groups.

Shared by the `fair-share` and `doorman-fair` policies and by the report's fair reference `F_b`.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from allocator.policies.rows import row_any
from allocator.policies.scratch import scratch

NETWORK_MAX_BROKERS = 8  # up to here a sorting network beats np.sort (~3 times at 5 brokers); beyond, np.sort


def max_min_fair(capacity: np.ndarray, wants: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """Split each group's `capacity[G]` over its brokers' `wants[G, B]`, max-min fairly.

    Every broker gets `min(want, level)`, where the water level is the one that hands out the whole capacity,
    or everything wanted when the wants add up to less. Absent brokers (`present` False) want nothing; a negative
    want is 0. An infinite capacity is unlimited: everyone gets what it wants. Each group's split is its own: the
    groups of a subset split as they do among all.
    """
    capacity = np.asarray(capacity, dtype=np.float64)
    wants = _clipped_at_zero(np.asarray(wants, dtype=np.float64))
    if present is not None:
        wants = np.where(present, wants, 0.0)
    level = water_level(capacity, wants.T)  # the sort copies the rows it reads: no contiguous copy first
    return np.minimum(wants, level[:, None])


def _clipped_at_zero(values: np.ndarray) -> np.ndarray:
    """`np.clip(values, 0.0, None)` (which makes -0.0 0.0 too), without its copy where no value needs it: the
    usual wants, all positive (one pass that reads them, instead of one that writes a copy)."""
    lowest = values.min(initial=np.inf)
    if lowest > 0.0 or (lowest == 0.0 and not np.signbit(values).any()):
        return values
    return np.clip(values, 0.0, None)


class MaxMinFairMemo:
    """`max_min_fair(capacity, wants)` as of the last call, kept: the next call splits again only the groups whose
    capacity or wants changed since, bit for bit (a group's split is its own, so the others' are the same bits),
    or every group when more than `MOST_CHANGED` of them did (a start, a new pool: one split of all, no gather).
    A steady broker's view moves in a few groups a round, the ones a report moved: at PIP-82's size 0.2-0.5% of
    them, ~6% in a forced report's round. Holds a copy of the wants and the split: 2 [G, B] arrays."""

    MOST_CHANGED = 0.25

    def __init__(self) -> None:
        self._capacity = np.zeros(0)
        self._wants = np.zeros((0, 0))
        self._split = np.zeros((0, 0))

    def split(self, capacity: np.ndarray, wants: np.ndarray) -> np.ndarray:
        """[G, B] `max_min_fair(capacity, wants)`: the memo's own array, valid until the next call (read it only)."""
        capacity = np.asarray(capacity, dtype=np.float64)
        wants = np.asarray(wants, dtype=np.float64)
        if wants.shape != self._wants.shape:
            return self._remember(capacity, wants)
        changed = row_any(wants.view(np.int64) != self._wants.view(np.int64))
        changed |= capacity.view(np.int64) != self._capacity.view(np.int64)
        rows = np.flatnonzero(changed)
        if len(rows) > self.MOST_CHANGED * len(changed):
            return self._remember(capacity, wants)
        if len(rows):
            self._split[rows] = max_min_fair(capacity[rows], wants[rows])
            self._wants[rows] = wants[rows]
            self._capacity[rows] = capacity[rows]
        return self._split

    def _remember(self, capacity: np.ndarray, wants: np.ndarray) -> np.ndarray:
        self._split = max_min_fair(capacity, wants)
        self._wants = wants.copy()
        self._capacity = capacity.copy()
        return self._split


def water_level(capacity: np.ndarray, wants: np.ndarray) -> np.ndarray:
    """[g] the max-min fair level of each group (at least 0; +inf when everything wanted fits).

    `capacity [g]` non-negative or +inf, `wants [B, g]` non-negative, broker-major. With the wants in ascending
    order `w_0 <= ... <= w_{B-1}`, the candidate level at position i hands out what the i lower wants take and
    splits the rest equally among the others, `(capacity - w_0 - ... - w_{i-1}) / (B - i)`; the level is the
    candidate at the first position whose want reaches it (from there on, everybody wants more than it).
    """
    n_brokers, n_groups = wants.shape
    ascending = _ascending(wants)
    # row i: the running sum of the wants below position i (never a huge want taken back out: that would lose the
    # small ones' precision), then the candidate level there; row B: +inf, where no position is saturated
    candidate_level = scratch("water_level.candidate", (n_brokers + 1, n_groups))
    candidate_level[0] = 0.0
    for i in range(1, n_brokers):
        np.add(candidate_level[i - 1], ascending[i - 1], out=candidate_level[i])
    np.subtract(capacity, candidate_level[:n_brokers], out=candidate_level[:n_brokers])
    candidate_level[n_brokers] = np.inf
    # reached[i]: some position up to i is saturated; the first saturated position is B minus the number of those
    # rows (np.where per position branches on every entry, ~3 times slower)
    reached = scratch("water_level.reached", wants.shape, bool)
    with np.errstate(invalid="ignore"):  # inf - inf where the capacity is unlimited
        candidate_level[:n_brokers] /= np.arange(n_brokers, 0, -1, dtype=np.float64)[:, None]  # the remaining slots
        for i in range(n_brokers):
            np.greater_equal(ascending[i], candidate_level[i], out=reached[i])
            if i:
                reached[i] |= reached[i - 1]
    at_level = scratch("water_level.at", (n_groups,), np.intp)
    if n_brokers <= 255:  # counted in bytes (a cast inside the reduction costs ~4 times more)
        n_reached = scratch("water_level.n_reached", (n_groups,), np.uint8)
        np.copyto(at_level, np.add.reduce(reached.view(np.uint8), axis=0, out=n_reached))
    else:
        np.add.reduce(reached, axis=0, dtype=np.intp, out=at_level)
    at_level *= -n_groups
    at_level += np.arange(n_brokers * n_groups, (n_brokers + 1) * n_groups)  # flat index of row B - n_reached, column j
    level = np.take(candidate_level, at_level, mode="clip")  # the indices are in range: no buffered bounds check
    return np.maximum(level, 0.0, out=level)


def _ascending(wants: np.ndarray) -> list[np.ndarray]:
    """The B rows [g] of `wants` sorted along brokers: np.sort runs a small sort per group, a sorting network runs
    its comparators (np.minimum / np.maximum of two rows) once over all groups. A comparator writes the smaller
    value to a spare row, which then takes the place of row i (the rows are `scratch`, one more than B)."""
    n_brokers = len(wants)
    if n_brokers > NETWORK_MAX_BROKERS:
        return list(np.sort(wants, axis=0))
    rows = scratch("water_level.ascending", (n_brokers + 1, *wants.shape[1:]))
    np.copyto(rows[:n_brokers], wants)
    ascending, spare = list(rows[:n_brokers]), rows[n_brokers]
    for i, j in sorting_network(n_brokers):
        np.minimum(ascending[i], ascending[j], out=spare)
        np.maximum(ascending[i], ascending[j], out=ascending[j])
        ascending[i], spare = spare, ascending[i]
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
