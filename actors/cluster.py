"""The simulated cluster: which broker lives on which host, who is up, and how events change that.

Drivers (lockstep, realtime) own time; the cluster owns placement and state, and applies the scenario's
events the same way for both. The channel and the membership registry are objects (or actors) of the
backend like the hosts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from actors.backends import Backend
from actors.broker_host import BrokerHost, BrokerRecord, Load, Published
from actors.channel import Channel
from actors.config import EventSpec, Profile, Scenario
from actors.membership import Membership

DEFAULT_MSG_BYTES = 1000.0


@dataclass
class Slot:
    """A host and the brokers placed on it; a host holding one broker dies with it on a crash."""

    brokers: tuple[str, ...]
    handle: object | None = None


class Cluster:
    def __init__(
        self,
        scenario: Scenario,
        backend: Backend,
        run_id: str,
        time_per_round: float = 1.0,
        host_class: type = BrokerHost,
    ):
        self.scenario = scenario
        self.host_class = host_class
        self.on_new_host: Callable[[object], None] | None = None  # e.g. start a realtime host's timer
        self.backend = backend
        self.run_id = run_id
        self.time_per_round = time_per_round
        self.quotas = {group.name: dict(group.quota) for group in scenario.groups}
        self.group_ids = {group.name: index for index, group in enumerate(scenario.groups)}
        self.records = {broker.name: _record(broker.name, scenario) for broker in scenario.brokers}
        self.up: set[str] = set()
        self.started: set[str] = set()
        per_host = max(1, scenario.brokers_per_actor)
        names = [broker.name for broker in scenario.brokers]
        self.slots = [Slot(tuple(names[i : i + per_host])) for i in range(0, len(names), per_host)]
        self.slot_of = {name: slot for slot in self.slots for name in slot.brokers}
        self.channel = backend.create(Channel, scenario.channel, scenario.seed, time_per_round)
        timeout = scenario.cleanup.session_timeout_rounds * time_per_round
        self.membership = backend.create(Membership, timeout) if scenario.cleanup.membership else None

    # -- placement -------------------------------------------------------------------------------

    def host(self, broker: str) -> object:
        slot = self.slot_of[broker]
        if slot.handle is None:
            slot.handle = self.backend.create(self.host_class, self.scenario, self.run_id)
            if self.on_new_host is not None:
                self.on_new_host(slot.handle)
        return slot.handle

    def all_hosts(self) -> list[object]:
        return [slot.handle for slot in self.slots if slot.handle is not None]

    def events_at(self, round_index: int) -> list[EventSpec]:
        return [event for event in self.scenario.events if event.at == round_index]

    def live_slots(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.handle is not None and set(slot.brokers) & self.up]

    def live_hosts(self) -> list[object]:
        return [slot.handle for slot in self.live_slots()]

    def shards_of(self, broker: str) -> list[int]:
        shards = self.scenario.channel.shards
        return sorted({self.group_ids[group] % shards for group in self.records[broker].groups})

    # -- events ----------------------------------------------------------------------------------

    def brokers_joining(self, round_index: int) -> list[str]:
        return [b.name for b in self.scenario.brokers if b.join_at == round_index and b.name not in self.up]

    def apply(self, event: EventSpec, t: float) -> list[Published]:
        """Apply one event; returns reports it makes brokers publish (a clean leave's zeros)."""
        kind, target, params = event.kind, event.target, event.params
        if kind in ("join", "restart"):
            self.crash(target)  # a no-op unless it is up
            self.start(target, t)
        elif kind == "crash":
            self.crash(target)
        elif kind == "leave":
            return self.leave(target, t)
        elif kind == "demand":
            self._set_demand(target, params["group"], params["msgs_per_s"], event.at)
        elif kind == "quota":
            self.quotas[target].update({dim: rate for dim, rate in params.items() if dim != "group"})
            self.backend.gather([self.backend.call(h, "set_quota", self.quotas) for h in self.live_hosts()])
        elif kind == "channel":
            self.backend.gather([self.backend.call(self.channel, "configure", **params)])
        elif kind == "clock_skew":
            self.records[target].clock_offset_s = float(params["offset_s"])
            if target in self.up:
                self.backend.gather(
                    [
                        self.backend.call(
                            self.host(target), "set_clock_offset", target, self.records[target].clock_offset_s
                        )
                    ]
                )
        else:
            raise ValueError(f"unknown event kind {kind!r}")
        return []

    def start(self, broker: str, t: float) -> None:
        """Bring a broker up; every start after the first is a new incarnation (its sequence restarts)."""
        record = self.records[broker]
        if broker in self.started:
            record.incarnation += 1
        self.started.add(broker)
        calls = [
            self.backend.call(self.host(broker), "start", record, self.quotas, t),
            self.backend.call(self.channel, "subscribe", broker, self.shards_of(broker)),
        ]
        if self.membership is not None:
            calls.append(self.backend.call(self.membership, "register", broker, record.incarnation, t))
        self.backend.gather(calls)
        self.up.add(broker)

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
        self.backend.gather([self.backend.call(self.channel, "unsubscribe", broker)])

    def leave(self, broker: str, t: float) -> list[Published]:
        if broker not in self.up:
            return []
        host = self.host(broker)
        calls = [self.backend.call(host, "leave", broker, t), self.backend.call(self.channel, "unsubscribe", broker)]
        if self.membership is not None:
            calls.append(self.backend.call(self.membership, "deregister", broker))
        published = self.backend.gather(calls)[0]
        self.up.discard(broker)
        slot = self.slot_of[broker]
        if len(slot.brokers) == 1:
            self.backend.kill(slot.handle)
            slot.handle = None
        return [published]

    def _set_demand(self, broker: str, group: str, rate: Profile | float, at: int) -> None:
        profile = rate if isinstance(rate, Profile) else Profile("constant", {"rate": float(rate)})
        current = self.records[broker].loads.get(group)
        load = Load(profile, at, current.msg_bytes if current else DEFAULT_MSG_BYTES)
        self.records[broker].loads[group] = load
        if broker in self.up:
            self.backend.gather([self.backend.call(self.host(broker), "set_load", broker, group, load)])

    # -- membership ------------------------------------------------------------------------------

    def send_heartbeats(self, t: float) -> list[object]:
        """Submit the live brokers' heartbeats and the expiry without waiting (the lockstep driver overlaps
        them with the publish phase: the registry depends on nothing else); `collect_dead` waits."""
        if self.membership is None:
            return []
        sessions = [(broker, self.records[broker].incarnation) for broker in sorted(self.up)]
        return [self.backend.call(self.membership, "heartbeat_all", sessions, t)]

    def collect_dead(self, calls: list[object]) -> list[tuple[str, int]]:
        """The dead announced by the expiry submitted with `send_heartbeats`."""
        if not calls:
            return []
        (dead,) = self.backend.gather(calls)
        return [tuple(entry) for entry in dead]


def _record(name: str, scenario: Scenario) -> BrokerRecord:
    spec = next(broker for broker in scenario.brokers if broker.name == name)
    loads: dict[str, Load] = {}
    for workload in spec.workload:
        loads[workload.group] = Load(workload.msgs_per_s, spec.join_at, workload.msg_bytes)
    demanded = [e.params["group"] for e in scenario.events if e.kind == "demand" and e.target == name]
    groups = tuple(dict.fromkeys([*loads, *demanded]))
    return BrokerRecord(name=name, groups=groups, loads=loads)


def event_row(event: EventSpec, round_index: int, t_s: float) -> dict[str, object]:
    detail = {key: (value.__dict__ if isinstance(value, Profile) else value) for key, value in event.params.items()}
    return {
        "round": round_index,
        "t_s": t_s,
        "kind": event.kind,
        "target": event.target,
        "detail": json.dumps(detail, default=str),
    }
