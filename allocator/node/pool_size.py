"""Pool-size consensus by heartbeats (Numaflow's distributed throttling): the store's rules and a member's.

The brokers agree on the pool size N, the number of brokers the quota is split between, through a shared
store that holds every member's last heartbeat and the pool size it last reported. Each `sync` is one
step, atomic in the store:

1. the member's heartbeat (the time) and its reported size are written;
2. every member whose last heartbeat is more than `ttl_s` old is removed (its heartbeat and its size);
3. AGREE with N when the smallest and the largest reported sizes are equal and equal to the number of
   members left; otherwise DISAGREE with the largest size reported (and that number of members).

A member (`PoolSizeMember`) follows the seed's consumer rules: a newcomer registers (reporting the number of
members, itself included) and waits, splitting nothing, until the first AGREE; on DISAGREE a member keeps
the larger of the size it uses and the largest reported (conservative: a smaller share each), and reports the
number of members it was told, so that everyone converges on it and agrees. Unlike Numaflow, the number of
members falls when members leave or expire, so N shrinks after a leave or a crash instead of keeping the
survivors at (N-1)/N of the pool.

Time is passed in (`now_s`, seconds on any one clock the members share); `MemoryConsensusStore` is the
deterministic store of lockstep runs and tests; `actors.registry.redis_consensus.RedisConsensusStore` is the real
one, with the same decisions on the same sequence of calls.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Decision(NamedTuple):
    """The store's answer to one sync."""

    agreed: bool
    pool_size: int  # AGREE: the agreed size; DISAGREE: the largest size reported
    members: int  # members with a live heartbeat after the clean-up, the caller included


class StoreUnreachableError(Exception):
    """The store could not be asked (a real store's connection failed or timed out)."""


class ConsensusStore(Protocol):
    """What both stores offer. `now_s` None: the store's own clock (a real store; the memory store needs it)."""

    ttl_s: float

    def register(self, member: str, now_s: float | None) -> int:
        """Heartbeat, clean up, and report the number of members (itself included), which is returned."""
        ...

    def sync(self, member: str, reported_size: int, now_s: float | None) -> Decision:
        """Heartbeat with `reported_size`, clean up, and decide (the three steps above, atomically)."""
        ...

    def leave(self, member: str) -> None:
        """A clean leave: the member's heartbeat and size are removed at once."""
        ...


class MemoryConsensusStore:
    """The store in one process: two dicts standing for Redis's two sorted sets."""

    def __init__(self, ttl_s: float) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self.ttl_s = ttl_s
        self._heartbeat_s: dict[str, float] = {}
        self._reported: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"MemoryConsensusStore(members={len(self._heartbeat_s)}, ttl={self.ttl_s} s)"

    def register(self, member: str, now_s: float | None) -> int:
        self._beat(member, _required(now_s))
        members = len(self._heartbeat_s)
        self._reported[member] = members
        return members

    def sync(self, member: str, reported_size: int, now_s: float | None) -> Decision:
        self._beat(member, _required(now_s))
        self._reported[member] = int(reported_size)
        members = len(self._heartbeat_s)
        low, high = min(self._reported.values()), max(self._reported.values())
        return Decision(low == high == members, high, members)

    def leave(self, member: str) -> None:
        self._heartbeat_s.pop(member, None)
        self._reported.pop(member, None)

    def _beat(self, member: str, now_s: float) -> None:
        """The heartbeat, then the clean-up: a heartbeat before `now_s - ttl_s` is stale (a TTL of one sync
        interval keeps members that sync every interval)."""
        self._heartbeat_s[member] = now_s
        cutoff_s = now_s - self.ttl_s
        for stale in [name for name, beat_s in self._heartbeat_s.items() if beat_s < cutoff_s]:
            del self._heartbeat_s[stale]
            self._reported.pop(stale, None)


def _required(now_s: float | None) -> float:
    if now_s is None:
        raise ValueError("the memory store has no clock of its own: pass now_s")
    return float(now_s)


class PoolSizeMember:
    """One broker's side of the consensus: the pool size it splits by and the size it reports next."""

    def __init__(self, name: str, store: ConsensusStore) -> None:
        self.name = name
        self.store = store
        self.pool_size: int | None = None  # None: a newcomer waiting for the first agreement
        self.reporting = 0
        self.last: Decision | None = None

    def __repr__(self) -> str:
        return f"PoolSizeMember({self.name!r}, pool_size={self.pool_size}, reporting={self.reporting})"

    def join(self, now_s: float | None) -> None:
        """Register; the member waits (pool size None) until the store agrees."""
        self.pool_size, self.last = None, None
        self.reporting = self.store.register(self.name, now_s)

    def sync(self, now_s: float | None) -> int | None:
        """One heartbeat: the store's decision applied; returns the pool size to split by (None: waiting).

        Raises `StoreUnreachableError` (nothing changed) when the store cannot be asked."""
        decision = self.store.sync(self.name, self.reporting, now_s)
        self.last = decision
        if decision.agreed:
            self.pool_size = self.reporting = decision.pool_size
        else:
            if self.pool_size is not None:
                self.pool_size = max(self.pool_size, decision.pool_size, decision.members)
            self.reporting = decision.members
        return self.pool_size

    def leave(self) -> None:
        self.store.leave(self.name)
        self.pool_size = None
