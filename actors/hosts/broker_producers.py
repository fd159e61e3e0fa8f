"""A broker's producers in the runtime: their offered load per round, the producer model run at the
allocator's limits, and the rows of the `producers` telemetry table.

The allocator sees a group's aggregate traffic (`BrokerNode.admit`, as without producers); the producer model
(`allocator.producers.simulator`) refines what each producer sees within the round, through buckets at the same local
limits.
"""

from __future__ import annotations

import numpy as np

from actors.plan import ProducerPlan
from allocator.producers.simulator import MIB, REASONS, ProducerSimulator, ThrottleSettings

THROTTLED_COLUMNS = tuple(f"throttled_{reason}_s" for reason in REASONS)


class BrokerProducers:
    """The producers of one logical broker, for one incarnation."""

    def __init__(
        self,
        plan: ProducerPlan,
        n_groups: int,
        bytes_dimension: np.ndarray,
        settings: ThrottleSettings,
        rng: np.random.Generator,
    ) -> None:
        self.plan = plan
        self.settings = settings
        self.rng = rng
        self.simulator = ProducerSimulator(plan.producers, n_groups, bytes_dimension, settings)
        self.rates_msgs_per_s = np.zeros(len(plan.topics))
        self._last_t_s: float | None = None
        self._rows: dict[str, np.ndarray] | None = None
        self._throttled_s = np.zeros((len(plan.topics), len(REASONS)))  # the last round's, per producer

    def offered_by_group(self, round_index: int, n_groups: int, interval_s: float) -> np.ndarray:
        """[G] msgs/s the producers offer this round, per group of the broker: their rates (drawn once per
        round) and what they have pending, spread over the round (a backlog is demand the allocator must see,
        or a limit equal to the rate would never let it drain)."""
        self.rates_msgs_per_s = self.plan.workload.rates_at(round_index, self.rng)
        offered = self.rates_msgs_per_s + self.simulator.pending_msgs() / interval_s
        return np.bincount(self.plan.producers.group_row, weights=offered, minlength=n_groups)

    def run(self, limit_per_s: np.ndarray, monotonic_s: float, round_index: int, t_s: float, interval_s: float) -> None:
        """The producers over the round since the last one (one interval the first time), at `limit_per_s`."""
        duration_s = interval_s if self._last_t_s is None else max(t_s - self._last_t_s, self.settings.step_s)
        self._last_t_s = t_s
        self.simulator.set_group_limits(limit_per_s, monotonic_s)
        seen = self.simulator.run(self.rates_msgs_per_s, monotonic_s, duration_s)
        self._throttled_s = seen.throttled_s
        n = len(self.plan.topics)
        self._rows = {
            "round": np.full(n, round_index, dtype=np.int32),
            "t_s": np.full(n, t_s),
            "client": np.array(self.plan.clients, dtype=object),
            "topic": np.array(self.plan.topics, dtype=object),
            "mode": np.full(n, self.settings.mode, dtype=object),
            "offered_msgs_per_s": seen.offered_msgs / seen.duration_s,
            "throughput_msgs_per_s": seen.admitted_msgs / seen.duration_s,
            "latency_p50_ms": seen.latency_p50_s * 1000,
            "latency_p99_ms": seen.latency_p99_s * 1000,
            **{column: seen.throttled_s[:, index] for index, column in enumerate(THROTTLED_COLUMNS)},
            "connection_blocked_s": seen.connection_blocked_s,
            "throttle_signals": seen.signals.astype(np.int32),
            "fallbacks": seen.fallbacks.astype(np.int32),
            "failed_throttled_msgs": seen.failed_throttled_msgs,
            "failed_timeout_msgs": seen.failed_timeout_msgs,
            "failed_queue_full_msgs": seen.failed_queue_full_msgs,
            "pending_msgs": seen.pending_msgs,
            "connection_pending_max_msgs": seen.connection_pending_max_msgs,
            "publish_buffer_max_mb": np.full(n, seen.buffer_max_bytes / MIB),
        }

    def throttled_s_by_reason(self, n_groups: int) -> dict[str, np.ndarray]:
        """[G] per reason: the seconds of the last round the reason held the group's producers on this broker
        (the longest of them; a connection-level reason holds every group with a producer on the connection)."""
        by_group = np.zeros((n_groups, len(REASONS)))
        np.maximum.at(by_group, self.plan.producers.group_row, self._throttled_s)
        return {reason: by_group[:, index] for index, reason in enumerate(REASONS)}

    def take_rows(self, broker_index: int, group_ids: np.ndarray, incarnation: int) -> dict[str, np.ndarray] | None:
        """This round's rows of the `producers` table (once), with the broker and group as integer codes."""
        rows, self._rows = self._rows, None
        if rows is None:
            return None
        n = len(self.plan.topics)
        return {
            **rows,
            "broker": np.full(n, broker_index, dtype=np.int32),
            "group": group_ids[self.plan.producers.group_row].astype(np.int32),
            "incarnation": np.full(n, incarnation, dtype=np.int32),
        }
