"""Max-min fair water-filling, vectorised over groups.

Shared by the `fair-share` and `doorman-fair` policies and by the report's fair reference `F_b`.
"""

from __future__ import annotations

import numpy as np


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
    n_brokers = wants.shape[1]
    sorted_wants = np.sort(wants, axis=1)
    handed_below = np.cumsum(sorted_wants, axis=1) - sorted_wants  # sum of the wants before position i
    remaining_slots = n_brokers - np.arange(n_brokers)
    finite_capacity = np.where(capacity < 0, np.inf, capacity)
    with np.errstate(invalid="ignore"):
        candidate_level = (finite_capacity[:, None] - handed_below) / remaining_slots
    saturated = sorted_wants >= candidate_level  # from here on, everybody wants more than the level
    first_saturated = np.argmax(saturated, axis=1)
    any_saturated = saturated.any(axis=1)
    level = np.where(any_saturated, candidate_level[np.arange(len(capacity)), first_saturated], np.inf)
    return np.minimum(wants, np.clip(level, 0.0, None)[:, None])
