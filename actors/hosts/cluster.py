"""The simulated cluster: which broker lives on which host, who is up, and how events change that.

Drivers (lockstep, realtime) own time; the cluster owns placement and state, and applies the plan's events
the same way for both. The channel, the membership registry and the pool-size consensus are the run's services:
objects (or actors, pinned to the driver's node) of the backend, as the hosts are. Times passed to the channel
and the registry are run seconds.

A host whose process died (on Ray: killed, or its node lost) is a crash nobody planned: its brokers are down
from then on, listed in `lost` with the node they ran on for the driver to log, and, when the plan says so
(`restart_lost_after_rounds`), started again that many rounds later on a new host, wherever the backend places
it (on Ray, a node still up).

On a real transport (`channel.transport: redis`, realtime) every host has its own endpoint
(`actors.transport.redis_channel`): the host subscribes its brokers itself and gets the channel events, and the
cluster's `channel` is the driver's endpoint, which publishes what the driver sends on brokers' behalf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from actors.hosts.adversary import forged_payloads
from actors.hosts.backends import Backend, Lost, Placement
from actors.hosts.broker_host import CLOCK_BASE_S, BrokerHost, BrokerState, Published
from actors.plan import (
    BrokerEvent,
    ChannelEvent,
    ClockSkewEvent,
    DemandEvent,
    ForgeEvent,
    HostPlan,
    Plan,
    PlannedEvent,
    QuotaEvent,
    RedisOutageEvent,
    RegistryEvent,
    StallEvent,
)
from actors.registry.membership import Ended, Membership, Roster
from actors.registry.pool_consensus import PoolConsensus
from actors.transport.channel import Channel


@dataclass
class Slot:
    """A host's plan and its handle once created; a host holding one broker dies with it on a crash."""

    plan: HostPlan
    handle: object | None = None

    @property
    def brokers(self) -> tuple[str, ...]:
        return tuple(self.plan.brokers)


@dataclass(frozen=True)
class LostBroker:
    """A broker whose host's process died under a call: a crash nobody planned."""

    broker: str
    reason: str
    node: Placement | None  # where its host ran (None: in this process, or not known)


class Cluster:
    def __init__(self, plan: Plan, backend: Backend, host_class: type = BrokerHost, channel: object | None = None):
        """`channel`: the driver's endpoint of a real transport (then the hosts hold their own); None: the
        simulated channel, one object of the backend every host shares."""
        self.plan = plan
        self.backend = backend
        self.host_class = host_class
        self.on_new_host: Callable[[object], None] | None = None  # e.g. start a realtime host's timer
        # the registry's time at an event of time t_s: t_s in lockstep; on timers the run's time now, as a
        # late driver's registration or resume must not date a session back
        self.registry_time: Callable[[float], float] = lambda t_s: t_s
        self.quota = plan.quota.copy()
        self.limited = plan.limited.copy()
        self.broker_plans = {broker.name: broker for broker in plan.brokers}
        self.states = {
            broker.name: BrokerState(incarnation=0, workload=broker.workload, clock_offset_s=broker.clock_offset_s)
            for broker in plan.brokers
        }
        self.up: set[str] = set()
        self.started: set[str] = set()
        self.slots = [Slot(host_plan) for host_plan in plan.host_plans()]
        self.slot_of = {name: slot for slot in self.slots for name in slot.brokers}
        self.channel_on_hosts = channel is not None
        self.channel = channel if channel is not None else backend.create_service(Channel, plan.channel, plan.seed)
        self.channel_plan = plan.channel  # as the channel events left it: where a host created later starts
        self.redis_server = None  # the run's own Redis server, which a `redis_outage` event stops and starts
        names = [broker.name for broker in plan.brokers]
        timeout_s = plan.session_timeout_s
        self.membership = None if timeout_s is None else backend.create_service(Membership, timeout_s, names)
        self.roster_cursor = 0  # the lockstep driver's place in the registry's roster
        self.consensus = (
            None if plan.consensus is None else backend.create_service(PoolConsensus, plan.consensus, plan.name)
        )
        self.registry_reachable = True  # False during a `registry_outage`: no heartbeats, no announcements
        self.lost: list[LostBroker] = []  # since the driver last logged them (take_lost)
        self.restarts_due: dict[int, list[str]] = {}  # round -> lost brokers to start again then

    # -- placement -------------------------------------------------------------------------------

    def host(self, broker: str) -> object:
        slot = self.slot_of[broker]
        if slot.handle is None:
            slot.handle = self.backend.create(self.host_class, slot.plan)
            if self.on_new_host is not None:
                self.on_new_host(slot.handle)
            if not self.registry_reachable:
                self.backend.gather([self.backend.call(slot.handle, "set_registry_reachable", False)])
        return slot.handle

    def hosted_slots(self) -> list[Slot]:
        """The slots whose host exists (it may hold only stopped brokers)."""
        return [slot for slot in self.slots if slot.handle is not None]

    def all_hosts(self) -> list[object]:
        return [slot.handle for slot in self.hosted_slots()]

    def events_at(self, round_index: int) -> list[PlannedEvent]:
        return [planned for planned in self.plan.events if planned.event.at == round_index]

    def live_slots(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.handle is not None and set(slot.brokers) & self.up]

    # -- events ----------------------------------------------------------------------------------

    def brokers_joining(self, round_index: int) -> list[str]:
        return [b.name for b in self.plan.brokers if b.join_at == round_index and b.name not in self.up]

    def apply(self, event: PlannedEvent, t_s: float) -> list[Published]:
        """Apply one event; returns reports it makes brokers publish (a clean leave's zeros)."""
        match event.event:
            case BrokerEvent(kind="join" | "restart", broker=broker):
                self.crash(broker)  # a no-op unless it is up
                self.start([broker], t_s)
            case BrokerEvent(kind="crash", broker=broker):
                self.crash(broker)
            case BrokerEvent(kind="leave", broker=broker):
                return self.leave(broker, t_s)
            case DemandEvent(at=at, broker=broker, row=row, rate=rate):
                state = self.states[broker]
                self._set_state(broker, replace(state, workload=state.workload.with_rate(row, rate, at)))
            case QuotaEvent(group_id=group_id, quota=quota, limited=limited):
                self.quota[group_id], self.limited[group_id] = quota, limited
                self.gather_hosts(
                    [(s, self.backend.call(s.handle, "set_quota", group_id, quota, limited)) for s in self.live_slots()]
                )
            case ChannelEvent(changes=changes):
                self.channel_plan = replace(self.channel_plan, **changes)
                if self.channel_on_hosts:
                    self.backend.gather([self.backend.call(h, "configure_channel", changes) for h in self.all_hosts()])
                else:
                    self.backend.gather([self.backend.call(self.channel, "configure", **changes)])
            case ClockSkewEvent(broker=broker, offset_s=offset_s):
                self._set_state(broker, replace(self.states[broker], clock_offset_s=offset_s))
            case RegistryEvent(reachable=reachable):
                self.registry_reachable = reachable
                if reachable and self.membership is not None:  # the sessions did not age while it was down: their
                    # clocks restart before any host calls again (a call ends the sessions due by its time)
                    self.backend.gather([self.backend.call(self.membership, "resume", self.registry_time(t_s))])
                self.backend.gather(
                    [self.backend.call(h, "set_registry_reachable", reachable) for h in self.all_hosts()]
                )
            case StallEvent(broker=broker, seconds=seconds):
                if broker in self.up:
                    self.backend.gather([self.backend.call(self.host(broker), "stall", t_s, seconds)])
            case RedisOutageEvent(up=up):
                if up:
                    self.redis_server.start()
                else:
                    self.redis_server.stop()
            case ForgeEvent(broker=victim):
                payloads = forged_payloads(event.event, self.broker_plans[victim], self.plan.node, CLOCK_BASE_S + t_s)
                return [Published(victim, payloads, 0)]
            case other:
                raise ValueError(f"unknown event {other!r}")
        return []

    def start(self, brokers: Sequence[str], t_s: float) -> None:
        """Bring brokers up (joins or restarts); every start of a broker after its first is a new incarnation (its
        sequence restarts). All are registered and joined before any starts (a realtime host ticks a started
        broker on its own timer: its first reports are of an issued incarnation, and its first sync of the pool
        size finds it a member); then their hosts start them, in one gather: a cluster's start is not a hundred
        round trips, each behind a tick."""
        hosts = {broker: self.host(broker) for broker in brokers}  # a new actor may take seconds: before any session
        issued = self.issued() if self.started.intersection(brokers) else None
        for broker in brokers:
            if broker in self.started:  # above any incarnation issued (a realtime host's fence registers one)
                incarnation = max(self.states[broker].incarnation, (issued or {}).get(broker, -1)) + 1
                self.states[broker] = replace(self.states[broker], incarnation=incarnation)
            self.started.add(broker)
        listed = self.membership is not None and self.registry_reachable  # the registry lists its groups now
        before_start = []
        for broker in brokers:
            if self.membership is not None:
                serves = self.broker_plans[broker].group_ids if listed else None
                incarnation = self.states[broker].incarnation
                registered_s = self.registry_time(t_s)
                before_start.append(
                    self.backend.call(self.membership, "register", broker, incarnation, registered_s, serves)
                )
            if self.consensus is not None:
                before_start.append(self.backend.call(self.consensus, "join", broker, t_s))
        self.backend.gather(before_start)
        roster = None  # a realtime host reads the roster itself, on its broker's first tick
        if listed and self.host_class.roster_at_start:  # as of the driver's cursor: this round's changes follow
            roster = self.backend.gather([self.backend.call(self.membership, "roster_as_of", self.roster_cursor)])[0]
        calls = []
        for broker in brokers:
            plan, state = self.broker_plans[broker], self.states[broker]
            quota, limited = self.quota[plan.group_ids], self.limited[plan.group_ids]
            calls.append(self.backend.call(hosts[broker], "start", broker, state, quota, limited, t_s, listed, roster))
            if not self.channel_on_hosts:  # else the host subscribes its broker
                calls.append(self.backend.call(self.channel, "subscribe", broker, plan.subscriptions))
        self.backend.gather(calls)
        self.up.update(brokers)

    def crash(self, broker: str) -> None:
        """No goodbye: the broker's state is lost; others learn of it only by expiry or membership."""
        if broker not in self.up:
            return
        self.up.discard(broker)
        slot = self.slot_of[broker]
        if len(slot.brokers) == 1:
            self.backend.kill(slot.handle)  # on Ray the actor really dies
            slot.handle = None
        else:
            self.backend.gather([self.backend.call(slot.handle, "stop", broker)])
        calls = self._unsubscribe([broker])
        if self.consensus is not None:
            calls.append(self.backend.call(self.consensus, "crash", broker))
        self.backend.gather(calls)

    def gather_hosts(self, calls: list[tuple[Slot, object]]) -> list:
        """The answers of calls to hosts, in order, without those whose host's process died: its brokers are
        down from then on, as after a crash, and listed in `lost` for the driver to log."""
        answers = self.backend.gather_hosts([future for _, future in calls])
        kept = []
        for (slot, _), answer in zip(calls, answers, strict=True):
            if isinstance(answer, Lost):
                self._lose(slot, answer.reason)
            else:
                kept.append(answer)
        return kept

    def take_lost(self, round_index: int) -> list[LostBroker]:
        """The brokers lost since the last call, seen in `round_index`; with `restart_lost_after_rounds`, they are
        due to start again that many rounds later."""
        lost, self.lost = self.lost, []
        after = self.plan.restart_lost_after_rounds
        if lost and after > 0:
            self.restarts_due.setdefault(round_index + after, []).extend(gone.broker for gone in lost)
        return lost

    def restart_lost(self, round_index: int, t_s: float) -> list[str]:
        """Start again, as new incarnations on new hosts, the lost brokers due at `round_index` that are still
        down (an event may have restarted one already); returns them."""
        brokers = [broker for broker in self.restarts_due.pop(round_index, []) if broker not in self.up]
        if brokers:  # no start at all in a round without: a start asks the registry for the roster
            self.start(brokers, t_s)
        return brokers

    def where(self, broker: str) -> Placement | None:
        """The node of `broker`'s host (None: in this process, or no host now)."""
        handle = self.slot_of[broker].handle
        return None if handle is None else self.backend.where(handle)

    def _lose(self, slot: Slot, reason: str) -> None:
        if slot.handle is None:  # already lost to an earlier call
            return
        node = self.backend.where(slot.handle)
        slot.handle = None
        brokers = [broker for broker in slot.brokers if broker in self.up]
        self.up.difference_update(brokers)
        self.backend.gather(self._unsubscribe(brokers))
        self.lost += [LostBroker(broker, reason, node) for broker in brokers]

    def leave(self, broker: str, t_s: float) -> list[Published]:
        if broker not in self.up:
            return []
        # The host first: a realtime host stops ticking the broker, so no tick of it syncs after it left the pool.
        [published] = self.backend.gather([self.backend.call(self.host(broker), "leave", broker, t_s)])
        calls = self._unsubscribe([broker])
        if self.membership is not None:
            calls.append(self.backend.call(self.membership, "deregister", broker))
        if self.consensus is not None:
            calls.append(self.backend.call(self.consensus, "leave", broker, t_s))
        self.backend.gather(calls)
        self.up.discard(broker)
        slot = self.slot_of[broker]
        if len(slot.brokers) == 1:
            self.backend.kill(slot.handle)
            slot.handle = None
        return [published]

    def _unsubscribe(self, brokers: list[str]) -> list[object]:
        """The calls that take `brokers` off the simulated channel (a host's own endpoint drops its brokers as
        they stop, and dies with its host)."""
        if self.channel_on_hosts:
            return []
        return [self.backend.call(self.channel, "unsubscribe", broker) for broker in brokers]

    def _set_state(self, broker: str, state: BrokerState) -> None:
        """A broker's new workload or clock; a broker that is down gets it when it starts again."""
        self.states[broker] = state
        if broker in self.up:
            self.backend.gather([self.backend.call(self.host(broker), "set_state", broker, state)])

    # -- membership ------------------------------------------------------------------------------

    def send_heartbeats(self, t_s: float) -> list[object]:
        """Submit the live brokers' heartbeats and the expiry without waiting (the lockstep driver overlaps
        them with the publish phase: the registry depends on nothing else); `collect_dead` waits."""
        if self.membership is None or not self.registry_reachable:
            return []
        sessions = [(broker, self.states[broker].incarnation) for broker in sorted(self.up)]
        return [self.backend.call(self.membership, "heartbeat_all", sessions, t_s)]

    def sync_pool_sizes(self, t_s: float) -> list[object]:
        """Submit every live broker's sync of the pool-size consensus without waiting (lockstep)."""
        if self.consensus is None:
            return []
        return [self.backend.call(self.consensus, "sync_all", sorted(self.up), t_s)]

    def collect_pool_sizes(self, calls: list[object]) -> dict[str, tuple[int | None, bool]] | None:
        """The answers of the syncs submitted with `sync_pool_sizes` (None: no consensus in the run)."""
        if not calls:
            return None
        (pool_sizes,) = self.backend.gather(calls)
        return pool_sizes

    def issued(self) -> dict[str, int] | None:
        """Broker -> the highest incarnation the registry issued it (None without a registry)."""
        if self.membership is None:
            return None
        (issued,) = self.backend.gather([self.backend.call(self.membership, "issued")])
        return issued

    def serve(self, published: list[Published]) -> Roster | None:
        """Tell the registry the groups each broker started and stopped serving this round (lockstep), and return
        the roster's changes since the last call (None while the registry does not answer)."""
        if self.membership is None or not self.registry_reachable:
            return None
        changes = [(p.broker, p.incarnation, *p.serving) for p in published if p.broker in self.up]
        [(roster, self.roster_cursor)] = self.backend.gather(
            [self.backend.call(self.membership, "serve_all", changes, self.roster_cursor)]
        )
        return roster

    def collect_dead(self, calls: list[object]) -> list[Ended]:
        """The sessions ended, as announced by the expiry submitted with `send_heartbeats`."""
        if not calls:
            return []
        (dead,) = self.backend.gather(calls)
        return dead
