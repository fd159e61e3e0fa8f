"""Membership: a ZooKeeper stand-in with sessions, incarnations and death announcements.

A broker registers an incarnation (a restart registers a higher one) and keeps its session alive with
heartbeats; a session with no heartbeat for `session_timeout` expires. Every end of a session (expiry, clean
leave, or an incarnation superseded by a restart before it was declared dead) is appended once to an
announcement log. Lockstep drivers read it through `expire(now_s)`; realtime brokers poll it with a cursor
through `announcements(since)`. Time is passed in: run seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Ended(NamedTuple):
    """A session that ended: the broker and its incarnation."""

    broker: str
    incarnation: int


_EPS_S = 1e-9  # heartbeats at multiples of a float interval: a timeout of exactly N intervals is met


@dataclass
class _Session:
    incarnation: int
    last_heartbeat_s: float
    alive: bool = True


class Membership:
    """Registry of live brokers; a plain class the runtime may wrap as a Ray actor."""

    def __init__(self, session_timeout_s: float) -> None:
        self.session_timeout_s = session_timeout_s
        self._sessions: dict[str, _Session] = {}  # broker -> its latest incarnation's session
        self._log: list[Ended] = []  # every ended session, in order
        self._expire_cursor = 0

    def __repr__(self) -> str:
        return f"Membership(alive={self.alive()}, announced={len(self._log)}, timeout={self.session_timeout_s} s)"

    def register(self, broker: str, incarnation: int, now_s: float) -> None:
        """Open a session for `incarnation` of `broker`.

        A higher incarnation is a restart: the previous one is announced dead unless it already was.
        Registering the live incarnation again only refreshes it; an older or already-dead incarnation is
        refused, since its session cannot come back.
        """
        session = self._sessions.get(broker)
        if session is not None:
            ended = incarnation == session.incarnation and not session.alive
            if incarnation < session.incarnation or ended:
                raise ValueError(
                    f"broker {broker!r} cannot register incarnation {incarnation}: incarnation "
                    f"{session.incarnation} was already registered{'' if session.alive else ' and has ended'}"
                )
            if incarnation == session.incarnation:
                session.last_heartbeat_s = now_s
                return
            if session.alive:
                self._announce(broker, session)
        self._sessions[broker] = _Session(incarnation, now_s)

    def heartbeat(self, broker: str, incarnation: int, now_s: float) -> bool:
        """Keep the session alive. Returns False (and changes nothing) for an unknown broker, an old
        incarnation, or a session that has already ended."""
        session = self._sessions.get(broker)
        if session is None or session.incarnation != incarnation or not session.alive:
            return False
        session.last_heartbeat_s = now_s
        return True

    def deregister(self, broker: str) -> None:
        """A clean leave: the session ends now_s and is announced. No effect if it has already ended."""
        session = self._sessions.get(broker)
        if session is not None and session.alive:
            self._announce(broker, session)

    def expire(self, now_s: float) -> list[Ended]:
        """End every session whose last heartbeat is `session_timeout` or more before `now_s`, and return
        every announcement made since the previous call (expiries, leaves and superseded incarnations),
        each returned once."""
        for broker in sorted(self._sessions):
            session = self._sessions[broker]
            if session.alive and now_s - session.last_heartbeat_s >= self.session_timeout_s - _EPS_S:
                self._announce(broker, session)
        fresh = self._log[self._expire_cursor :]
        self._expire_cursor = len(self._log)
        return fresh

    def announcements(self, since: int) -> tuple[list[Ended], int]:
        """Announcements after cursor `since` (0: from the start) and the cursor to pass next time."""
        if not 0 <= since <= len(self._log):
            raise ValueError(f"announcement cursor {since!r} out of range [0, {len(self._log)}]")
        return self._log[since:], len(self._log)

    def heartbeat_all(self, sessions: list[tuple[str, int]], now_s: float) -> list[Ended]:
        """A lockstep round in one call: every live broker's heartbeat, then `expire(now_s)`."""
        for broker, incarnation in sessions:
            self.heartbeat(broker, incarnation, now_s)
        return self.expire(now_s)

    def heartbeat_and_announcements(
        self, broker: str, incarnation: int, now_s: float, since: int
    ) -> tuple[list[Ended], int, dict[str, int]]:
        """A realtime broker's tick in one call: its heartbeat, then the announcements after `since` with the
        cursor to pass next time, and the incarnations issued (`issued`: what the broker checks reports against)."""
        self.heartbeat(broker, incarnation, now_s)
        return (*self.announcements(since), self.issued())

    def issued(self) -> dict[str, int]:
        """Broker -> the highest incarnation it registered: a report of a higher one (or of a broker never
        registered) was not issued by the registry, and receivers drop it."""
        return {broker: session.incarnation for broker, session in self._sessions.items()}

    def alive(self) -> list[str]:
        """Brokers with a live session, sorted."""
        return sorted(broker for broker, session in self._sessions.items() if session.alive)

    def _announce(self, broker: str, session: _Session) -> None:
        session.alive = False
        self._log.append(Ended(broker, session.incarnation))
