"""The Redis consensus store gives the memory store's decisions on the same sequence of calls."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.registry.redis_consensus import RedisConsensusStore
from allocator.node.pool_size import MemoryConsensusStore, StoreUnreachableError

PREFIXES = itertools.count()

# (kind, member, reported size, seconds since the previous call): a register, a sync or a leave
calls = st.lists(
    st.tuples(
        st.sampled_from(("register", "sync", "sync", "leave")),
        st.sampled_from(("a", "b", "c", "d")),
        st.integers(1, 5),
        st.sampled_from((0.0, 0.1, 0.5, 1.0, 2.5)),
    ),
    max_size=40,
)


def play(store, sequence) -> list:
    answers, now_s = [], 1_000.0
    for kind, member, size, dt_s in sequence:
        now_s += dt_s
        if kind == "register":
            answers.append(store.register(member, now_s))
        elif kind == "sync":
            answers.append(store.sync(member, size, now_s))
        else:
            answers.append(store.leave(member))
    return answers


@settings(max_examples=25, deadline=None)
@given(sequence=calls, ttl_s=st.sampled_from((1.0, 2.0, 2.5)))
def test_same_calls_same_decisions(redis_server, sequence, ttl_s):
    redis_store = RedisConsensusStore(redis_server.url, f"test:{next(PREFIXES)}", ttl_s)
    try:
        assert play(redis_store, sequence) == play(MemoryConsensusStore(ttl_s), sequence)
    finally:
        redis_store.clear()
        redis_store.close()


def test_redis_clock_registers_and_agrees(redis_server):
    store = RedisConsensusStore(redis_server.url, "test:clock", ttl_s=30.0)
    try:
        assert store.register("a", None) == 1
        assert store.register("b", None) == 2
        assert store.sync("a", 2, None) == (True, 2, 2)
        store.leave("b")
        assert store.sync("a", 2, None) == (False, 2, 1)
        assert store.sync("a", 1, None) == (True, 1, 1)
    finally:
        store.clear()
        store.close()


def test_a_dead_server_raises_store_unreachable_instead_of_hanging(own_redis_server):
    store = RedisConsensusStore(own_redis_server.url, "test:dead", ttl_s=5.0, timeout_s=0.2)
    assert store.register("a", 0.0) == 1
    own_redis_server.stop()
    with pytest.raises(StoreUnreachableError, match="127.0.0.1"):
        store.sync("a", 1, 1.0)
    with pytest.raises(StoreUnreachableError):
        store.leave("a")
