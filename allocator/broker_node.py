"""One broker's allocation round, with time passed in: what the Ray actors wrap and a real service embeds.

    traffic -> report -> (channel) -> receive -> clean up -> allocate -> new bucket rates

`admit` and `build_reports` form the first phase, `receive`, `cleanup` and `allocate` the second; a lockstep
driver runs every broker's first phase before any second phase, a realtime broker runs both on its timer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from allocator import policies
from allocator.bucket_array import TokenBucketArray
from allocator.codec import ReportError, UsageReport, decode_report, encode_report
from allocator.reporting import ReportSuppressor, Selection
from allocator.usage_table import OWN, CleanupRules, Merge, UsageTable

BYTES_DIMENSIONS = frozenset({"publish_bytes_per_s", "dispatch_bytes_per_s"})
MIN_LIMIT = 1.0  # Pulsar's floor: a limiter rate of 0 would mean "unlimited", and 0 would starve the broker


@dataclass(frozen=True)
class NodeSettings:
    """How a broker reports, cleans up and allocates; the same for every broker of a cluster."""

    dimensions: tuple[str, ...]
    interval_s: float = 1.0
    policy: str = "pip82-steal"
    policy_params: dict[str, float] = field(default_factory=dict)
    threshold_pct: float = 10.0
    force_every: int = 5
    report_demand: bool = False
    stale_after_rounds: float = 10.0
    max_report_age_rounds: float = 2.0
    compress: bool = False
    hmac_key: bytes | None = None
    shards: int = 1


@dataclass(frozen=True)
class Traffic:
    """One round of traffic through the buckets; rates per second, [G, D] unless said otherwise."""

    demand: np.ndarray
    usage: np.ndarray
    throttled_s: np.ndarray  # [G]: time within the round the group's producers spent throttled


@dataclass(frozen=True)
class Outbox:
    payloads: list[tuple[int, bytes]]  # (shard, encoded report)
    reported: np.ndarray  # bool[G]
    report_bytes: np.ndarray  # [G]: each reported group's share of the bytes published
    suppressed: int


@dataclass
class Inbox:
    """What became of the reports a broker received, counted by outcome."""

    accepted: int = 0
    rejected: int = 0  # failed to decode or validate
    discarded: int = 0  # valid, but too old, from an old incarnation, or a duplicate


class BrokerNode:
    """The state one broker keeps for the groups it may serve (`group_ids`, with `quota[G, D]`)."""

    def __init__(
        self,
        name: str,
        group_ids: np.ndarray,
        quota: np.ndarray,
        settings: NodeSettings,
        *,
        incarnation: int = 0,
        group_names: dict[int, str] | None = None,
        known_brokers: Iterable[str] | None = None,
    ):
        policies.check_params(settings.policy, settings.policy_params)
        self.name = name
        self.settings = settings
        self.incarnation = incarnation
        self.group_ids = np.asarray(group_ids, dtype=np.int64)
        self.quota = np.array(quota, dtype=np.float64).reshape(len(self.group_ids), len(settings.dimensions))
        self.group_names = group_names
        self.known_brokers = set(known_brokers) if known_brokers is not None else None
        interval = settings.interval_s
        rules = CleanupRules(
            stale_after_s=settings.stale_after_rounds * interval,
            max_report_age_s=settings.max_report_age_rounds * interval,
        )
        self.table = UsageTable(name, self.group_ids, len(settings.dimensions), rules)
        self.suppressor = ReportSuppressor(
            len(self.group_ids), len(settings.dimensions), settings.threshold_pct, settings.force_every
        )
        n_groups = len(self.group_ids)
        self.limit = np.zeros((n_groups, len(settings.dimensions)))
        self.serving = np.zeros(n_groups, dtype=bool)
        self._buckets = [
            TokenBucketArray(np.full(n_groups, np.inf), capacity=np.full(n_groups, np.inf)) for _ in settings.dimensions
        ]
        self._last_admit_s: float | None = None  # the first round covers one interval
        self._seq = 0
        self._named = np.zeros(len(self.group_ids), dtype=bool)  # groups whose name was sent already
        self._bytes_dimension = np.array([dim in BYTES_DIMENSIONS for dim in settings.dimensions])

    def __repr__(self) -> str:
        return (
            f"BrokerNode({self.name!r}, incarnation={self.incarnation}, serving={int(self.serving.sum())}/"
            f"{len(self.group_ids)} groups, seq={self._seq})"
        )

    # -- phase 1: traffic and report -------------------------------------------------------------

    def admit(self, demand_msgs_per_s: np.ndarray, msg_bytes: np.ndarray, now_s: float) -> Traffic:
        """Let the round's offered load through the token buckets (a fluid model of PIP-322's limiter).

        Over the `dt` since the last call the producers offer `demand * dt` messages; a message needs
        tokens in every dimension's bucket (1 per message, or its size in bytes), so the most stringent
        dimension decides what is admitted. A group that starts being served begins at the policy's
        initial limit.
        """
        dt = self.settings.interval_s if self._last_admit_s is None else max(now_s - self._last_admit_s, 1e-9)
        self._last_admit_s = now_s
        demand_msgs_per_s = np.clip(np.asarray(demand_msgs_per_s, dtype=np.float64), 0.0, None)
        starting = (demand_msgs_per_s > 0) & ~self.serving
        self.serving = demand_msgs_per_s > 0
        if starting.any():
            self._start_serving(starting, now_s)
        cost = np.where(self._bytes_dimension[None, :], np.asarray(msg_bytes, dtype=np.float64)[:, None], 1.0)
        now_ns = int(now_s * 1e9)
        tokens = np.stack([bucket.available(now_ns) for bucket in self._buckets], axis=1)
        admitted_msgs = np.minimum(demand_msgs_per_s * dt, (tokens / cost).min(axis=1))
        for index, bucket in enumerate(self._buckets):
            bucket.consume(admitted_msgs * cost[:, index], now_ns)
        throttled_fraction = np.where(
            demand_msgs_per_s > 0, 1.0 - admitted_msgs / np.maximum(demand_msgs_per_s * dt, 1e-300), 0.0
        )
        traffic = Traffic(
            demand=demand_msgs_per_s[:, None] * cost,
            usage=admitted_msgs[:, None] * cost / dt,
            throttled_s=np.clip(throttled_fraction, 0.0, 1.0) * dt,
        )
        self.table.set_own(traffic.usage, traffic.demand, self.serving, now_s)
        return traffic

    def build_reports(self, traffic: Traffic, now_s: float) -> Outbox:
        """Encode this round's report (split by shard), leaving out what the threshold suppresses."""
        selection = self.suppressor.select(traffic.usage, self.serving)
        outbox = self._encode(selection, traffic.usage, traffic.demand, now_s)
        self.suppressor.commit(selection, traffic.usage)
        return outbox

    def leave(self, now_s: float) -> Outbox:
        """A clean leave: one report of zeros for every group others hold an entry of."""
        selection = self.suppressor.leave()
        zeros = np.zeros_like(self.limit)
        outbox = self._encode(selection, zeros, zeros, now_s)
        self.suppressor.commit(selection, zeros)
        return outbox

    # -- phase 2: receive, clean up, allocate ----------------------------------------------------

    def receive(self, payloads: Iterable[bytes], now_s: float) -> Inbox:
        """Decode and merge reports; a bad one is counted and dropped, never raised."""
        inbox = Inbox()
        key = self.settings.hmac_key
        for payload in payloads:
            try:
                report = decode_report(payload, key=key, known_brokers=self.known_brokers)
            except ReportError:
                inbox.rejected += 1
                continue
            if tuple(report.dimensions) != tuple(self.settings.dimensions):
                inbox.rejected += 1  # its columns would land in the wrong dimensions, or not fit at all
                continue
            if report.broker == self.name:
                inbox.discarded += 1
                continue
            if self.table.merge(report, now_s) is Merge.ACCEPTED:
                inbox.accepted += 1
            else:
                inbox.discarded += 1
        return inbox

    def cleanup(self, now_s: float, dead: Iterable[tuple[str, int]] = ()) -> int:
        """Expire silent entries and drop brokers the membership registry declared dead."""
        removed = sum(self.table.remove_broker(broker, incarnation) for broker, incarnation in dead)
        return removed + self.table.expire(now_s)

    def allocate(self) -> np.ndarray:
        """Compute this broker's new limits from its view and hand them to the buckets; returns [G, D]."""
        n_brokers = self.table.n_brokers
        present = self.table.present[:, :n_brokers]
        with_demand = self.settings.report_demand and self.table.demand_known[:, :n_brokers][present].all()
        for index in range(len(self.settings.dimensions)):
            limit_view = np.zeros(present.shape)
            limit_view[:, OWN] = self.limit[:, index]
            new_limit = policies.step(
                self.settings.policy,
                self.quota[:, index],
                self.table.usage[:, :n_brokers, index],
                limit_view,
                self.table.demand[:, :n_brokers, index] if with_demand else None,
                present,
                **self.settings.policy_params,
            )[:, OWN]
            self.limit[:, index] = np.where(self.serving, self._floored(new_limit), self.limit[:, index])
        self._apply_limits()
        return self.limit

    def remove_broker(self, broker: str, incarnation: int | None = None) -> bool:
        return self.table.remove_broker(broker, incarnation)

    def set_quota(self, quota: np.ndarray) -> None:
        """A changed quota takes effect at the next allocation."""
        self.quota = np.array(quota, dtype=np.float64).reshape(self.quota.shape)

    def view_brokers(self) -> np.ndarray:
        return self.table.view_brokers()

    # -- internals -------------------------------------------------------------------------------

    def _start_serving(self, starting: np.ndarray, now_s: float) -> None:
        view = self.table.present[starting, 1:].sum(axis=1) + 1  # the others it knows, and itself
        for index in range(len(self.settings.dimensions)):
            initial = policies.initial_limit(self.settings.policy, self.quota[starting, index], view)
            self.limit[starting, index] = self._floored(initial)
        self._apply_limits()

    def _floored(self, limit: np.ndarray) -> np.ndarray:
        """Unlimited (-1) becomes an infinite rate; anything else is at least MIN_LIMIT."""
        return np.where(limit < 0, np.inf, np.maximum(limit, MIN_LIMIT))

    def _apply_limits(self) -> None:
        """Buckets hold one interval of tokens: the fluid model admits a round's traffic at once."""
        now_ns = int((self._last_admit_s or 0.0) * 1e9)
        for index, bucket in enumerate(self._buckets):
            rate = np.where(self.serving, self.limit[:, index], np.inf)
            bucket.set_rate(rate, now_ns, capacity=rate * self.settings.interval_s)

    def _encode(self, selection: Selection, usage: np.ndarray, demand: np.ndarray, now_s: float) -> Outbox:
        n_groups = len(self.group_ids)
        report_bytes = np.zeros(n_groups)
        payloads: list[tuple[int, bytes]] = []
        rows = np.flatnonzero(selection.report)
        if len(rows) == 0:
            return Outbox(payloads, selection.report, report_bytes, selection.suppressed)
        self._seq += 1
        shards = self.group_ids[rows] % self.settings.shards
        for shard in np.unique(shards):
            shard_rows = rows[shards == shard]
            report = UsageReport(
                broker=self.name,
                incarnation=self.incarnation,
                seq=self._seq,
                sent_at_ms=int(round(now_s * 1000)),
                interval_ms=int(round(self.settings.interval_s * 1000)),
                dimensions=self.settings.dimensions,
                group_ids=self.group_ids[shard_rows],
                usage=usage[shard_rows],
                demand=demand[shard_rows] if self.settings.report_demand else None,
                dictionary=self._dictionary(shard_rows),
            )
            payload = encode_report(report, key=self.settings.hmac_key, compress=self.settings.compress)
            payloads.append((int(shard), payload))
            report_bytes[shard_rows] = len(payload) / len(shard_rows)
        return Outbox(payloads, selection.report, report_bytes, selection.suppressed)

    def _dictionary(self, rows: np.ndarray) -> dict[int, str] | None:
        """Group names travel once, with the first report of each group (PIP-82: ids in reports, names on
        change)."""
        rows = rows[~self._named[rows]]
        if self.group_names is None or len(rows) == 0:
            return None
        self._named[rows] = True
        return {int(group_id): self.group_names[int(group_id)] for group_id in self.group_ids[rows]}
