"""Quota telemetry of one broker (in the spirit of PIP-323): how close each group is to its limits, how long
it has been over quota, how often and why it was throttled, and how fresh the peers' reports are.

`QuotaTracker` keeps what spans rounds (whether each reason throttled a group last round, since when a group
has been over quota) and turns one round of a `BrokerNode` into `QuotaRound` arrays. Every time it sees is the
run's time or the broker's own clock, passed in: lockstep runs with the same seed give identical values on
every backend. (The one wall-clock measurement, the allocate phase's duration, is taken by the host and
written to the `timings` table, which is not compared.)

Throttling is kept per reason, by name, so another mechanism adds its own reason without a new column. The
runtime knows `group_limit`, the group's local limit (its token bucket) held the group's aggregate traffic;
and on a broker with producers, the producer model's reasons (`allocator.producers.simulator.REASONS`: topic quota,
resource-group quota, connection pending messages, buffer size, broker quota).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.node.broker_node import BrokerNode

GROUP_LIMIT = "group_limit"  # throttled by the group's local limit on this broker (its token bucket)
OVER_QUOTA_TOLERANCE = 1e-9  # relative: a sum of limits equal to the quota is not a breach by rounding
# With float32 rates on the wire (`reporting.float32_rates`) each peer's usage in view is rounded by up to 2**-24 of
# it, and so is their sum: a group at its quota read back over it by that much is at its quota, not a breach
FLOAT32_OVER_QUOTA_TOLERANCE = 2.0**-23


@dataclass(frozen=True)
class Throttling:
    """One reason's throttling of each group this round."""

    # int32[G]: 1 where the reason began throttling the group this round (0 last round), so only where throttled_s > 0
    events: np.ndarray
    throttled_s: np.ndarray  # [G]: seconds of the round the reason held the group's producers


@dataclass(frozen=True)
class QuotaRound:
    """One round of a broker's quota telemetry; [G, D] per group and dimension, [G] per group."""

    usage_fraction_of_limit: np.ndarray  # [G, D] own usage / the local limit it was admitted under (0: unlimited)
    usage_fraction_of_quota: np.ndarray  # [G, D] own usage / the group's quota
    group_usage: np.ndarray  # [G, D] usage of every broker in view: its own and the peers' entries
    group_usage_fraction_of_quota: np.ndarray  # [G, D] group_usage / the group's quota
    over_quota: np.ndarray  # bool[G, D]: the usage in view is over the quota
    breach_age_s: np.ndarray  # [G, D] seconds since the current breach began (0 when not over quota)
    report_age_max_s: np.ndarray  # [G] oldest of the peers' freshest entries (NaN: no peer in view)
    report_age_mean_s: np.ndarray  # [G] their mean
    by_reason: dict[str, Throttling]

    @property
    def throttle_events(self) -> np.ndarray:
        """int32[G]: throttling that began this round, every reason counted (a sum of int32 arrays: no stacking of
        them first, as `np.sum` of a list does)."""
        first, *others = [throttling.events for throttling in self.by_reason.values()]
        events = first.astype(np.int32)  # a copy
        for more in others:
            events += more
        return events


class QuotaTracker:
    """The quota telemetry of one broker incarnation (a restarted broker starts afresh, as its state does)."""

    def __init__(self) -> None:
        self._throttled: dict[str, np.ndarray] = {}  # reason -> bool[G]: it held the group last round
        # [G, D] the run time each breach began, NaN where none; None while no group is over quota
        self._breach_since_s: np.ndarray | None = None

    def update(
        self,
        node: BrokerNode,
        usage: np.ndarray,
        admitted_limit: np.ndarray,
        throttled_s: dict[str, np.ndarray],
        t_s: float,
        now_s: float,
    ) -> QuotaRound:
        """This round's telemetry after the allocation: `usage` [G, D] is the round's own usage and
        `admitted_limit` [G, D] the local limits it went through (the previous allocation's), `throttled_s` the
        seconds each reason held each group, `t_s` the run time and `now_s` the broker's clock."""
        quota = node.quota
        group_usage = node.table.view_usage()
        tolerance = FLOAT32_OVER_QUOTA_TOLERANCE if node.settings.float32_rates else OVER_QUOTA_TOLERANCE
        over = group_usage > quota * (1.0 + tolerance)
        if over.any():
            since = np.full(quota.shape, np.nan) if self._breach_since_s is None else self._breach_since_s
            since = np.where(over, np.where(np.isnan(since), t_s, since), np.nan)
            breach_age_s = np.where(over, t_s - since, 0.0)
        else:  # no breach (every round of a cluster within its quotas): none began, none goes on
            since, breach_age_s = None, np.zeros(quota.shape)
        self._breach_since_s = since
        oldest, mean = node.table.peer_entry_age_s(now_s)
        by_reason = {}
        for reason, seconds in throttled_s.items():
            throttled = seconds > 0
            before = self._throttled.get(reason)
            began = throttled if before is None else throttled & ~before
            by_reason[reason] = Throttling(began.astype(np.int32), seconds)
            self._throttled[reason] = throttled
        return QuotaRound(
            usage_fraction_of_limit=fraction(usage, admitted_limit),
            usage_fraction_of_quota=fraction(usage, quota),
            group_usage=group_usage,
            group_usage_fraction_of_quota=fraction(group_usage, quota),
            over_quota=over,
            breach_age_s=breach_age_s,
            report_age_max_s=oldest,
            report_age_mean_s=mean,
            by_reason=by_reason,
        )


def fraction(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """`part / whole`, elementwise: 0 of an unlimited (infinite) whole, 0 of a zero whole when the part is 0
    too, +inf when it is not."""
    empty = np.where(part > 0, np.inf, 0.0)
    ratio = np.divide(part, whole, out=empty, where=whole > 0)
    return np.where(np.isinf(whole), 0.0, ratio)
