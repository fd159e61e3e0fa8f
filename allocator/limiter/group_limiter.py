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
    """`[G, D]` buckets; `bytes_dimension[D]` says which dimensions count bytes (the others count messages).

    The buckets are one `TokenBucketArray` of `G * D`, in the layout of a `[G, D]` array (group g's are `[g * D, (g +
    1) * D)`): a round updates every bucket at once, and the rates and the traffic go in and out as they are."""

    def __init__(self, n_groups: int, bytes_dimension: np.ndarray) -> None:
        bytes_dimension = np.asarray(bytes_dimension, dtype=bool)
        self._shape = (n_groups, len(bytes_dimension))
        self._bytes_dimensions = np.flatnonzero(bytes_dimension).tolist()  # their indices
        unlimited = np.full(n_groups * len(bytes_dimension), np.inf)
        self._buckets = TokenBucketArray(unlimited, capacity=unlimited)
        self._interval_s = 0.0  # the allocation interval (`set_limits`): the least time a bucket holds tokens for

    def admit(self, demand_msgs_per_s: np.ndarray, msg_bytes: np.ndarray, dt_s: float, now_s: float) -> Admitted:
        """Over `dt_s` the producers offer `demand * dt` messages; a message needs tokens in every dimension's bucket
        (1, or its size in bytes), so the most stringent dimension decides what is admitted.

        The fluid model admits `dt_s` of traffic at once, so each bucket holds `dt_s` of tokens, one interval at
        least: a round that comes late (a realtime timer's lag) does not lose to the cap the tokens its producers,
        sending all along, would have spent as they came. A saturated group is admitted at its limit, never above.
        """
        msg_bytes = np.asarray(msg_bytes, dtype=np.float64)
        n_dimensions = self._shape[1]
        bytes_dimensions = self._bytes_dimensions
        now_ns, dt_ns = int(now_s * 1e9), int(dt_s * 1e9)
        # as of the round's start, the buckets' last update (`set_limits`): no refill
        self._buckets.hold_for(max(self._interval_s, dt_s), now_ns - dt_ns)
        messages = self._buckets.available(now_ns).reshape(self._shape)  # a new array: the tokens, then messages
        for dimension in bytes_dimensions:  # a message costs one token, or its size in bytes
            np.divide(messages[:, dimension], msg_bytes, out=messages[:, dimension])
        allowed = messages[:, 0].copy()  # the fewest messages any dimension allows, the dimensions in order
        for dimension in range(1, n_dimensions):
            np.minimum(allowed, messages[:, dimension], out=allowed)
        offered_msgs = demand_msgs_per_s * dt_s
        admitted_msgs = np.minimum(offered_msgs, allowed)
        spent = _per_dimension(admitted_msgs, msg_bytes, bytes_dimensions, n_dimensions)  # the tokens they take
        self._buckets.consume(spent.reshape(-1), now_ns)
        np.divide(spent, dt_s, out=spent)
        throttled_s = np.maximum(offered_msgs, 1e-300)  # the share of the round held, 1 - admitted / offered, then s
        np.divide(admitted_msgs, throttled_s, out=throttled_s)
        np.subtract(1.0, throttled_s, out=throttled_s)
        np.copyto(throttled_s, 0.0, where=~(demand_msgs_per_s > 0))
        np.clip(throttled_s, 0.0, 1.0, out=throttled_s)
        np.multiply(throttled_s, dt_s, out=throttled_s)
        offered = _per_dimension(demand_msgs_per_s, msg_bytes, bytes_dimensions, n_dimensions)
        return Admitted(offered=offered, admitted=spent, throttled_s=throttled_s)

    def set_limits(self, limit: np.ndarray, now_s: float, interval_s: float) -> None:
        """The rates `limit [G, D]` (`np.inf`: unlimited), each bucket holding one interval of tokens: the fluid
        model admits a round's traffic at once."""
        self._interval_s = interval_s
        rates = limit.reshape(-1)
        self._buckets.set_rate(rates, int(now_s * 1e9), capacity=rates * interval_s)


def _per_dimension(
    messages: np.ndarray, msg_bytes: np.ndarray, bytes_dimensions: list[int], n_dimensions: int
) -> np.ndarray:
    """[G, D] `messages [G]` in each dimension's unit: as they are, or times their size in bytes."""
    amounts = np.repeat(messages, n_dimensions).reshape(len(messages), n_dimensions)
    for dimension in bytes_dimensions:
        amounts[:, dimension] *= msg_bytes
    return amounts
