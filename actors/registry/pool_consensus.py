"""The pool-size consensus of a run: every broker's `PoolSizeMember` on one store (memory or Redis).

A plain class the runtime may wrap as a Ray actor, like the membership registry. The lockstep driver syncs
every live broker at once (`sync_all`, in name order, on run time: deterministic); a realtime host syncs
each broker on its own tick (`sync`), and with Redis the store stamps heartbeats with its own clock (`TIME`).

A store that cannot be reached never stops a run: the broker keeps the last pool size it had, the change of
reachability is logged once (`registry_unreachable`, then `registry_reachable`) for the driver to write into
the `events` table (`take_events`), and a broker that could not register registers at its next sync.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable

from actors.plan import ConsensusPlan
from allocator.node.pool_size import ConsensusStore, MemoryConsensusStore, PoolSizeMember, StoreUnreachableError


def make_store(plan: ConsensusPlan, run_name: str) -> ConsensusStore:
    """The plan's store; a Redis pool gets keys of its own (`quotalab:<run>:<random>`), emptied first."""
    if plan.store == "memory":
        return MemoryConsensusStore(plan.ttl_s)
    from actors.registry.redis_consensus import RedisConsensusStore  # only realtime runs with Redis need the client

    store = RedisConsensusStore(plan.url, f"quotalab:{run_name}:{uuid.uuid4().hex[:12]}", plan.ttl_s)
    store.clear()
    return store


class PoolConsensus:
    """The brokers' side of the consensus: members by broker name, and the store's reachability."""

    def __init__(self, plan: ConsensusPlan, run_name: str) -> None:
        self.store = make_store(plan, run_name)
        self._clock = plan.store == "memory"  # Redis stamps heartbeats with its own clock
        self._members: dict[str, PoolSizeMember] = {}
        self._unregistered: set[str] = set()
        self.reachable = True
        self._events: list[tuple[float, str, str, str]] = []  # (t_s, kind, broker, detail)

    def __repr__(self) -> str:
        return f"PoolConsensus({self.store!r}, members={sorted(self._members)}, reachable={self.reachable})"

    def join(self, broker: str, t_s: float) -> None:
        """A broker starts (a join or a restart): it registers and waits for agreement."""
        member = self._members[broker] = PoolSizeMember(broker, self.store)
        self._unregistered.add(broker)
        self._try(broker, t_s, lambda: self._register(member, t_s))

    def leave(self, broker: str, t_s: float) -> None:
        """A clean leave: the broker's heartbeat and size go at once (if the store can be reached)."""
        member = self._members.pop(broker, None)
        self._unregistered.discard(broker)
        if member is not None:
            self._try(broker, t_s, member.leave)

    def crash(self, broker: str) -> None:
        """No goodbye: the store drops the broker once its heartbeat is older than the TTL."""
        self._members.pop(broker, None)
        self._unregistered.discard(broker)

    def sync(self, broker: str, t_s: float) -> tuple[int | None, bool]:
        """One broker's heartbeat: the pool size it splits by (None: waiting) and whether the store answered."""
        member = self._members[broker]

        def step() -> None:
            if broker in self._unregistered:
                self._register(member, t_s)
            member.sync(self._now(t_s))

        reachable = self._try(broker, t_s, step)
        return member.pool_size, reachable

    def sync_all(self, brokers: list[str], t_s: float) -> dict[str, tuple[int | None, bool]]:
        """A lockstep round: every broker of `brokers` syncs, in name order."""
        return {broker: self.sync(broker, t_s) for broker in sorted(brokers)}

    def take_events(self) -> list[tuple[float, str, str, str]]:
        """The reachability changes since the last call: (t_s, kind, broker that noticed, detail as JSON)."""
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """The run is over: a Redis pool's keys are deleted (if Redis answers) and its connection closed."""
        if isinstance(self.store, MemoryConsensusStore):
            return
        with contextlib.suppress(StoreUnreachableError):
            self.store.clear()
        self.store.close()

    def _register(self, member: PoolSizeMember, t_s: float) -> None:
        member.join(self._now(t_s))
        self._unregistered.discard(member.name)

    def _now(self, t_s: float) -> float | None:
        return t_s if self._clock else None

    def _try(self, broker: str, t_s: float, action: Callable[[], object]) -> bool:
        """Run `action` on the store; log a change of reachability; True when the store answered."""
        try:
            action()
        except StoreUnreachableError as error:
            if self.reachable:
                self.reachable = False
                self._events.append((t_s, "registry_unreachable", broker, json.dumps({"error": str(error)})))
            return False
        if not self.reachable:
            self.reachable = True
            self._events.append((t_s, "registry_reachable", broker, "{}"))
        return True
