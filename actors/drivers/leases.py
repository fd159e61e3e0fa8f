"""A realtime broker's lease on its registry session: the heartbeats that keep it, and when it runs out.

A host sends its brokers' heartbeats three times per session timeout (`HEARTBEATS_PER_TIMEOUT`), as a ZooKeeper
client pings at a third of its timeout: a session outlives two late heartbeats, and ends within a timeout of a
crash. A broker whose last heartbeat the registry took is two of those periods old has lost its lease: the registry
may end its session within one more period, and its peers then take its room. It fences itself before that
(`actors.drivers.realtime.RealtimeHost`), as a Pulsar broker whose metadata-store session expires shuts down.
"""

from __future__ import annotations

from collections.abc import Iterable

from actors.registry.membership import SESSION_EPS_S

HEARTBEATS_PER_TIMEOUT = 3


class Leases:
    """When the registry last took each session's heartbeat `(broker, incarnation)`, on the run's clock."""

    def __init__(self, session_timeout_s: float) -> None:
        self.heartbeat_period_s = session_timeout_s / HEARTBEATS_PER_TIMEOUT
        self.lease_s = session_timeout_s * (HEARTBEATS_PER_TIMEOUT - 1) / HEARTBEATS_PER_TIMEOUT
        self._taken_s: dict[tuple[str, int], float] = {}

    def taken(self, sessions: Iterable[tuple[str, int]], t_s: float) -> None:
        """The registry took these sessions' heartbeats (or registered them) at `t_s`: their leases restart."""
        for broker, incarnation in sessions:
            self._taken_s[broker, incarnation] = t_s

    def lapsed_for_s(self, session: tuple[str, int], t_s: float) -> float | None:
        """If the lease of `session` ran out by `t_s`, the time since its last heartbeat taken; else None (a
        session not seen yet has a fresh lease)."""
        silent_s = t_s - self._taken_s.get(session, t_s)
        return silent_s if silent_s >= self.lease_s - SESSION_EPS_S else None
