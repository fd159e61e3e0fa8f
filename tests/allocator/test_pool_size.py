"""Pool-size consensus (allocator.node.pool_size): the store's decisions and a member's rules, in memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.node.pool_size import Decision, MemoryConsensusStore, PoolSizeMember


def sync_round(members: list[PoolSizeMember], now_s: float) -> dict[str, int | None]:
    return {member.name: member.sync(now_s) for member in members}


def test_agree_needs_equal_sizes_that_match_the_number_of_members():
    store = MemoryConsensusStore(ttl_s=3.0)
    assert store.register("a", 0.0) == 1
    assert store.register("b", 0.0) == 2
    assert store.sync("a", 1, 0.0) == Decision(False, 2, 2)  # a reports 1, b's registration reported 2
    assert store.sync("a", 2, 0.0) == Decision(True, 2, 2)
    assert store.sync("b", 3, 0.0) == Decision(False, 3, 2)  # equal sizes are not enough: 3 != 2 members


def test_a_heartbeat_more_than_ttl_old_is_removed_with_its_size():
    store = MemoryConsensusStore(ttl_s=3.0)
    store.register("a", 0.0)
    store.register("b", 1.0)
    assert store.sync("b", 2, 2.9).members == 2
    assert store.sync("b", 2, 3.0).members == 2  # a's heartbeat at 0 is 3 s old: not more than the TTL
    assert store.sync("b", 2, 3.5) == Decision(False, 2, 1)  # now it is: gone, with its size
    assert store.sync("b", 1, 3.5) == Decision(True, 1, 1)


def test_a_newcomer_waits_for_agreement_and_the_others_take_the_larger_size_at_once():
    store = MemoryConsensusStore(ttl_s=3.0)
    a, b, c = (PoolSizeMember(name, store) for name in "abc")
    for member in (a, b):
        member.join(0.0)
    assert sync_round([a, b], 0.0) == {"a": None, "b": None}  # a reported 1 (its registration's count)
    assert sync_round([a, b], 1.0) == {"a": 2, "b": 2}
    c.join(2.0)
    assert sync_round([a, b, c], 2.0) == {"a": 3, "b": 3, "c": None}  # DISAGREE: the larger size, c waits
    assert sync_round([a, b, c], 3.0) == {"a": 3, "b": 3, "c": 3}


def test_the_pool_shrinks_after_a_leave_and_after_a_crash():
    store = MemoryConsensusStore(ttl_s=2.0)
    members = [PoolSizeMember(name, store) for name in "abcd"]
    for member in members:
        member.join(0.0)
    assert [sync_round(members, t_s) for t_s in (0.0, 1.0, 2.0)][-1] == dict.fromkeys("abcd", 4)
    members[3].leave()
    survivors = members[:3]
    assert sync_round(survivors, 3.0) == dict.fromkeys("abc", 4)  # DISAGREE: keep 4, report 3
    assert sync_round(survivors, 4.0) == {"a": 4, "b": 4, "c": 3}  # c reported last, when all had reported 3
    assert sync_round(survivors, 5.0) == dict.fromkeys("abc", 3)
    alive = survivors[:2]  # c crashes: its last heartbeat was at 5 s
    assert sync_round(alive, 6.0) == {"a": 3, "b": 3}  # 1 s old: still a member
    assert sync_round(alive, 7.0) == {"a": 3, "b": 3}  # 2 s old: not more than the TTL
    assert sync_round(alive, 8.0) == {"a": 3, "b": 3}  # expired: DISAGREE (3 reported, 2 members), keep 3
    assert sync_round(alive, 9.0) == {"a": 3, "b": 2}
    assert sync_round(alive, 10.0) == {"a": 2, "b": 2}


def test_the_memory_store_needs_a_time():
    with pytest.raises(ValueError, match="now_s"):
        MemoryConsensusStore(ttl_s=1.0).register("a", None)


# -- properties over random runs ------------------------------------------------------------------------------

NAMES = tuple("abcdef")


@st.composite
def churn(draw) -> list[tuple[str, str]]:
    """A sequence of rounds' membership changes: (kind, member) with kind join | leave | crash | none."""
    return draw(st.lists(st.tuples(st.sampled_from(("join", "leave", "crash", "none")), st.sampled_from(NAMES))))


def run_rounds(changes: list[tuple[str, str]], ttl_rounds: int, after_each_round) -> None:
    """Every round one change, then every live member syncs (in name order) at t = round."""
    store = MemoryConsensusStore(ttl_s=float(ttl_rounds))
    alive: dict[str, PoolSizeMember] = {}
    for round_index, (kind, name) in enumerate(changes):
        if kind == "join" and name not in alive:
            alive[name] = PoolSizeMember(name, store)
            alive[name].join(float(round_index))
        elif kind == "leave" and name in alive:
            alive.pop(name).leave()
        elif kind == "crash":
            alive.pop(name, None)
        sync_round([alive[key] for key in sorted(alive)], float(round_index))
        after_each_round(alive)


@settings(max_examples=200, deadline=None)
@given(changes=churn(), ttl_rounds=st.integers(1, 4))
def test_the_shares_of_the_live_members_never_add_up_to_more_than_the_pool(changes, ttl_rounds):
    """Each member takes pool / its pool size; a newcomer takes nothing until the store agrees."""

    def check(alive: dict[str, PoolSizeMember]) -> None:
        shares = sum(1.0 / member.pool_size for member in alive.values() if member.pool_size is not None)
        assert shares <= 1.0 + 1e-12

    run_rounds(changes, ttl_rounds, check)


@settings(max_examples=100, deadline=None)
@given(changes=churn(), ttl_rounds=st.integers(1, 4))
def test_without_changes_the_live_members_agree_on_their_number(changes, ttl_rounds):
    """After the last change, within the TTL and two rounds, every live member uses N = the number alive."""
    final: list[dict[str, int | None]] = []
    run_rounds(
        [*changes, *[("none", "a")] * (ttl_rounds + 2)],
        ttl_rounds,
        lambda alive: final.append({name: member.pool_size for name, member in alive.items()}),
    )
    assert set(final[-1].values()) <= {len(final[-1])}
