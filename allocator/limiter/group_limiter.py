"""A broker's limiter for its groups: one token bucket per group and quota dimension, and the fluid model of a
round's traffic through them (PIP-322: a message passes only while every dimension's bucket allows it)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from allocator.limiter.bucket_array import TokenBucketArray


class Admitted(NamedTuple):
    """One round through the buckets: rates per second [G, D] (messages, or bytes in a bytes dimension)."""

    offered: np.ndarray  # what the producers offered
    admitted: np.ndarray  # what the buckets let through
    throttled_s: np.ndarray  # [G]: the time within the round the group's producers spent throttled


class GroupLimiter:
    """`[G, D]` buckets; `bytes_dimension[D]` says which dimensions count bytes (the others count messages)."""

    def __init__(self, n_groups: int, bytes_dimension: np.ndarray) -> None:
        self.bytes_dimension = np.asarray(bytes_dimension, dtype=bool)
        unlimited = np.full(n_groups, np.inf)
        self._buckets = [TokenBucketArray(unlimited, capacity=unlimited) for _ in self.bytes_dimension]
        self._interval_s = 0.0  # the allocation interval (`set_limits`): the least time a bucket holds tokens for

    def admit(self, demand_msgs_per_s: np.ndarray, msg_bytes: np.ndarray, dt_s: float, now_s: float) -> Admitted:
        """Over `dt_s` the producers offer `demand * dt` messages; a message needs tokens in every dimension's bucket
        (1, or its size in bytes), so the most stringent dimension decides what is admitted.

        The fluid model admits `dt_s` of traffic at once, so each bucket holds `dt_s` of tokens, one interval at
        least: a round that comes late (a realtime timer's lag) does not lose to the cap the tokens its producers,
        sending all along, would have spent as they came. A saturated group is admitted at its limit, never above.
        """
        cost = np.where(self.bytes_dimension[None, :], np.asarray(msg_bytes, dtype=np.float64)[:, None], 1.0)
        now_ns, dt_ns = int(now_s * 1e9), int(dt_s * 1e9)
        held_s = max(self._interval_s, dt_s)
        for bucket in self._buckets:  # as of the round's start, the buckets' last update (`set_limits`): no refill
            bucket.hold_for(held_s, now_ns - dt_ns)
        tokens = np.stack([bucket.available(now_ns) for bucket in self._buckets], axis=1)
        admitted_msgs = np.minimum(demand_msgs_per_s * dt_s, (tokens / cost).min(axis=1))
        for index, bucket in enumerate(self._buckets):
            bucket.consume(admitted_msgs * cost[:, index], now_ns)
        offered = demand_msgs_per_s * dt_s
        throttled_fraction = np.where(demand_msgs_per_s > 0, 1.0 - admitted_msgs / np.maximum(offered, 1e-300), 0.0)
        return Admitted(
            offered=demand_msgs_per_s[:, None] * cost,
            admitted=admitted_msgs[:, None] * cost / dt_s,
            throttled_s=np.clip(throttled_fraction, 0.0, 1.0) * dt_s,
        )

    def set_limits(self, limit: np.ndarray, now_s: float, interval_s: float) -> None:
        """The rates `limit [G, D]` (`np.inf`: unlimited), each bucket holding one interval of tokens: the fluid
        model admits a round's traffic at once."""
        self._interval_s = interval_s
        now_ns = int(now_s * 1e9)
        for index, bucket in enumerate(self._buckets):
            bucket.set_rate(limit[:, index], now_ns, capacity=limit[:, index] * interval_s)
