"""Logical brokers and the host that runs one or more of them: the class a Ray actor wraps.

A `LogicalBroker` is one broker of the scenario: a `BrokerNode` (the allocator's state machine), the
workloads that offer it traffic, and its own clock offset. A `BrokerHost` runs several logical brokers so a
100-broker experiment fits in a dozen actors; each call covers every broker it hosts (one call per actor
per phase). Everything here is plain Python: the local backend uses it as it is.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from actors.config import Profile, Scenario
from actors.workload import rate_at
from allocator.broker_node import BrokerNode, NodeSettings, Outbox, Traffic

CLOCK_BASE_S = 1_000_000.0


@dataclass
class Load:
    """One (broker, group) workload as it currently stands: its rate profile since a round."""

    profile: Profile
    since_round: int
    msg_bytes: float


@dataclass
class BrokerRecord:
    """What the driver knows of a broker between incarnations: enough to (re)start it anywhere."""

    name: str
    groups: tuple[str, ...]  # every group it may serve in this scenario
    loads: dict[str, Load] = field(default_factory=dict)
    incarnation: int = 0
    clock_offset_s: float = 0.0


def node_settings(scenario: Scenario) -> NodeSettings:
    """The allocator's settings for every broker of a scenario."""
    key = scenario.reporting.hmac_key
    return NodeSettings(
        dimensions=scenario.dimensions(),
        interval_s=scenario.interval_s,
        policy=scenario.policy.name,
        policy_params=dict(scenario.policy.params),
        threshold_pct=scenario.reporting.threshold_pct,
        force_every=scenario.reporting.force_every,
        report_demand=scenario.reporting.report_demand,
        stale_after_rounds=scenario.cleanup.stale_after_rounds,
        max_report_age_rounds=scenario.cleanup.max_report_age_rounds,
        compress=scenario.reporting.compress,
        hmac_key=key.encode() if key else None,
        shards=scenario.channel.shards,
    )


def quota_matrix(scenario: Scenario, quotas: dict[str, dict[str, float]], groups: tuple[str, ...]) -> np.ndarray:
    """[G, D] quotas for `groups`; a dimension a group does not limit is unlimited (-1)."""
    dimensions = scenario.dimensions()
    return np.array([[quotas[group].get(dim, -1.0) for dim in dimensions] for group in groups], dtype=float)


def limited_matrix(scenario: Scenario, quotas: dict[str, dict[str, float]], groups: tuple[str, ...]) -> np.ndarray:
    """[G, D]: whether the group's quota names the dimension (telemetry has rows only for those)."""
    return np.array([[dim in quotas[group] for dim in scenario.dimensions()] for group in groups], dtype=bool)


class LogicalBroker:
    """One broker of the scenario, up for one incarnation."""

    def __init__(self, record: BrokerRecord, scenario: Scenario, quotas: dict[str, dict[str, float]], now_s: float):
        self.record = record
        self.group_index = {group.name: index for index, group in enumerate(scenario.groups)}
        self.groups = record.groups
        self.rng = np.random.default_rng([scenario.seed, zlib.crc32(record.name.encode()), record.incarnation])
        group_ids = np.array([self.group_index[group] for group in self.groups], dtype=np.int64)
        self.node = BrokerNode(
            record.name,
            group_ids,
            quota_matrix(scenario, quotas, self.groups),
            node_settings(scenario),
            incarnation=record.incarnation,
            group_names={int(gid): name for gid, name in zip(group_ids, self.groups, strict=True)},
            known_brokers=[broker.name for broker in scenario.brokers],
        )
        self.scenario = scenario
        self.limited = limited_matrix(scenario, quotas, self.groups)
        self.traffic: Traffic | None = None
        self.outbox: Outbox | None = None

    def local_time(self, t_s: float) -> float:
        """The broker's own clock: run time plus its offset, from a base far from zero so that a negative
        skew never gives a negative publish time."""
        return CLOCK_BASE_S + t_s + self.record.clock_offset_s

    def monotonic_time(self, t_s: float) -> float:
        """The clock the token buckets run on. A clock offset (skew) moves the broker's wall clock, which
        stamps its reports and judges their age; a rate limiter runs on a monotonic clock (PIP-322) that no
        skew moves, so a skew event must not stall or flood the broker's producers."""
        return CLOCK_BASE_S + t_s

    def offered_load(self, round_index: int) -> tuple[np.ndarray, np.ndarray]:
        """Messages per second offered this round per group, and their mean size in bytes."""
        demand = np.zeros(len(self.groups))
        msg_bytes = np.ones(len(self.groups))
        for index, group in enumerate(self.groups):
            load = self.record.loads.get(group)
            if load is not None:
                demand[index] = rate_at(load.profile, round_index, self.rng, since_round=load.since_round)
                msg_bytes[index] = load.msg_bytes
        return demand, msg_bytes

    def publish_phase(self, round_index: int, t_s: float) -> Outbox:
        now_s = self.local_time(t_s)
        demand, msg_bytes = self.offered_load(round_index)
        self.traffic = self.node.admit(demand, msg_bytes, self.monotonic_time(t_s))
        self.outbox = self.node.build_reports(self.traffic, now_s)
        return self.outbox

    def set_quota(self, quotas: dict[str, dict[str, float]]) -> None:
        self.node.set_quota(quota_matrix(self.scenario, quotas, self.groups))
        self.limited = limited_matrix(self.scenario, quotas, self.groups)


@dataclass(frozen=True)
class Published:
    """One broker's output of the publish phase."""

    broker: str
    payloads: list[tuple[int, bytes]]
    reports_suppressed: int


class BrokerHost:
    """Runs the logical brokers placed on it; one Ray actor per host on the ray backend."""

    def __init__(self, scenario: Scenario, run_id: str):
        self.scenario = scenario
        self.run_id = run_id
        self.brokers: dict[str, LogicalBroker] = {}
        self.dimensions = scenario.dimensions()

    def start(self, record: BrokerRecord, quotas: dict[str, dict[str, float]], t_s: float) -> None:
        """Bring a broker up (join or restart) with the incarnation and loads in `record`."""
        self.brokers[record.name] = LogicalBroker(record, self.scenario, quotas, t_s)

    def stop(self, broker: str) -> None:
        """A crash: the broker's state is gone, nobody is told."""
        self.brokers.pop(broker, None)

    def leave(self, broker: str, t_s: float) -> Published:
        """A clean leave: the zero report to publish, then the broker is gone."""
        logical = self.brokers.pop(broker)
        outbox = logical.node.leave(logical.local_time(t_s))
        return Published(broker, outbox.payloads, 0)

    def set_load(self, broker: str, group: str, load: Load) -> None:
        self.brokers[broker].record.loads[group] = load

    def set_quota(self, quotas: dict[str, dict[str, float]]) -> None:
        for logical in self.brokers.values():
            logical.set_quota(quotas)

    def set_clock_offset(self, broker: str, offset_s: float) -> None:
        self.brokers[broker].record.clock_offset_s = offset_s

    def publish_phase(self, round_index: int, t_s: float) -> list[Published]:
        """Traffic through the buckets and this round's reports, for every hosted broker."""
        return [self.publish_broker(name, round_index, t_s) for name in sorted(self.brokers)]

    def allocate_phase(
        self, inboxes: dict[str, list[bytes]], dead: list[tuple[str, int]], round_index: int, t_s: float
    ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Receive, clean up and allocate for every hosted broker; returns the telemetry columns (one row
        per broker, group and dimension) and how many reports each broker rejected."""
        columns: list[dict[str, np.ndarray]] = []
        rejected: dict[str, int] = {}
        for name in sorted(self.brokers):
            rows, rejected[name] = self.allocate_broker(name, inboxes.get(name, []), dead, round_index, t_s)
            columns.append(rows)
        return concat_columns(columns), rejected

    def publish_broker(self, name: str, round_index: int, t_s: float) -> Published:
        outbox = self.brokers[name].publish_phase(round_index, t_s)
        return Published(name, outbox.payloads, outbox.suppressed)

    def allocate_broker(
        self, name: str, payloads: list[bytes], dead: list[tuple[str, int]], round_index: int, t_s: float
    ) -> tuple[dict[str, np.ndarray], int]:
        logical = self.brokers[name]
        now_s = logical.local_time(t_s)
        inbox = logical.node.receive(payloads, now_s)
        logical.node.cleanup(now_s, [entry for entry in dead if entry[0] != name])
        logical.node.allocate()
        return self._rows(logical, round_index, t_s), inbox.rejected

    def _rows(self, logical: LogicalBroker, round_index: int, t_s: float) -> dict[str, np.ndarray]:
        node, traffic, outbox = logical.node, logical.traffic, logical.outbox
        assert traffic is not None and outbox is not None, "allocate_phase before publish_phase"
        n_groups, n_dims = node.limit.shape
        n_rows = n_groups * n_dims

        def per_group(values: np.ndarray) -> np.ndarray:
            return np.repeat(values, n_dims)

        quota = np.where(node.quota < 0, np.inf, node.quota)
        columns = {
            "round": np.full(n_rows, round_index, dtype=np.int32),
            "t_s": np.full(n_rows, t_s),
            "broker": np.full(n_rows, logical.record.name, dtype=object),
            "group": per_group(np.array(logical.groups, dtype=object)),
            "dimension": np.tile(np.array(self.dimensions, dtype=object), n_groups),
            "quota": quota.ravel(),
            "limit": node.limit.ravel().copy(),
            "usage": traffic.usage.ravel(),
            "demand": traffic.demand.ravel(),
            "throttled_s": per_group(traffic.throttled_s),
            "view_brokers": per_group(node.view_brokers()).astype(np.int32),
            "reported": per_group(outbox.reported),
            "report_bytes": per_group(outbox.report_bytes),
            "incarnation": np.full(n_rows, logical.record.incarnation, dtype=np.int32),
        }
        limited = logical.limited.ravel()
        return {name: values[limited] for name, values in columns.items()}


def concat_columns(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack column dicts of the same schema; an empty list gives an empty dict."""
    if not parts:
        return {}
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
