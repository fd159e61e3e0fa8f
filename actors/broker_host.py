"""Logical brokers and the host that runs one or more of them: the class a Ray actor wraps.

A `LogicalBroker` is one broker of the plan for one incarnation: a `BrokerNode` (the allocator's state
machine), the workload that offers it traffic, and its own clock. A `BrokerHost` runs the brokers of its
`HostPlan` slice so a 100-broker experiment fits in a dozen actors; each call covers every broker it hosts
(one call per actor per phase). Everything here is plain Python: the local backend uses it as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from actors.plan import BrokerPlan, HostPlan, Workload, component_rng
from actors.workload import rate_at
from allocator.broker_node import BrokerNode, Outbox, Traffic

CLOCK_BASE_S = 1_000_000.0
WORKLOAD_STREAM, TIMER_STREAM = 0, 1  # a broker's generators, per incarnation


@dataclass(frozen=True)
class BrokerState:
    """What the driver keeps of a broker across incarnations: enough to (re)start it on its host."""

    incarnation: int
    workload: Workload
    clock_offset_s: float


@dataclass(frozen=True)
class Published:
    """One broker's output of the publish phase: (topic, payload) pairs."""

    broker: str
    payloads: list[tuple[int, bytes]]
    reports_suppressed: int


@dataclass(frozen=True)
class Allocated:
    """A host's output of the allocate phase: each broker's telemetry columns (one row per group and limited
    dimension; names as codes, see `LogicalBroker.rows`) and how many reports each broker rejected."""

    rows: list[dict[str, np.ndarray]]
    rejected: dict[str, int]


class LogicalBroker:
    """One broker of the plan, up for one incarnation."""

    def __init__(
        self, plan: BrokerPlan, host: HostPlan, state: BrokerState, quota: np.ndarray, limited: np.ndarray
    ) -> None:
        self.plan = plan
        self.state = state
        self.rng = component_rng(host.seed, plan.name, WORKLOAD_STREAM, state.incarnation)
        self.timer_rng = component_rng(host.seed, plan.name, TIMER_STREAM, state.incarnation)
        self.node = BrokerNode(
            plan.name,
            plan.group_ids,
            quota,
            host.node,
            incarnation=state.incarnation,
            group_names=dict(zip(plan.group_ids.tolist(), plan.group_names, strict=True)),
            known_brokers=host.known_brokers,
            routes=plan.routes,
        )
        self.limited = limited
        self.traffic: Traffic | None = None
        self.outbox: Outbox | None = None

    def local_time(self, t_s: float) -> float:
        """The broker's own clock: run time plus its offset, from a base far from zero so that a negative
        skew never gives a negative publish time."""
        return CLOCK_BASE_S + t_s + self.state.clock_offset_s

    def monotonic_time(self, t_s: float) -> float:
        """The clock the token buckets run on. A clock offset (skew) moves the broker's wall clock, which
        stamps its reports and judges their age; a rate limiter runs on a monotonic clock (PIP-322) that no
        skew moves, so a skew event must not stall or flood the broker's producers."""
        return CLOCK_BASE_S + t_s

    def offered_load(self, round_index: int) -> np.ndarray:
        """Messages per second offered this round per group: the constant rates, then the other profiles."""
        workload = self.state.workload
        demand = workload.msgs_per_s.copy()
        for row, profile in workload.profiles.items():
            demand[row] = rate_at(profile, round_index, self.rng, since_round=int(workload.since_round[row]))
        return demand

    def publish_phase(self, round_index: int, t_s: float) -> Published:
        demand = self.offered_load(round_index)
        self.traffic = self.node.admit(demand, self.state.workload.msg_bytes, self.monotonic_time(t_s))
        self.outbox = self.node.build_reports(self.traffic, self.local_time(t_s))
        return Published(self.plan.name, self.outbox.payloads, self.outbox.suppressed)

    def allocate_phase(
        self, payloads: list[bytes], dead: list[tuple[str, int]], round_index: int, t_s: float
    ) -> tuple[dict[str, np.ndarray], int]:
        """Receive, clean up and allocate; the telemetry rows and how many reports were rejected."""
        now_s = self.local_time(t_s)
        inbox = self.node.receive(payloads, now_s)
        self.node.cleanup(now_s, [entry for entry in dead if entry[0] != self.plan.name])
        self.node.allocate()
        return self.rows(round_index, t_s), inbox.rejected

    def set_quota(self, group_id: int, quota: np.ndarray, limited: np.ndarray) -> None:
        rows = np.flatnonzero(self.plan.group_ids == group_id)
        if len(rows):
            new_quota = self.node.quota.copy()
            new_quota[rows] = quota
            self.node.set_quota(new_quota)
            self.limited = self.limited.copy()
            self.limited[rows] = limited

    def rows(self, round_index: int, t_s: float) -> dict[str, np.ndarray]:
        """This round's telemetry rows: one per group and dimension its quota names.

        `broker` (its plan index), `group` (global id) and `dimension` (index into the plan's dimensions) are
        integer codes: the telemetry writer turns them into names, in Arrow, for a whole batch at once.
        """
        node, traffic, outbox = self.node, self.traffic, self.outbox
        assert traffic is not None and outbox is not None, "allocate_phase before publish_phase"
        n_groups, n_dims = node.limit.shape
        limited = self.limited.ravel()
        n_rows = int(limited.sum())

        def per_group(values: np.ndarray) -> np.ndarray:
            return np.repeat(values, n_dims)[limited]

        def per_entry(values: np.ndarray) -> np.ndarray:
            return values.ravel()[limited]

        return {
            "round": np.full(n_rows, round_index, dtype=np.int32),
            "t_s": np.full(n_rows, t_s),
            "broker": np.full(n_rows, self.plan.index, dtype=np.int32),
            "group": per_group(self.plan.group_ids.astype(np.int32)),
            "dimension": np.tile(np.arange(n_dims, dtype=np.int32), n_groups)[limited],
            "quota": per_entry(node.quota),
            "limit": per_entry(node.limit),
            "usage": per_entry(traffic.usage),
            "demand": per_entry(traffic.demand),
            "throttled_s": per_group(traffic.throttled_s),
            "view_brokers": per_group(node.view_brokers()).astype(np.int32),
            "reported": per_group(outbox.reported),
            "report_bytes": per_group(outbox.report_bytes),
            "incarnation": np.full(n_rows, self.state.incarnation, dtype=np.int32),
        }


class BrokerHost:
    """Runs the logical brokers of its `HostPlan`; one Ray actor per host on the ray backend."""

    def __init__(self, plan: HostPlan):
        self.plan = plan
        self.brokers: dict[str, LogicalBroker] = {}

    def pid(self) -> int:
        """The id of the process this host runs in (on Ray, its worker's: what an operator would kill)."""
        return os.getpid()

    def start(self, broker: str, state: BrokerState, quota: np.ndarray, limited: np.ndarray, t_s: float) -> None:
        """Bring a broker up (join or restart) with the incarnation, workload and clock in `state`;
        `quota` and `limited` are the current rows of its groups."""
        self.brokers[broker] = LogicalBroker(self.plan.brokers[broker], self.plan, state, quota, limited)

    def stop(self, broker: str) -> None:
        """A crash: the broker's state is gone, nobody is told."""
        self.brokers.pop(broker, None)

    def leave(self, broker: str, t_s: float) -> Published:
        """A clean leave: the zero report to publish, then the broker is gone."""
        logical = self.brokers.pop(broker)
        outbox = logical.node.leave(logical.local_time(t_s))
        return Published(broker, outbox.payloads, 0)

    def set_state(self, broker: str, state: BrokerState) -> None:
        """A new workload or clock offset for a broker that is up (its incarnation does not change)."""
        self.brokers[broker].state = state

    def set_quota(self, group_id: int, quota: np.ndarray, limited: np.ndarray) -> None:
        for logical in self.brokers.values():
            logical.set_quota(group_id, quota, limited)

    def publish_phase(self, round_index: int, t_s: float) -> list[Published]:
        """Traffic through the buckets and this round's reports, for every hosted broker."""
        return [self.brokers[name].publish_phase(round_index, t_s) for name in sorted(self.brokers)]

    def allocate_phase(
        self, inboxes: dict[str, list[bytes]], dead: list[tuple[str, int]], round_index: int, t_s: float
    ) -> Allocated:
        """Receive, clean up and allocate for every hosted broker."""
        columns: list[dict[str, np.ndarray]] = []
        rejected: dict[str, int] = {}
        for name in sorted(self.brokers):
            rows, rejected[name] = self.brokers[name].allocate_phase(inboxes.get(name, []), dead, round_index, t_s)
            columns.append(rows)
        return Allocated(columns, rejected)
