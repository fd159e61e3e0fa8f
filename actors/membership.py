"""Membership: a ZooKeeper stand-in with sessions, incarnations and death announcements.

A broker registers an incarnation (a restart registers a higher one) and keeps its session alive with
heartbeats; a session with no heartbeat for `session_timeout` expires. Every end of a session (expiry, clean
leave, or an incarnation superseded by a restart before it was declared dead) is appended once to an
announcement log. Lockstep drivers read it through `expire(now)`; realtime brokers poll it with a cursor
through `announcements(since)`. Time is passed in, in the caller's unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class _Session:
    incarnation: int
    last_heartbeat: float
    alive: bool = True


class Membership:
    """Registry of live brokers; a plain class the runtime may wrap as a Ray actor."""

    def __init__(self, session_timeout: float) -> None:
        if not (math.isfinite(session_timeout) and session_timeout > 0):
            raise ValueError(f"session_timeout must be finite and > 0, got {session_timeout!r}")
        self.session_timeout = session_timeout
        self._sessions: dict[str, _Session] = {}  # broker -> its latest incarnation's session
        self._log: list[tuple[str, int]] = []  # (broker, incarnation) per ended session, in order
        self._expire_cursor = 0

    def __repr__(self) -> str:
        return f"Membership(alive={self.alive()}, announced={len(self._log)}, session_timeout={self.session_timeout})"

    def register(self, broker: str, incarnation: int, now: float) -> None:
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
                session.last_heartbeat = now
                return
            if session.alive:
                self._announce(broker, session)
        self._sessions[broker] = _Session(incarnation, now)

    def heartbeat(self, broker: str, incarnation: int, now: float) -> bool:
        """Keep the session alive. Returns False (and changes nothing) for an unknown broker, an old
        incarnation, or a session that has already ended."""
        session = self._sessions.get(broker)
        if session is None or session.incarnation != incarnation or not session.alive:
            return False
        session.last_heartbeat = now
        return True

    def deregister(self, broker: str) -> None:
        """A clean leave: the session ends now and is announced. No effect if it has already ended."""
        session = self._sessions.get(broker)
        if session is not None and session.alive:
            self._announce(broker, session)

    def expire(self, now: float) -> list[tuple[str, int]]:
        """End every session whose last heartbeat is `session_timeout` or more before `now`, and return
        every announcement made since the previous call (expiries, leaves and superseded incarnations),
        each returned once."""
        for broker in sorted(self._sessions):
            session = self._sessions[broker]
            if session.alive and now - session.last_heartbeat >= self.session_timeout:
                self._announce(broker, session)
        fresh = self._log[self._expire_cursor :]
        self._expire_cursor = len(self._log)
        return fresh

    def announcements(self, since: int) -> tuple[list[tuple[str, int]], int]:
        """Announcements after cursor `since` (0: from the start) and the cursor to pass next time."""
        if not 0 <= since <= len(self._log):
            raise ValueError(f"announcement cursor {since!r} out of range [0, {len(self._log)}]")
        return self._log[since:], len(self._log)

    def heartbeat_all(self, sessions: list[tuple[str, int]], now: float) -> list[tuple[str, int]]:
        """A lockstep round in one call: every live broker's heartbeat, then `expire(now)`."""
        for broker, incarnation in sessions:
            self.heartbeat(broker, incarnation, now)
        return self.expire(now)

    def heartbeat_and_announcements(
        self, broker: str, incarnation: int, now: float, since: int
    ) -> tuple[list[tuple[str, int]], int]:
        """A realtime broker's tick in one call: its heartbeat, then the announcements after `since`."""
        self.heartbeat(broker, incarnation, now)
        return self.announcements(since)

    def alive(self) -> list[str]:
        """Brokers with a live session, sorted."""
        return sorted(broker for broker, session in self._sessions.items() if session.alive)

    def _announce(self, broker: str, session: _Session) -> None:
        session.alive = False
        self._log.append((broker, session.incarnation))
