"""The realtime driver: every broker ticks on its own timer, with jitter and its own clock offset.

Each host runs a timer thread that ticks its brokers every `interval_s` (plus jitter): traffic, publish to
the channel, fetch what the channel has delivered by now, heartbeat (the registry answers with the announcements
and the incarnations it issued, which the reports fetched are checked against), clean up, allocate. Between
ticks a second thread keeps the host's sessions alive, and a broker whose lease ran out fences itself
(`actors.drivers.leases`, `RealtimeHost._fence_if_lapsed`). Reports flow
asynchronously (the channel's delays are in seconds: `delay_rounds * interval_s`). The driver only applies
events at their time and collects telemetry; it never advances a broker.

The channel is the simulated one (an object of the backend all hosts share) or, with `channel.transport:
redis`, Redis Pub/Sub: each host then has its own endpoint (`actors.transport.redis_channel`), and the run
starts its own `redis-server` unless given a URL (`actors.transport.redis_server`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from actors.drivers.leases import Leases
from actors.drivers.round_steps import apply_round_events, event_row, log_lost, message_rows
from actors.hosts.backends import Backend, Synchronized, blocking_call
from actors.hosts.broker_host import BrokerHost, BrokerState, Published
from actors.hosts.cluster import Cluster
from actors.plan import HostPlan, Plan
from actors.telemetry.heap import freeze_heap
from actors.telemetry.lag_histogram import LagHistogram
from actors.telemetry.writer import TelemetryWriter
from actors.transport import redis_server
from actors.transport.channel import Counters
from actors.transport.redis_channel import RedisEndpoint, RedisLink, latency_summary, redis_link

STARTUP_S = 0.3  # time given to every host to start its timer before round 0
# The first rounds' ticks are a cluster's most expensive (every peer and group new) and wait for its start:
# the manifest's `realtime_lag_steady` counts the ticks after them, the lag a running cluster has.
STARTUP_ROUNDS = 5
FINISH_TIMEOUT_S = 30.0  # after the last round's time, the wait for late ticks


@dataclass(frozen=True)
class TickStats:
    """What one broker's tick sent and rejected."""

    round_index: int
    broker: str
    reports_sent: int
    reports_suppressed: int
    reports_rejected: int


@dataclass(frozen=True)
class Drained:
    """What a realtime host gathered since the driver's last call."""

    rows: list[dict[str, np.ndarray]]  # per tick
    ticks: list[TickStats]
    lags_s: list[float]
    tables: list[tuple[str, dict[str, np.ndarray]]]  # the other tables' rows (LogicalBroker.side_tables)
    next_round: int | None  # the lowest round a broker of the host has still to tick; None: none to tick
    # events the host saw, (t_s, kind, target, detail): its brokers' fences, its transport's connection events
    events: list[tuple[float, str, str, str]] = field(default_factory=list)
    # a host's own transport endpoint (redis): its brokers' counters, delivery latencies
    counters: dict[str, Counters] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)


class RealtimeHost(BrokerHost):
    """A BrokerHost with a timer thread; the methods the driver calls take the same lock as the timer."""

    roster_at_start = False  # each broker reads the roster itself, on its first tick

    def __init__(self, plan: HostPlan):
        super().__init__(plan)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat_thread: threading.Thread | None = None
        self._next_tick: dict[str, float] = {}  # broker -> wall time of its next tick
        self._tick_round: dict[str, int] = {}
        self._phase: dict[str, float] = {}  # broker -> its timer's phase, a fraction of a round
        self._pending_rows: list[dict[str, np.ndarray]] = []
        self._pending_tables: list[tuple[str, dict[str, np.ndarray]]] = []
        self._error: BaseException | None = None
        self._ticks: list[TickStats] = []
        self._lags_s: list[float] = []
        self._announcement_cursor: dict[str, int] = {}  # per broker: each must see every announcement
        self._roster_cursor: dict[str, int] = {}  # per broker: its place in the registry's roster (0: none yet)
        # broker -> the highest incarnation the registry issued it, as of its last answer (kept while unreachable);
        # None until it answers, or in a run without a registry: then no report is checked against it
        self._issued: dict[str, int] | None = None
        self._membership: Any = None  # the registry, once the clock starts (None: a run without one)
        # a run has a registry exactly when it has a session timeout (experiments.planner)
        self._leases = Leases(plan.session_timeout_s) if plan.session_timeout_s is not None else None
        self._events: list[tuple[float, str, str, str]] = []
        self._endpoint: RedisEndpoint | None = None  # this host's own side of a real transport

    def settle(self, own_process: bool) -> None:
        """Ready for the clock to start. A host alone in its process (a Ray actor) freezes what the process
        holds by now (`actors.telemetry.heap.freeze_heap`), so that no collection of it stops the timer mid-run."""
        if own_process:
            freeze_heap()

    def start_clock(self, channel: Any, membership: Any, epoch: float, consensus: Any = None) -> None:
        """Start ticking. `channel`: the simulated channel (shared), or a `RedisLink` to open this host's own
        endpoint on."""
        if isinstance(channel, RedisLink):
            channel = self._endpoint = RedisEndpoint(channel, epoch)
        self._channel, self._membership, self._epoch = channel, membership, epoch
        self._consensus = consensus  # the pool-size consensus (actors.registry.pool_consensus), or None
        self._thread = threading.Thread(
            target=self._run, args=(self._tick_until_stopped,), name="quotalab-timer", daemon=True
        )
        self._thread.start()
        if membership is not None and self._leases is not None:
            self._heartbeat_thread = threading.Thread(
                target=self._run, args=(self._keep_sessions_alive,), name="quotalab-heartbeat", daemon=True
            )
            self._heartbeat_thread.start()

    def finish(self) -> None:
        """Return once every broker has ticked its last round (a late tick is still taken), or after
        `FINISH_TIMEOUT_S`: a timer that far behind is stuck, and the run ends without its last ticks."""
        deadline = time.time() + FINISH_TIMEOUT_S
        while self._next_tick and self._error is None and time.time() < deadline:
            self._stopping.wait(0.01)

    def stop_clock(self) -> None:
        self._stopping.set()
        for thread in (self._thread, self._heartbeat_thread):
            if thread is not None:
                thread.join()
        if self._endpoint is not None:
            self._endpoint.close()

    def start(
        self,
        broker: str,
        state: BrokerState,
        quota: np.ndarray,
        limited: np.ndarray,
        t_s: float,
        listed: bool = False,
        _roster: None = None,
    ) -> None:
        """As `BrokerHost.start`; the broker reads the roster itself on its first tick (from cursor 0)."""
        if self._endpoint is not None:  # subscribed before its first tick
            self._endpoint.subscribe(broker, self.plan.brokers[broker].subscriptions)
        with self._lock:
            self._start_incarnation(broker, state, quota, limited, t_s, listed)  # registered at t_s or after
            self._keep_alive([(broker, state.incarnation)])  # its first heartbeat: the lease starts now
            jitter = self.plan.timer_jitter
            self._phase[broker] = jitter + (1.0 - 2.0 * jitter) * self.brokers[broker].timer_rng.uniform()
            self._schedule(broker, int(np.ceil(max(t_s, 0.0) / self.plan.interval_s - 1e-9)))

    def stop(self, broker: str) -> None:
        with self._lock:
            super().stop(broker)
            self._next_tick.pop(broker, None)
        if self._endpoint is not None:
            self._endpoint.unsubscribe(broker)

    def leave(self, broker: str, t_s: float) -> Published:
        with self._lock:
            self._next_tick.pop(broker, None)
            published = super().leave(broker, t_s)
        if self._endpoint is not None:
            self._endpoint.unsubscribe(broker)
        return published

    def configure_channel(self, changes: dict[str, Any]) -> None:
        """A `channel` event, for the faults this host's endpoint injects on receipt."""
        assert self._endpoint is not None, "the simulated channel is configured where it lives"
        self._endpoint.configure(**changes)

    def stall(self, t_s: float, seconds: float) -> None:
        """This host stops reading its brokers' reports for `seconds` (a `stall` event)."""
        blocking_call(self._channel, "stall", sorted(self.brokers), t_s, seconds)

    def set_state(self, *args: Any) -> None:
        with self._lock:
            super().set_state(*args)

    def set_quota(self, *args: Any) -> None:
        with self._lock:
            super().set_quota(*args)

    def set_registry_reachable(self, reachable: bool) -> None:
        """As `BrokerHost.set_registry_reachable`; a registry that answers again has restarted its sessions'
        clocks (`Membership.resume`), and the host's heartbeats restart their leases."""
        with self._lock:
            super().set_registry_reachable(reachable)
            if reachable:
                self._keep_alive([(broker, logical.state.incarnation) for broker, logical in self.brokers.items()])

    def drain(self) -> Drained:
        """Telemetry rows, per-tick report counts and timer lags gathered since the last call.

        A failure on the timer thread is raised here, so the driver's run fails instead of going quiet."""
        if self._error is not None:
            raise RuntimeError("a broker's timer failed") from self._error
        with self._lock:
            next_round = min((self._tick_round[broker] for broker in self._next_tick), default=None)
            drained = Drained(
                self._pending_rows, self._ticks, self._lags_s, self._pending_tables, next_round, self._events
            )
            self._pending_rows, self._ticks, self._lags_s, self._pending_tables, self._events = [], [], [], [], []
        if self._endpoint is not None:
            endpoint = self._endpoint
            transport = endpoint.take_counters(), endpoint.take_events(), endpoint.take_latencies_s()
            drained = replace(
                drained, counters=transport[0], events=drained.events + transport[1], latencies_s=transport[2]
            )
        return drained

    def _epoch_or_now(self) -> float:
        return getattr(self, "_epoch", time.time())

    def _run(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except BaseException as error:  # handed to the driver by drain()
            self._error = error

    def _keep_sessions_alive(self) -> None:
        """The host's heartbeats, between ticks and without the tick's lock (a session ends within a timeout of
        its last heartbeat, however long a tick takes), then the fence of every broker whose lease ran out."""
        while not self._stopping.wait(self._leases.heartbeat_period_s):
            self._keep_alive([(broker, logical.state.incarnation) for broker, logical in list(self.brokers.items())])
            t_s = time.time() - self._epoch
            for broker in list(self.brokers):
                self._fence_if_lapsed(broker, t_s)

    def _keep_alive(self, sessions: list[tuple[str, int]]) -> None:
        """Heartbeats for `sessions` now; those the registry took extend their brokers' leases."""
        if self._membership is None or not self.registry_reachable:
            return
        t_s = time.time() - self._epoch
        self._leases.taken(blocking_call(self._membership, "keep_alive", sessions, t_s), t_s)

    def _fence_if_lapsed(self, broker: str, t_s: float) -> None:
        """Fence `broker` if its lease ran out (`actors.drivers.leases`): it drops what it held and comes back as a new
        incarnation, registered afresh, at a newcomer's start limits, as a restarted broker would. Without this a
        broker declared dead while up would have its room counted twice for good. Not while the registry does
        not answer: its sessions do not age then."""
        with self._lock:
            logical = self.brokers.get(broker)
            if logical is None or self._membership is None or not self.registry_reachable:
                return
            silent_s = self._leases.lapsed_for_s((broker, logical.state.incarnation), t_s)
            if silent_s is None:
                return
            state = replace(logical.state, incarnation=logical.state.incarnation + 1)
            blocking_call(self._membership, "register", broker, state.incarnation, t_s, logical.plan.group_ids)
            self._start_incarnation(broker, state, logical.node.quota, logical.limited, t_s, listed=True)
            cause = f"no heartbeat taken for {silent_s:.3f} s"
            self._events.append((t_s, "fenced", broker, json.dumps({"cause": cause, "incarnation": state.incarnation})))

    def _start_incarnation(
        self, broker: str, state: BrokerState, quota: np.ndarray, limited: np.ndarray, t_s: float, listed: bool
    ) -> None:
        """`broker` up as `state`'s incarnation, registered at `t_s`: it reads the roster itself, from the start."""
        BrokerHost.start(self, broker, state, quota, limited, t_s, listed)
        self._roster_cursor[broker] = 0
        if self._leases is not None:
            self._leases.taken([(broker, state.incarnation)], t_s)

    def _tick_until_stopped(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                due = min(self._next_tick.items(), key=lambda item: item[1], default=None)
            if due is None:
                self._stopping.wait(0.01)
                continue
            broker, due_at = due
            if self._stopping.wait(max(0.0, due_at - time.time())):
                return
            with self._lock:
                if self._next_tick.get(broker) == due_at:
                    self._tick(broker, due_at)

    def _tick(self, broker: str, due_at: float) -> None:
        """One round of one broker, on its own timer."""
        now_wall = time.time()
        self._lags_s.append(now_wall - due_at)
        t_s = now_wall - self._epoch
        round_index = self._tick_round[broker]
        self._fence_if_lapsed(broker, t_s)
        logical = self.brokers[broker]
        published = logical.publish_phase(round_index, t_s)
        items = [(broker, topic, payload) for topic, payload in published.payloads]
        payloads = blocking_call(self._channel, "publish_and_fetch", broker, items, t_s)
        dead: list[tuple[str, int]] = []
        roster = None
        if self._membership is not None and self.registry_reachable:
            cursor, roster_cursor = self._announcement_cursor.get(broker, 0), self._roster_cursor.get(broker, 0)
            serving = logical.serving_changes()
            session = (broker, logical.state.incarnation)
            dead, self._announcement_cursor[broker], self._issued, roster, self._roster_cursor[broker] = blocking_call(
                self._membership, "tick", *session, t_s, cursor, roster_cursor, serving
            )
            if session not in dead:  # else its session ended: its lease runs out
                self._leases.taken([session], t_s)
        pool_size = None
        if self._consensus is not None:
            pool_size = blocking_call(self._consensus, "sync", broker, t_s)
        args = (payloads, dead, round_index, t_s, pool_size, self._issued, roster)
        rows, rejected = logical.allocate_phase(*args)
        self._pending_rows.append(rows)
        self._pending_tables += logical.side_tables(round_index, t_s)
        self._ticks.append(
            TickStats(round_index, broker, len(published.payloads), published.reports_suppressed, rejected)
        )
        if round_index + 1 < self.plan.rounds:  # the run's last round: no tick past the end
            self._schedule(broker, round_index + 1)
        else:
            del self._next_tick[broker]

    def _schedule(self, broker: str, round_index: int) -> None:
        """A broker's tick of `round_index` is due at its phase within the round, plus this tick's jitter. A
        broker's timer runs at its own phase, as on brokers started at different times: on one beat, the ticks
        of a cluster sharing a few cores would queue behind each other. The phase keeps every tick within its
        round (the round's events applied before it, its rows collected after)."""
        jitter = self.plan.timer_jitter
        offset = self._phase[broker] + self.brokers[broker].timer_rng.uniform(-jitter, jitter)
        self._tick_round[broker] = round_index
        self._next_tick[broker] = self._epoch_or_now() + (round_index + offset) * self.plan.interval_s


def run_realtime(
    plan: Plan,
    backend: Backend,
    writer: TelemetryWriter,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Run `plan` on real time; returns the timer lag statistics (seconds), also put in the manifest.

    A run on Redis without a URL gets a `redis-server` of its own for its duration."""
    with redis_server.serving(plan, backend.name) as (plan_with_urls, server):
        return _run_realtime(plan_with_urls, backend, writer, on_round, server)


def _run_realtime(
    plan: Plan,
    backend: Backend,
    writer: TelemetryWriter,
    on_round: Callable[[int], None] | None,
    server: redis_server.RedisServer | None,
) -> dict[str, float]:
    interval = plan.interval_s
    link = redis_link(plan, writer.run_id)  # None on the simulated channel
    driver_endpoint = None if link is None else RedisEndpoint(link, time.time())  # a clean leave's zeros
    cluster = Cluster(plan, backend, host_class=RealtimeHost, channel=driver_endpoint)
    cluster.redis_server = server
    if link is not None:  # where the reports went (a URL holds no password: the scenario's checks refuse one)
        writer.manifest["redis"] = {"url": link.url, "channels": f"{link.prefix}:*", "own_server": server is not None}
    if backend.name == "local":  # timer threads share these objects
        if driver_endpoint is None:
            cluster.channel = Synchronized(cluster.channel)
        cluster.membership = cluster.membership and Synchronized(cluster.membership)
        cluster.consensus = cluster.consensus and Synchronized(cluster.consensus)
    # Every host is created and ready before the clock starts: an actor may take seconds to start, and a
    # broker whose host came up after the epoch would tick through its overdue rounds alone, in a burst.
    for slot in cluster.slots:
        cluster.host(slot.brokers[0])
    own_process = backend.name != "local"
    ready = [backend.call(handle, "settle", own_process) for handle in cluster.all_hosts()]
    if driver_endpoint is None:
        ready.append(backend.call(cluster.channel, "subscribers"))
    if cluster.membership is not None:
        ready.append(backend.call(cluster.membership, "alive"))
    backend.gather(ready)
    epoch = time.time() + STARTUP_S
    if driver_endpoint is not None:
        driver_endpoint.epoch_s = epoch

    def clock_args() -> tuple:
        """What a host's timer starts with: on Redis, the link with the channel's faults as they now stand."""
        channel = cluster.channel if link is None else replace(link, plan=cluster.channel_plan)
        return channel, cluster.membership, epoch, cluster.consensus

    backend.gather([backend.call(h, "start_clock", *clock_args()) for h in cluster.all_hosts()])
    cluster.registry_time = lambda t_s: max(t_s, time.time() - epoch)
    cluster.on_new_host = lambda handle: backend.gather(
        [backend.call(handle, "settle", own_process), backend.call(handle, "start_clock", *clock_args())]
    )
    lags, steady_lags, latencies = LagHistogram(), LagHistogram(), LagHistogram()
    last_round, completed = 0, 0  # completed: the rounds whose every tick is collected
    try:
        for round_index in range(plan.rounds):
            last_round = round_index
            t_s = round_index * interval
            time.sleep(max(0.0, epoch + t_s - time.time()))
            collecting = round_index < plan.rounds - 1  # the last round's ticks are collected once they are done
            if collecting:  # before the round's events: a crash takes its host's uncollected rows with it
                completed = _collect(cluster, backend, writer, round_index, t_s, lags, steady_lags, latencies)
            leaving = apply_round_events(cluster, round_index, t_s, writer)
            items = [(p.broker, shard, payload) for p in leaving for shard, payload in p.payloads]
            blocking_call(cluster.channel, "publish_many", items, t_s)
            if cluster.membership is not None and cluster.registry_reachable:
                blocking_call(cluster.membership, "expire", t_s)
            if collecting:
                writer.end_round(round_index, completed)
            if on_round is not None:
                on_round(round_index)
        cluster.gather_hosts([(slot, backend.call(slot.handle, "finish")) for slot in cluster.hosted_slots()])
    finally:
        cluster.gather_hosts([(slot, backend.call(slot.handle, "stop_clock")) for slot in cluster.hosted_slots()])
        completed = _collect(cluster, backend, writer, last_round, last_round * interval, lags, steady_lags, latencies)
        if cluster.consensus is not None:
            blocking_call(cluster.consensus, "close")
        if driver_endpoint is not None:
            driver_endpoint.close()
    writer.end_round(last_round, completed)
    lag_stats = lags.summary(interval)
    writer.manifest["realtime_lag"] = lag_stats
    writer.manifest["realtime_lag_steady"] = steady_lags.summary(interval)
    if link is not None:
        writer.manifest["transport_latency"] = latency_summary(latencies)
    return lag_stats


def _collect(
    cluster: Cluster,
    backend: Backend,
    writer: TelemetryWriter,
    round_index: int,
    t_s: float,
    lags: LagHistogram,
    steady_lags: LagHistogram,
    latencies: LagHistogram,
) -> int:
    """Telemetry the hosts gathered since the last call, written under the driver's round; their timers' lags
    counted in `lags` (every tick) and `steady_lags` (the ticks after `STARTUP_ROUNDS`), the publish-to-deliver
    times of a real transport in `latencies`. Returns how many rounds are complete (every tick of them
    collected): each timer ticks at its own phase, so the driver's round has ticks still to come."""
    drained = cluster.gather_hosts([(slot, backend.call(slot.handle, "drain")) for slot in cluster.hosted_slots()])
    log_lost(cluster, writer, round_index, t_s)
    counters = blocking_call(cluster.channel, "take_counters")
    for host in drained:  # a real transport counts on each host
        for broker, counted in host.counters.items():
            counters[broker] = counters.get(broker, Counters()).plus(counted)
        latencies.add(host.latencies_s)
    host_events = [event for host in drained for event in host.events]
    if cluster.channel_on_hosts:
        host_events += blocking_call(cluster.channel, "take_events")
    for event_t_s, kind, target, detail in host_events:
        writer.add("events", event_row(round_index, event_t_s, kind, target, detail))
    sent: dict[str, int] = {}
    suppressed: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for host in drained:
        for rows in host.rows:
            writer.add("rounds", rows)
        for table, columns in host.tables:
            writer.add(table, columns)
        lags.add(host.lags_s)  # one lag per tick, in the order of `ticks`
        steady = zip(host.lags_s, host.ticks, strict=True)
        steady_lags.add(lag for lag, tick in steady if tick.round_index >= STARTUP_ROUNDS)
        for tick in host.ticks:
            sent[tick.broker] = sent.get(tick.broker, 0) + tick.reports_sent
            suppressed[tick.broker] = suppressed.get(tick.broker, 0) + tick.reports_suppressed
            rejected[tick.broker] = rejected.get(tick.broker, 0) + tick.reports_rejected
    writer.add("messages", message_rows(sent, suppressed, counters, rejected, round_index, t_s))
    if cluster.consensus is not None:  # the store's reachability changes (registry_unreachable / _reachable)
        for event_t_s, kind, broker, detail in blocking_call(cluster.consensus, "take_events"):
            writer.add("events", event_row(round_index, event_t_s, kind, broker, detail))
    return min((host.next_round for host in drained if host.next_round is not None), default=round_index + 1)
