"""Logical brokers and the host that runs one or more of them: the class a Ray actor wraps.

A `LogicalBroker` is one broker of the plan for one incarnation: a `BrokerNode` (the allocator's state
machine), the workload that offers it traffic, and its own clock. A `BrokerHost` runs the brokers of its
`HostPlan` slice so a 100-broker experiment fits in a dozen actors; each call covers every broker it hosts
(one call per actor per phase). Everything here is plain Python: the local backend uses it as it is.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np

from actors.hosts.adversary import lie
from actors.hosts.broker_producers import BrokerProducers
from actors.plan import BrokerPlan, HostPlan, Workload, component_rng
from actors.registry.membership import Roster
from actors.telemetry.quota_tracker import GROUP_LIMIT, QuotaRound, QuotaTracker
from allocator.node.broker_node import BYTES_DIMENSIONS, BrokerNode, RosterUpdate, Traffic
from allocator.node.explanation import to_json
from allocator.node.report_sender import Outbox

CLOCK_BASE_S = 1_000_000.0
WORKLOAD_STREAM, TIMER_STREAM, PRODUCER_STREAM = 0, 1, 3  # a broker's generators, per incarnation (2: its clock)


@dataclass(frozen=True)
class BrokerState:
    """What the driver keeps of a broker across incarnations: enough to (re)start it on its host."""

    incarnation: int
    workload: Workload
    clock_offset_s: float


@dataclass(frozen=True)
class Published:
    """One broker's output of the publish phase: (topic, payload) pairs, and the groups (global ids) it started
    and stopped serving since the membership registry last heard from it (`serving`)."""

    broker: str
    payloads: list[tuple[int, bytes]]
    reports_suppressed: int
    incarnation: int = 0
    serving: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass(frozen=True)
class Allocated:
    """A host's output of the allocate phase: each broker's telemetry columns (one row per group and limited
    dimension; names as codes, see `LogicalBroker.rows`), how many reports each broker rejected, and the rows
    of the other tables (`LogicalBroker.side_tables`) as (table, columns)."""

    rows: list[dict[str, np.ndarray]]
    rejected: dict[str, int]
    tables: list[tuple[str, dict[str, np.ndarray]]] = field(default_factory=list)


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
            signer=plan.signer,
        )
        if host.pool_consensus:
            self.node.set_pool_size(None)  # a newcomer waits for the pool size to be agreed
        self.explained = host.explained
        explaining = None if host.explained is None else host.explained.brokers()
        if host.explained is not None and (explaining is None or plan.name in explaining):
            self.node.record_decisions()
        self.registry_reachable = True
        self.registered = np.zeros(len(plan.group_ids), dtype=bool)  # the groups the registry lists it serving
        self.broker_names = host.known_brokers  # the roster names brokers by their index here
        self.limited = limited
        self.interval_s = host.interval_s
        self.producers: BrokerProducers | None = None
        if plan.producers is not None and host.throttle is not None:
            bytes_dimension = np.array([dim in BYTES_DIMENSIONS for dim in host.node.dimensions])
            rng = component_rng(host.seed, plan.name, PRODUCER_STREAM, state.incarnation)
            self.producers = BrokerProducers(plan.producers, len(plan.group_ids), bytes_dimension, host.throttle, rng)
        self.traffic: Traffic | None = None
        self.outbox: Outbox | None = None
        self.quota_tracker = QuotaTracker()
        self.admitted_limit = np.zeros_like(self.node.limit)
        self.quota_round: QuotaRound | None = None
        self.allocate_phase_s = 0.0  # wall-clock seconds the last allocate phase took (timings table only)
        # the `group` and `dimension` codes of the telemetry rows, one per group and dimension, the same every round:
        # made once, read-only (the writer keeps each round's rows as they are)
        n_dims = self.node.limit.shape[1]
        self.group_ids_int32 = plan.group_ids.astype(np.int32)
        self.group_codes = np.repeat(self.group_ids_int32, n_dims)
        self.dimension_codes = np.tile(np.arange(n_dims, dtype=np.int32), len(plan.group_ids))
        for codes in (self.group_ids_int32, self.group_codes, self.dimension_codes):
            codes.flags.writeable = False
        self._constant_columns: dict[str, np.ndarray] = {}  # `constant_column`'s, by column name

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
        """Messages per second offered this round per group: the workload's rates, and its producers'."""
        demand = self.state.workload.rates_at(round_index, self.rng)
        if self.producers is not None:
            demand += self.producers.offered_by_group(round_index, len(demand), self.interval_s)
        return demand

    def publish_phase(self, round_index: int, t_s: float) -> Published:
        demand = self.offered_load(round_index)
        self.traffic = self.node.admit(demand, self.state.workload.msg_bytes, self.monotonic_time(t_s))
        self.admitted_limit = self.node.limit.copy()  # the limits this round's traffic went through
        if self.producers is not None:
            self.producers.run(self.node.limit, self.monotonic_time(t_s), round_index, t_s, self.interval_s)
        claimed = self.traffic
        if self.plan.usage_factor != 1.0:  # a liar: its own entry and its reports say more than it admitted
            claimed = lie(self.traffic, self.plan.usage_factor)
            self.node.claim(claimed)
        self.outbox = self.node.build_reports(claimed, self.local_time(t_s))
        serving = self.serving_changes()
        return Published(self.plan.name, self.outbox.payloads, self.outbox.suppressed, self.state.incarnation, serving)

    def serving_changes(self) -> tuple[np.ndarray, np.ndarray]:
        """The groups (global ids) this broker started and stopped serving since the registry last heard it."""
        serving = self.node.serving
        if np.array_equal(serving, self.registered):  # no change (most rounds): two empty arrays, no gather
            return self.plan.group_ids[:0].copy(), self.plan.group_ids[:0].copy()
        return self.plan.group_ids[serving & ~self.registered], self.plan.group_ids[self.registered & ~serving]

    def roster_update(self, roster: Roster) -> RosterUpdate:
        """The registry's roster as the node reads it: its brokers by name."""
        return RosterUpdate(roster.group_ids, roster.brokers, roster.serving, self.broker_names, roster.acknowledged)

    def allocate_phase(
        self,
        payloads: list[bytes],
        dead: list[tuple[str, int]],
        round_index: int,
        t_s: float,
        pool_size: tuple[int | None, bool] | None = None,
        issued: dict[str, int] | None = None,
        roster: Roster | None = None,
    ) -> tuple[dict[str, np.ndarray], int]:
        """Receive, clean up and allocate; the telemetry rows and how many reports were rejected.

        `pool_size`: this round's answer of the pool-size consensus
        (`actors.registry.pool_consensus.PoolConsensus.sync`), the size to split by and whether the store
        answered; None in a run without one. `issued`: the incarnations the membership registry issued (a report
        of another incarnation is rejected). `roster`: the registry's roster changes since the last round (None:
        the registry did not answer)."""
        started = time.perf_counter()
        if pool_size is not None:
            self.apply_pool_size(*pool_size)
        now_s = self.local_time(t_s)
        if roster is not None:  # the registry answered: it holds this broker's serving as of the publish phase
            self.registered = self.node.serving.copy()
        inbox = self.node.finish_round(
            payloads,
            now_s,
            issued=issued,
            dead=[entry for entry in dead if entry[0] != self.plan.name],
            roster=None if roster is None else self.roster_update(roster),
        )
        self.allocate_phase_s = time.perf_counter() - started
        assert self.traffic is not None, "allocate_phase before publish_phase"
        throttled_s = {GROUP_LIMIT: self.traffic.throttled_s}  # the allocator's aggregate view
        if self.producers is not None:  # and the producer model's reasons (PIP-385)
            throttled_s |= self.producers.throttled_s_by_reason(len(self.plan.group_ids))
        self.quota_round = self.quota_tracker.update(
            self.node, self.traffic.usage, self.admitted_limit, throttled_s, t_s, now_s
        )
        return self.rows(round_index, t_s), inbox.rejected

    def apply_pool_size(self, pool_size: int | None, reachable: bool) -> None:
        """The consensus's pool size for the next allocation. When the store stops (or starts again) answering,
        the node is told (`set_registry_reachable`: the fallbacks act on it); meanwhile it keeps splitting by
        the last size it had."""
        self.node.set_pool_size(pool_size)
        if reachable != self.registry_reachable:
            self.registry_reachable = reachable
            self.node.set_registry_reachable(reachable)

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
        node, traffic, outbox, quota = self.node, self.traffic, self.outbox, self.quota_round
        assert traffic is not None and outbox is not None and quota is not None, "allocate_phase before publish_phase"
        n_dims = node.limit.shape[1]
        limited = self.limited.ravel()
        n_rows = np.count_nonzero(limited)  # not `sum`, which adds 20,000 bools as integers (~10x slower)
        every_entry = n_rows == len(limited)  # the usual case: copies, ~5x cheaper than a boolean gather

        def per_entry(values: np.ndarray, kept: bool = True) -> np.ndarray:
            """A copy of an array the node or the host `kept` (the writer keeps the rows for rounds, and the node
            updates its arrays in place); an array made for this round's rows only (the quota tracker's, a fresh
            count), as it is."""
            if not every_entry:
                return values.ravel()[limited]
            return values.ravel().copy() if kept else values.ravel()

        def per_group(values: np.ndarray, kept: bool = True) -> np.ndarray:
            return per_entry(np.repeat(values, n_dims), kept=False) if n_dims > 1 else per_entry(values, kept)

        return {
            "round": np.full(n_rows, round_index, dtype=np.int32),
            "t_s": np.full(n_rows, t_s),
            "broker": self.constant_column("broker", self.plan.index, n_rows),
            "group": per_entry(self.group_codes, kept=False),
            "dimension": per_entry(self.dimension_codes, kept=False),
            "quota": per_entry(node.quota),
            "limit": per_entry(node.limit),
            "pool": per_entry(node.pool),
            "usage": per_entry(traffic.usage, kept=False),  # the round's traffic: arrays made for it (`admit`, `lie`)
            "demand": per_entry(traffic.demand, kept=False),
            "throttled_s": per_group(traffic.throttled_s),
            "view_brokers": per_group(node.table.view_brokers().astype(np.int32), kept=False),
            "reported": per_group(outbox.reported),
            "report_bytes": per_group(outbox.report_bytes),
            "incarnation": self.constant_column("incarnation", self.state.incarnation, n_rows),
            "usage_fraction_of_limit": per_entry(quota.usage_fraction_of_limit, kept=False),
            "usage_fraction_of_quota": per_entry(quota.usage_fraction_of_quota, kept=False),
            "group_usage": per_entry(quota.group_usage, kept=False),
            "group_usage_fraction_of_quota": per_entry(quota.group_usage_fraction_of_quota, kept=False),
            "over_quota": per_entry(quota.over_quota, kept=False),
            "breach_age_s": per_entry(quota.breach_age_s, kept=False),
            "throttle_events": per_group(quota.throttle_events, kept=False),
            "report_age_max_s": per_group(quota.report_age_max_s, kept=False),
            "report_age_mean_s": per_group(quota.report_age_mean_s, kept=False),
            "agreed_pool_size": self.constant_column("agreed_pool_size", self.pool_size_column(), n_rows),
        }

    def constant_column(self, name: str, value: int, n_rows: int) -> np.ndarray:
        """int32[n_rows] of `value`, made again only when the value or the number of rows changes (the broker's
        index, its incarnation and its pool size seldom do): read-only, as the writer keeps each round's rows for
        rounds, and so may hold the one array several times."""
        column = self._constant_columns.get(name)
        if column is None or len(column) != n_rows or (n_rows > 0 and column[0] != value):
            column = np.full(n_rows, value, dtype=np.int32)
            column.flags.writeable = False
            self._constant_columns[name] = column
        return column

    def side_tables(self, round_index: int, t_s: float) -> list[tuple[str, dict[str, np.ndarray]]]:
        """This round's rows of the other tables: `throttles` (one per group and reason that throttled it),
        `producers` (a broker with producers: one per producer) and `timings` (the allocate phase's wall-clock
        duration; kept out of `rounds`, whose values are identical on every backend for a seed)."""
        quota = self.quota_round
        assert quota is not None, "allocate_phase first"
        group_ids = self.group_ids_int32
        throttles = []
        for reason, throttling in quota.by_reason.items():
            rows = np.flatnonzero(throttling.throttled_s > 0)  # where it throttled, and so where it began to
            throttles.append(
                {
                    "round": np.full(len(rows), round_index, dtype=np.int32),
                    "t_s": np.full(len(rows), t_s),
                    "broker": np.full(len(rows), self.plan.index, dtype=np.int32),
                    "group": group_ids[rows],
                    "reason": [reason] * len(rows),  # a list: an object array of 5,000 strings takes ~0.7 ms
                    "throttle_events": throttling.events[rows],
                    "throttled_s": throttling.throttled_s[rows],
                }
            )
        timing = {
            "round": np.array([round_index], dtype=np.int32),
            "t_s": np.array([t_s]),
            "broker": np.array([self.plan.index], dtype=np.int32),
            "allocate_phase_s": np.array([self.allocate_phase_s]),
        }
        tables = [("throttles", columns) for columns in throttles] + [("timings", timing)]
        decisions = self.decision_rows(round_index, t_s)
        if decisions is not None:
            tables.append(("decisions", decisions))
        if self.producers is not None:
            producers = self.producers.take_rows(self.plan.index, self.plan.group_ids, self.state.incarnation)
            tables.append(("producers", producers))
        return tables

    def decision_rows(self, round_index: int, t_s: float) -> dict[str, np.ndarray | list] | None:
        """This round's `decisions` rows: the node's explanation of each limit the plan asks it to explain (every
        row of `rounds`, or a replay's few), as JSON; None when it explains none."""
        if self.explained is None or not self.node.records_decisions:
            return None
        group_ids = self.plan.group_ids
        wanted = self.explained.groups(round_index, self.plan.name)
        rows = np.arange(len(group_ids)) if wanted is None else np.flatnonzero(np.isin(group_ids, sorted(wanted)))
        entries = [(int(row), int(d)) for row in rows for d in np.flatnonzero(self.limited[row])]
        if not entries:
            return None
        explained = [self.node.explain(int(group_ids[row]), d) for row, d in entries]
        return {
            "round": np.full(len(entries), round_index, dtype=np.int32),
            "t_s": np.full(len(entries), t_s),
            "broker": np.full(len(entries), self.plan.index, dtype=np.int32),
            "group": np.array([group_ids[row] for row, _ in entries], dtype=np.int32),
            "dimension": np.array([d for _, d in entries], dtype=np.int32),
            "limit": np.array([self.node.limit[row, d] for row, d in entries]),
            "explanation": [to_json(explanation) for explanation in explained],
        }

    def pool_size_column(self) -> int:
        """The pool size the broker split by (`agreed_pool_size`): -1 in a run without a pool-size consensus,
        0 while waiting for the first agreement."""
        return self.node.agreed_pool_size


class BrokerHost:
    """Runs the logical brokers of its `HostPlan`; one Ray actor per host on the ray backend."""

    roster_at_start = True  # a broker starts with the registry's roster (the driver reads it)

    def __init__(self, plan: HostPlan):
        self.plan = plan
        self.brokers: dict[str, LogicalBroker] = {}
        self.registry_reachable = True

    def pid(self) -> int:
        """The id of the process this host runs in (on Ray, its worker's: what an operator would kill)."""
        return os.getpid()

    def start(
        self,
        broker: str,
        state: BrokerState,
        quota: np.ndarray,
        limited: np.ndarray,
        t_s: float,
        listed: bool = False,
        roster: Roster | None = None,
    ) -> None:
        """Bring a broker up (join or restart) with the incarnation, workload and clock in `state`;
        `quota` and `limited` are the current rows of its groups, `listed` whether the registry lists it serving
        them all (from its registration), `roster` the registry's current roster."""
        logical = self.brokers[broker] = LogicalBroker(self.plan.brokers[broker], self.plan, state, quota, limited)
        logical.registered[:] = listed
        logical.node.set_registry_reachable(self.registry_reachable)
        if roster is not None:
            logical.node.update_roster(roster.group_ids, roster.brokers, roster.serving, logical.broker_names, False)

    def stop(self, broker: str) -> None:
        """A crash: the broker's state is gone, nobody is told."""
        self.brokers.pop(broker, None)

    def leave(self, broker: str, t_s: float) -> Published:
        """A clean leave: the zero report to publish, then the broker is gone."""
        logical = self.brokers.pop(broker)
        outbox = logical.node.leave(logical.local_time(t_s))
        return Published(broker, outbox.payloads, 0)

    def set_state(self, broker: str, state: BrokerState) -> None:
        """A new workload or clock offset for a broker that is up. Its incarnation stays the live one's (the
        driver's may be behind a realtime broker's fence)."""
        logical = self.brokers[broker]
        logical.state = replace(state, incarnation=logical.state.incarnation)

    def set_quota(self, group_id: int, quota: np.ndarray, limited: np.ndarray) -> None:
        for logical in self.brokers.values():
            logical.set_quota(group_id, quota, limited)

    def set_registry_reachable(self, reachable: bool) -> None:
        """The membership registry stops or starts answering this host's brokers (a `registry_outage`)."""
        self.registry_reachable = reachable
        for logical in self.brokers.values():
            logical.node.set_registry_reachable(reachable)

    def publish_phase(self, round_index: int, t_s: float) -> list[Published]:
        """Traffic through the buckets and this round's reports, for every hosted broker."""
        return [self.brokers[name].publish_phase(round_index, t_s) for name in sorted(self.brokers)]

    def allocate_phase(
        self,
        inboxes: dict[str, list[bytes]],
        dead: list[tuple[str, int]],
        round_index: int,
        t_s: float,
        pool_sizes: dict[str, tuple[int | None, bool]] | None = None,
        issued: dict[str, int] | None = None,
        roster: Roster | None = None,
    ) -> Allocated:
        """Receive, clean up and allocate for every hosted broker (`pool_sizes`: the consensus's answers,
        `roster`: the registry's roster changes)."""
        columns: list[dict[str, np.ndarray]] = []
        rejected: dict[str, int] = {}
        tables: list[tuple[str, dict[str, np.ndarray]]] = []
        for name in sorted(self.brokers):
            pool_size = None if pool_sizes is None else pool_sizes.get(name)
            rows, rejected[name] = self.brokers[name].allocate_phase(
                inboxes.get(name, []), dead, round_index, t_s, pool_size, issued, roster
            )
            columns.append(rows)
            tables += self.brokers[name].side_tables(round_index, t_s)
        return Allocated(columns, rejected, tables)
