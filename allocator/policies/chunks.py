"""One broker's validated view of the usage table, a chunk of groups at a time, and the post-processing shared
by every policy.

The policies compute on chunks of at most `CHUNK_ENTRIES` entries laid out broker-major, `[B, g]` (row b is
broker b over the g groups of the chunk): per-group values ([g]) broadcast along contiguous rows, and a sum over
brokers adds B rows; in the group-major layout both run an inner loop over 5 entries and are ~5 times slower.
A chunk's [B, g] temporaries that no caller keeps (the view's own arrays, a rule's intermediate steps and
result) are `allocator.policies.scratch` arrays, allocated once per thread: a chunk is as large as keeps those few MB
bounded, since every chunk costs its numpy calls again (~100 of them, ~1 us each), and 5,000 groups x 5
brokers is one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from allocator.policies.scratch import scratch
from allocator.policies.settings import Shaping

CHUNK_ENTRIES = 32768  # a float64 temporary of a chunk is at most 256 KB


@dataclass(frozen=True)
class Inputs:
    """The arrays of one call, shapes and dtypes checked, group-major as given: `quota [G]` (0 where
    unlimited), `unlimited [G]` and `usage`, `limit`, `demand` (or None), `present [G, B]`; values are
    checked a chunk at a time by `make_chunk`."""

    quota: np.ndarray
    unlimited: np.ndarray
    usage: np.ndarray
    limit: np.ndarray
    demand: np.ndarray | None
    present: np.ndarray


@dataclass(frozen=True)
class RuleChunk:
    """The arrays a rule reads for a chunk of g groups, checked and masked, broker-major: absent entries hold 0
    in `usage` and `demand`. The [B, g] arrays (and `n_present` when everyone is present) are `scratch`: valid
    until the next `make_chunk` in this thread.

    `quota` is 0 for unlimited groups so that rules compute quietly; `finish` gives those groups `np.inf`.
    `limited` says where a present broker's own limit is a finite number (an infinite limit is an unlimited
    one, so it neither throttles nor anchors smoothing and `max_step`);
    `limit` holds 0 everywhere else, so the arithmetic on it stays finite.
    """

    quota: np.ndarray  # [g]
    unlimited: np.ndarray  # [g] bool
    usage: np.ndarray  # [B, g]
    limit: np.ndarray  # [B, g], row b is broker b's own limit
    demand: np.ndarray | None  # [B, g]
    present: np.ndarray  # [B, g] bool
    limited: np.ndarray  # [B, g] bool, False where absent
    n_present: np.ndarray  # [g], a count held as float64
    total_usage: np.ndarray  # [g], the usages added broker by broker
    everyone_present: bool = False  # every broker of the chunk is present: masking by `present` changes nothing
    everyone_limited: bool = False  # ... and every limit is a number: masking by `limited` changes nothing

    @property
    def shape(self) -> tuple[int, int]:
        """(B, g): the shape of the chunk's broker-major arrays."""
        return self.usage.shape

    @property
    def residual(self) -> np.ndarray:
        """[g] quota left over after everyone's usage (negative over quota)."""
        return self.quota - self.total_usage

    @property
    def equal_share(self) -> np.ndarray:
        """[g] quota / n_present (the whole quota when nobody is present)."""
        return self.quota / np.maximum(self.n_present, 1.0)

    def throttled(self, tolerance: float) -> np.ndarray:
        """[B, g] (`scratch`) a present broker using its own limit up to `tolerance` is taken as throttled."""
        shape = self.shape
        held_at = np.multiply(self.limit, 1.0 - tolerance, out=scratch("throttled.held_at", shape))
        throttled = np.greater_equal(self.usage, held_at, out=scratch("throttled", shape, bool))
        if not self.everyone_limited:
            throttled &= self.limited
        return throttled


def checked_inputs(
    quota: np.ndarray,
    usage: np.ndarray,
    limit: np.ndarray,
    demand: np.ndarray | None,
    present: np.ndarray | None,
) -> Inputs:
    """Check shapes (ValueError naming the array and the problem) and the quota; no pass over the matrices."""
    quota, unlimited = checked_quota(quota)
    usage = np.asarray(usage, dtype=np.float64)
    if usage.ndim != 2 or usage.shape[0] != len(quota):
        raise ValueError(f"usage: expected shape (G, B) with G = {len(quota)}, got {usage.shape}")
    limit = _matrix("limit", np.asarray(limit, dtype=np.float64), usage.shape)
    present = np.ones(usage.shape, dtype=bool) if present is None else _matrix("present", present, usage.shape)
    if demand is not None:
        demand = _matrix("demand", np.asarray(demand, dtype=np.float64), usage.shape)
    return Inputs(
        quota=np.where(unlimited, 0.0, quota) if unlimited.any() else np.ascontiguousarray(quota),
        unlimited=unlimited,
        usage=usage,
        limit=limit,
        demand=demand,
        present=present.astype(bool, copy=False),
    )


def row_chunks(n_groups: int, n_brokers: int) -> Iterator[slice]:
    """Consecutive slices of groups, of equal size up to one, with at most `CHUNK_ENTRIES` entries each."""
    n_chunks = max(1, -(-n_groups * n_brokers // CHUNK_ENTRIES))
    size = max(1, -(-n_groups // n_chunks))
    return (slice(start, start + size) for start in range(0, n_groups, size))


def make_chunk(inputs: Inputs, rows: slice) -> RuleChunk:
    """The view of groups `rows`, broker-major; ValueError names the array and the first bad value.

    Usage and demand must be finite and non-negative for present brokers, a present broker's limit not NaN.
    The chunks are checked in order, so of several bad values the first in row order is named. The checks
    are reductions (a minimum and a maximum) wherever every value passes: the masks are built only if not.
    """
    shape = inputs.usage[rows].T.shape
    everyone = bool(np.logical_and.reduce(inputs.present[rows], axis=None))
    present = scratch("view.present", shape, bool)
    if everyone:
        present.fill(True)
    else:
        np.copyto(present, inputs.present[rows].T)
    usage = _rates("usage", inputs.usage[rows], present, everyone)
    demand = None if inputs.demand is None else _rates("demand", inputs.demand[rows], present, everyone)
    limit = _transposed("view.limit", inputs.limit[rows], np.float64)
    limited = scratch("view.limited", shape, bool)
    every_limit_a_number = _all_within(limit, 0.0, np.inf)
    if every_limit_a_number:  # the present brokers' are limited
        np.copyto(limited, present)
    else:
        if (present & ~(limit >= 0.0)).any():  # NaN fails too
            raise ValueError("limit: must be >= 0 (np.inf: unlimited) for a present broker")
        np.greater_equal(limit, 0.0, out=limited)
        limited &= np.less(limit, np.inf, out=scratch("view.finite", shape, bool))
        limited &= present
    everyone_limited = everyone and every_limit_a_number  # else some entry is absent or has no number as its limit
    if not everyone_limited:
        np.copyto(limit, 0.0, where=~limited)
    if everyone:
        n_present = scratch("view.n_present", shape[1:])
        n_present.fill(len(present))
    else:
        n_present = broker_sum(present)
    return RuleChunk(
        quota=inputs.quota[rows],
        unlimited=inputs.unlimited[rows],
        usage=usage,
        limit=limit,
        demand=demand,
        present=present,
        limited=limited,
        n_present=n_present,
        total_usage=broker_sum(usage),
        everyone_present=everyone,
        everyone_limited=everyone_limited,
    )


def broker_sum(values: np.ndarray) -> np.ndarray:
    """[g] the sum over brokers of `values [B, g]` as float64, added row by row: the same rounding whatever the
    chunk's shape (numpy sums a [B, 1] array pairwise)."""
    if not len(values):
        return np.zeros(values.shape[1])
    total = np.add(values[0], 0.0, dtype=np.float64)  # the first row added to 0, without an array of zeros
    for row in values[1:]:
        total += row
    return total


def checked_quota(quota: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[G] quotas as float64 and [G] whether each is unlimited (`np.inf`, the one way to say it); ValueError for
    a negative or NaN quota or a bad shape."""
    quota = np.asarray(quota, dtype=np.float64)
    if quota.ndim != 1:
        raise ValueError(f"quota: expected shape (G,), got {quota.shape}")
    if _all_within(quota, 0.0, np.inf):  # no mask to build
        return quota, np.zeros(quota.shape, dtype=bool)
    if not (quota >= 0).all():  # NaN fails too
        raise ValueError("quota: must be >= 0, or np.inf for unlimited")
    return quota, quota == np.inf


def _matrix(name: str, values: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} like usage, got {values.shape}")
    return values


def _transposed(name: str, values: np.ndarray, dtype: type) -> np.ndarray:
    """`values [g, B]` as a broker-major `scratch` array [B, g]."""
    transposed = scratch(name, values.T.shape, dtype)
    np.copyto(transposed, values.T)
    return transposed


def _rates(name: str, values: np.ndarray, present: np.ndarray, everyone: bool) -> np.ndarray:
    """Per-second rates [B, g] of `values [g, B]`: finite and non-negative where the broker is present; absent
    entries read as 0. (No mask at all when `everyone` is present; a masked `np.copyto` costs ~5 ns an entry.)"""
    rates = _transposed(f"view.{name}", values, np.float64)
    if not everyone:
        np.copyto(rates, 0.0, where=~present)
    if not _all_within(rates, 0.0, np.inf):
        wrong = rates.T[~((rates.T >= 0) & (np.inf > rates.T))][0]  # the first in row order
        raise ValueError(f"{name}: must be finite and non-negative for present brokers, got {wrong}")
    return rates


def _all_within(values: np.ndarray, low: float, above: float) -> bool:
    """Whether every value is in [low, above) (a NaN is not): two reductions, no temporary."""
    return values.size == 0 or bool(
        np.minimum.reduce(values, axis=None) >= low and np.maximum.reduce(values, axis=None) < above
    )


def finish(new_limit: np.ndarray, chunk: RuleChunk, shaping: Shaping, out: np.ndarray) -> None:
    """The post-processing every policy shares, on a rule's result `new_limit [B, g]` (in place), into `out`.

    In order: `smoothing` (EWMA with the own previous limit), `max_step` (bound the change against it),
    `min_share` (floor at that fraction of the equal share); then limits are clamped to [0, quota] (a limit
    never exceeds the group's quota, whatever one broker reports: the project's safety rule, applied here
    once for every policy), absent entries get 0 and present brokers of unlimited groups `np.inf`. Smoothing
    and `max_step` act only where the previous own limit was a number (not unlimited).
    """
    own, anchored = chunk.limit, chunk.limited
    if shaping.smoothing:
        np.multiply(new_limit, 1.0 - shaping.smoothing, out=new_limit, where=anchored)
        np.add(new_limit, shaping.smoothing * own, out=new_limit, where=anchored)
    if shaping.max_step is not None:
        largest_change = shaping.max_step * chunk.quota
        np.minimum(new_limit, own + largest_change, out=new_limit, where=anchored)
        np.maximum(new_limit, own - largest_change, out=new_limit, where=anchored)
    if shaping.min_share:
        np.maximum(new_limit, shaping.min_share * chunk.equal_share, out=new_limit)
    if new_limit.size and np.minimum.reduce(new_limit, axis=None) < 0.0:  # most rules give none: a reduction
        np.maximum(new_limit, 0.0, out=new_limit)
    if chunk.everyone_present:
        np.minimum(new_limit, chunk.quota, out=out)  # 0 for unlimited groups, made infinite below
    else:
        np.minimum(new_limit, chunk.quota, out=new_limit)
        np.multiply(new_limit, chunk.present, out=out)  # rules are finite everywhere, so absent entries become 0
    if chunk.unlimited.any():
        np.copyto(out, np.inf, where=chunk.present & chunk.unlimited)
