"""Membership: session expiry, heartbeats, incarnations, clean leaves and the announcement cursor."""

import numpy as np
import pytest

from actors.registry.membership import Membership


def registered(*brokers: str, timeout: float = 3.0) -> Membership:
    membership = Membership(session_timeout_s=timeout)
    for name in brokers:
        membership.register(name, 0, now_s=0.0)
    return membership


def test_session_expires_after_the_timeout():
    membership = registered("a")
    assert membership.expire(2.9) == []
    assert membership.alive() == ["a"]
    assert membership.expire(3.0) == [("a", 0)]
    assert membership.alive() == []


def test_heartbeats_keep_a_session_alive():
    membership = registered("a", "b")
    for now in range(1, 10):
        assert membership.heartbeat("a", 0, float(now))
        assert membership.expire(float(now)) == ([("b", 0)] if now == 3 else [])
    assert membership.alive() == ["a"]


def test_a_death_is_announced_once():
    membership = registered("a")
    assert membership.expire(5.0) == [("a", 0)]
    assert membership.expire(9.0) == []
    assert not membership.heartbeat("a", 0, 9.0)  # an expired session does not come back
    assert membership.alive() == []
    assert membership.announcements(0) == ([("a", 0)], 1)


def test_restart_registers_a_new_incarnation_and_announces_the_old_one():
    membership = registered("a", "b")
    membership.register("a", 1, now_s=1.0)  # crashed and came back before its session expired
    assert membership.expire(1.0) == [("a", 0)]
    assert membership.alive() == ["a", "b"]
    assert not membership.heartbeat("a", 0, 2.0)  # the old incarnation is ignored...
    assert membership.heartbeat("a", 1, 2.0)
    assert membership.expire(3.5) == [("b", 0)]  # ...and the new one lives on its own heartbeats
    assert membership.expire(5.0) == [("a", 1)]


def test_restart_after_expiry_announces_nothing_more():
    membership = registered("a")
    assert membership.expire(4.0) == [("a", 0)]
    membership.register("a", 1, now_s=4.0)
    assert membership.expire(4.0) == []
    assert membership.alive() == ["a"]


def test_old_incarnation_heartbeat_does_not_delay_expiry():
    membership = registered("a")
    membership.register("a", 1, now_s=0.0)
    membership.expire(0.0)
    assert not membership.heartbeat("a", 0, 2.5)
    assert membership.expire(3.0) == [("a", 1)]


def test_registration_rules():
    membership = registered("a")
    membership.register("a", 0, now_s=2.0)  # the live incarnation again: a refresh
    assert membership.expire(4.0) == []
    with pytest.raises(ValueError, match="incarnation"):
        membership.register("a", -1, now_s=4.0)
    membership.deregister("a")
    with pytest.raises(ValueError, match="ended"):
        membership.register("a", 0, now_s=4.0)
    assert not membership.heartbeat("nobody", 0, 4.0)


def test_deregister_is_announced_and_gone():
    membership = registered("a", "b")
    membership.deregister("b")
    assert membership.alive() == ["a"]
    membership.deregister("b")  # a second leave changes nothing
    assert membership.expire(1.0) == [("b", 0)]
    assert membership.expire(10.0) == [("a", 0)]
    assert not membership.heartbeat("b", 0, 10.0)


def test_announcement_cursor():
    membership = registered("a", "b", "c")
    assert membership.announcements(0) == ([], 0)
    membership.deregister("a")
    news, cursor = membership.announcements(0)
    assert (news, cursor) == ([("a", 0)], 1)
    assert membership.announcements(cursor) == ([], 1)
    membership.heartbeat("c", 0, 2.0)
    membership.expire(3.0)
    news, cursor = membership.announcements(cursor)
    assert (news, cursor) == ([("b", 0)], 2)
    assert membership.announcements(0) == ([("a", 0), ("b", 0)], 2)
    for bad in (-1, 3):
        with pytest.raises(ValueError, match="cursor"):
            membership.announcements(bad)


def test_readers_do_not_disturb_each_other():
    """The lockstep reader (`expire`) and cursor readers see the same log independently."""
    membership = registered("a", "b")
    membership.deregister("a")
    assert membership.announcements(0) == ([("a", 0)], 1)
    assert membership.expire(0.0) == [("a", 0)]
    assert membership.announcements(0) == ([("a", 0)], 1)


def listed(membership: Membership) -> set[tuple[str, int]]:
    """(broker, group) pairs the registry's current roster lists as serving."""
    roster, _ = membership.roster_since(0)
    names = {code: name for name, code in membership._code.items()}
    pairs = zip(roster.group_ids, roster.brokers, roster.serving, strict=True)
    return {(names[int(broker)], int(group)) for group, broker, serving in pairs if serving}


def test_a_registration_lists_the_groups_at_once_and_its_peers_acknowledge_it_by_reading():
    membership = Membership(session_timeout_s=3.0, brokers=("a", "b"))
    membership.register("a", 0, now_s=0.0, serves=np.array([1, 2]))
    membership.roster_since(0, reader="a")
    membership.register("b", 0, now_s=1.0, serves=np.array([2, 3]))
    assert listed(membership) == {("a", 1), ("a", 2), ("b", 2), ("b", 3)}
    roster, cursor = membership.roster_since(0, reader="b")
    assert not roster.acknowledged  # "a" has not read b's listing yet
    membership.roster_since(2, reader="a")
    roster, _ = membership.roster_since(cursor, reader="b")
    assert roster.acknowledged
    membership.serve("b", 0, np.zeros(0, np.int64), np.array([3]))  # its first tick: group 3 is idle
    assert listed(membership) == {("a", 1), ("a", 2), ("b", 2)}
    membership.register("c", 0, now_s=1.0)  # no list: it tells the registry on its first tick
    assert "c" not in {broker for broker, _ in listed(membership)}


NO_CHANGE = (np.zeros(0, np.int64), np.zeros(0, np.int64))


def test_a_realtime_call_ends_the_sessions_due_by_its_time():
    """On timers no driver expires sessions between rounds: a broker's tick, or a host's heartbeats, end the
    sessions due by their time first, so a peer reads a crash at its first call a timeout after it."""
    membership = registered("a", "b", "c", timeout=1.0)
    assert membership.keep_alive([("b", 0), ("c", 0)], 0.6) == [("b", 0), ("c", 0)]
    ended, cursor, *_ = membership.tick("c", 0, 0.99, 0, 0, NO_CHANGE)
    assert ended == [] and membership.alive() == ["a", "b", "c"]
    ended, cursor, *_ = membership.tick("c", 0, 1.0, cursor, 0, NO_CHANGE)
    assert ended == [("a", 0)] and membership.alive() == ["b", "c"]


def test_keep_alive_answers_which_sessions_it_kept():
    """A heartbeat a timeout late finds its session ended (its broker must fence itself); one of a superseded
    incarnation or of a broker never registered keeps nothing."""
    membership = registered("a", "b", timeout=1.0)
    membership.register("b", 1, now_s=0.5)  # b restarted: incarnation 0 is superseded
    assert membership.keep_alive([("a", 0), ("b", 0), ("c", 0)], 0.9) == [("a", 0)]
    assert membership.keep_alive([("a", 0)], 1.8) == [("a", 0)]  # b's incarnation 1 ends (no heartbeat since 0.5)
    assert membership.keep_alive([("a", 0)], 2.8) == []  # 1.0 after the last: ended before it was read
    assert membership.announcements(0)[0] == [("b", 0), ("b", 1), ("a", 0)]


def test_a_long_roster_is_kept_in_few_chunks_and_reads_the_same_from_any_cursor():
    """Every serving change appends a chunk; past `ROSTER_CHUNKS` they are merged, and every cursor still reads
    exactly the changes after it, the current roster from cursor 0."""
    from actors.registry.membership import ROSTER_CHUNKS

    registry = Membership(session_timeout_s=10.0, brokers=["a", "b"])
    registry.register("a", 1, 0.0, np.array([0]))
    registry.register("b", 1, 0.0, np.array([1]))
    changes = [(0, 0, True), (1, 1, True)]  # (group, broker code, serving), in order
    for step in range(3 * ROSTER_CHUNKS):
        group = 2 + step % 7
        serving = step % 2 == 0
        started, stopped = (
            (np.array([group]), np.array([], np.int64)) if serving else (np.array([], np.int64), np.array([group]))
        )
        registry.serve("a", 1, started, stopped)
        changes.append((group, 0, serving))
    assert len(registry._roster) <= ROSTER_CHUNKS
    for since in (1, 2, 50, len(changes) - 1, len(changes)):
        read, length = registry.roster_since(since)
        assert length == len(changes)
        assert (
            list(zip(read.group_ids.tolist(), read.brokers.tolist(), read.serving.tolist(), strict=True))
            == changes[since:]
        )
    listed = set()
    for group, broker, serving in changes:
        (listed.add if serving else listed.discard)((group, broker))
    current, _ = registry.roster_since(0)
    assert sorted(zip(current.group_ids.tolist(), current.brokers.tolist(), strict=True)) == sorted(listed)
