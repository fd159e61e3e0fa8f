"""Membership: a ZooKeeper stand-in with sessions, incarnations, death announcements and the roster.

A broker registers an incarnation (a restart registers a higher one) and keeps its session alive with
heartbeats; a session with no heartbeat for `session_timeout` expires. Every end of a session (expiry, clean
leave, or an incarnation superseded by a restart before it was declared dead) is appended once to an
announcement log. Lockstep drivers read it through `expire(now_s)`; realtime brokers poll it with a cursor
through `announcements(since)`. Time is passed in: run seconds. A realtime call (`tick`, `keep_alive`) first
ends the sessions due by its time, as a ZooKeeper server expires sessions on its own clock between calls: a
broker reads a peer's end at its first call after it, not at the driver's next round.

The roster says which live broker serves which group, as Pulsar's metadata store says which broker owns a
bundle: a broker tells the registry when it starts or stops serving a group (`serve`), a session's end removes
every group it served, and brokers read the changes in order through a cursor (`roster_since`; cursor 0 gives
the current roster). The registry knows how far each broker has read, so it can tell a broker whether every live
broker has read its latest change (`Roster.acknowledged`): a newcomer takes room only once everyone knows it is
there. While the registry is unreachable (an outage) its sessions do not age: `resume` restarts
their clocks when it answers again, as a ZooKeeper ensemble does after it regains its quorum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np


class Ended(NamedTuple):
    """A session that ended: the broker and its incarnation."""

    broker: str
    incarnation: int


# The roster's changes are kept in at most this many chunks (then merged into one): a realtime broker's every tick
# that changes what it serves appends a chunk, so a long run's list grew without bound (a growing Python container),
# and reading the whole roster (a broker registering afresh, a session ending) walked every chunk in Python.
ROSTER_CHUNKS = 64
SESSION_EPS_S = 1e-9  # heartbeats at multiples of a float interval: a timeout of exactly N intervals is met


@dataclass
class _Session:
    incarnation: int
    last_heartbeat_s: float
    alive: bool = True


@dataclass(frozen=True)
class Roster:
    """Changes to who serves which group, in order: broker `brokers[i]` (its index in the plan) serves group
    `group_ids[i]` from then on if `serving[i]`, or no longer."""

    group_ids: np.ndarray  # int64
    brokers: np.ndarray  # int32
    serving: np.ndarray  # bool
    acknowledged: bool = True  # every live broker has read the reader's own latest change

    @classmethod
    def empty(cls) -> Roster:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, bool))

    @classmethod
    def concatenate(cls, parts: Sequence[Roster]) -> Roster:
        if not parts:
            return cls.empty()
        return cls(
            *(np.concatenate([getattr(part, name) for part in parts]) for name in ("group_ids", "brokers", "serving"))
        )

    def __len__(self) -> int:
        return len(self.group_ids)

    def current(self) -> Roster:
        """The listings in force once every change is applied (a broker serving each group), as additions."""
        key = self.group_ids * (int(self.brokers.max(initial=0)) + 1) + self.brokers
        last = len(key) - 1 - np.unique(key[::-1], return_index=True)[1]
        last = np.sort(last[self.serving[last]])
        return Roster(self.group_ids[last], self.brokers[last], self.serving[last])


class Membership:
    """Registry of live brokers and of the groups they serve; a plain class the runtime may wrap as a Ray actor.
    `brokers` are the plan's broker names in order (the roster names a broker by its index there)."""

    def __init__(self, session_timeout_s: float, brokers: Sequence[str] = ()) -> None:
        self.session_timeout_s = session_timeout_s
        self._sessions: dict[str, _Session] = {}  # broker -> its latest incarnation's session
        self._log: list[Ended] = []  # every ended session, in order
        self._expire_cursor = 0
        self._code = {broker: code for code, broker in enumerate(brokers)}
        self._roster: list[Roster] = []  # every change, in chunks
        self._roster_length = 0
        self._read: dict[str, int] = {}  # broker -> how far into the roster it has read
        self._changed_at: dict[str, int] = {}  # broker -> the roster's length after its latest change

    def __repr__(self) -> str:
        return f"Membership(alive={self.alive()}, announced={len(self._log)}, timeout={self.session_timeout_s} s)"

    def register(self, broker: str, incarnation: int, now_s: float, serves: np.ndarray | None = None) -> None:
        """Open a session for `incarnation` of `broker`, listed as serving the groups `serves` (global ids; its
        first tick corrects the list): as Pulsar's metadata store names a bundle's owner when it is assigned,
        before any traffic, so that its peers make room for it before it first reports.

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
        if serves is not None:
            self.serve(broker, incarnation, serves, np.zeros(0, np.int64))

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
        self._end_sessions_due(now_s)
        fresh = self._log[self._expire_cursor :]
        self._expire_cursor = len(self._log)
        return fresh

    def keep_alive(self, sessions: Sequence[tuple[str, int]], now_s: float) -> list[tuple[str, int]]:
        """A realtime host's heartbeats, between its brokers' ticks: the sessions due by `now_s` end first, then
        each of `sessions` is kept alive. Returns those kept: a heartbeat that came a timeout late finds its
        session ended (its peers took its room), and its broker must fence itself."""
        self._end_sessions_due(now_s)
        return [(broker, incarnation) for broker, incarnation in sessions if self.heartbeat(broker, incarnation, now_s)]

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

    def tick(
        self,
        broker: str,
        incarnation: int,
        now_s: float,
        since: int,
        roster_since: int,
        serving: tuple[np.ndarray, np.ndarray],
    ) -> tuple[list[Ended], int, dict[str, int], Roster, int]:
        """A realtime broker's tick in one call: its heartbeat and the groups it started and stopped serving, then
        the announcements after `since` and the roster's changes after `roster_since` (each with the cursor to
        pass next time), and the incarnations issued (`issued`: what the broker checks reports against). The
        sessions due by `now_s` end first: a broker whose own session ended finds it among the announcements."""
        self._end_sessions_due(now_s)
        self.heartbeat(broker, incarnation, now_s)
        self.serve(broker, incarnation, *serving)
        return (*self.announcements(since), self.issued(), *self.roster_since(roster_since, reader=broker))

    def resume(self, now_s: float) -> None:
        """The registry answers again after an outage: the live sessions' clocks restart now (a broker could not
        send a heartbeat while it was down, so none of them expires for it)."""
        for session in self._sessions.values():
            if session.alive:
                session.last_heartbeat_s = max(session.last_heartbeat_s, now_s)

    def serve(self, broker: str, incarnation: int, started: np.ndarray, stopped: np.ndarray) -> None:
        """`broker` starts serving the groups `started` and stops serving `stopped` (global ids); ignored unless its
        session for `incarnation` is alive."""
        session = self._sessions.get(broker)
        if session is None or session.incarnation != incarnation or not session.alive:
            return
        if len(started) or len(stopped):
            group_ids = np.concatenate([np.asarray(started, np.int64), np.asarray(stopped, np.int64)])
            serving = np.r_[np.ones(len(started), bool), np.zeros(len(stopped), bool)]
            self._append(Roster(group_ids, np.full(len(group_ids), self._code[broker], np.int32), serving))
            self._changed_at[broker] = self._roster_length

    def serve_all(self, changes: Sequence[tuple[str, int, np.ndarray, np.ndarray]], since: int) -> tuple[Roster, int]:
        """A lockstep round in one call: every broker's `serve`, then the roster's changes after `since`, which
        the driver hands to every live broker in the same phase (so every live broker has read them)."""
        for change in changes:
            self.serve(*change)
        for broker in self.alive():
            self._read[broker] = self._roster_length
        return self.roster_since(since)

    def roster_since(self, since: int, reader: str | None = None) -> tuple[Roster, int]:
        """The roster's changes after cursor `since` and the cursor to pass next time; cursor 0 gives the current
        roster (the listings in force) rather than its whole history. A `reader` is noted as having read it all,
        and told whether every live broker has read its own latest change (`acknowledged`)."""
        changes, length = self._changes_since(since)
        if reader is None:
            return changes, length
        self._read[reader] = length
        unread = min((self._read.get(broker, 0) for broker in self.alive()), default=length)
        return replace(changes, acknowledged=unread >= self._changed_at.get(reader, 0)), length

    def _changes_since(self, since: int) -> tuple[Roster, int]:
        if not 0 <= since <= self._roster_length:
            raise ValueError(f"roster cursor {since!r} out of range [0, {self._roster_length}]")
        if since == 0:
            return self.roster_as_of(self._roster_length), self._roster_length
        parts, start = [], self._roster_length
        for chunk in reversed(self._roster):  # the chunks after the cursor, the one it falls in cut
            if start <= since:
                break
            start -= len(chunk)
            parts.append(_tail(chunk, max(since - start, 0)))
        return Roster.concatenate(parts[::-1]), self._roster_length

    def roster_as_of(self, cursor: int) -> Roster:
        """The listings in force after the roster's first `cursor` changes: what a broker starting now must hold
        to read the changes after `cursor` with every other (lockstep: the driver's cursor)."""
        if not 0 <= cursor <= self._roster_length:
            raise ValueError(f"roster cursor {cursor!r} out of range [0, {self._roster_length}]")
        changes = Roster.concatenate(self._roster)
        return Roster(changes.group_ids[:cursor], changes.brokers[:cursor], changes.serving[:cursor]).current()

    def issued(self) -> dict[str, int]:
        """Broker -> the highest incarnation it registered: a report of a higher one (or of a broker never
        registered) was not issued by the registry, and receivers drop it."""
        return {broker: session.incarnation for broker, session in self._sessions.items()}

    def alive(self) -> list[str]:
        """Brokers with a live session, sorted."""
        return sorted(broker for broker, session in self._sessions.items() if session.alive)

    def _end_sessions_due(self, now_s: float) -> None:
        for broker in sorted(self._sessions):
            session = self._sessions[broker]
            if session.alive and now_s - session.last_heartbeat_s >= self.session_timeout_s - SESSION_EPS_S:
                self._announce(broker, session)

    def _announce(self, broker: str, session: _Session) -> None:
        session.alive = False
        self._log.append(Ended(broker, session.incarnation))
        code = self._code.get(broker)
        if code is not None and self._roster_length:
            current = Roster.concatenate(self._roster).current()
            groups = current.group_ids[current.brokers == code]
            self._append(Roster(groups, np.full(len(groups), code, np.int32), np.zeros(len(groups), bool)))

    def _append(self, changes: Roster) -> None:
        if len(changes):
            self._roster.append(changes)
            self._roster_length += len(changes)
            if len(self._roster) > ROSTER_CHUNKS:
                self._roster = [Roster.concatenate(self._roster)]


def _tail(changes: Roster, since: int) -> Roster:
    return Roster(changes.group_ids[since:], changes.brokers[since:], changes.serving[since:])
