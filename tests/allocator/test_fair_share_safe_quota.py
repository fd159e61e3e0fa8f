"""fair-share-safe on a quota change: the limits scale at once, each at most its broker's fair share of the new
quota, and the group holds the new quota (plus the floors) right after a cut, also when brokers see it a round
apart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_broker_node import T0, exchange, node

from allocator.node.broker_node import MIN_LIMIT
from allocator.node.one_group import registry_round
from allocator.policies import RECOMMENDED

SAFE = RECOMMENDED


def test_a_quota_cut_rescales_the_limits_at_once():
    brokers = {name: node(name, [150.0], policy=SAFE) for name in "abcde"}
    for round_index in range(3):
        exchange(brokers, {name: [30.0] for name in brokers}, T0 + round_index)
    assert sum(broker.limit[0, 0] for broker in brokers.values()) == pytest.approx(150.0)
    for broker in brokers.values():
        broker.set_quota(np.array([[80.0]]))
    assert [broker.limit[0, 0] for broker in brokers.values()] == pytest.approx([16.0] * 5)
    traffic = exchange(brokers, {name: [30.0] for name in brokers}, T0 + 3)
    assert sum(t.usage[0, 0] for t in traffic.values()) == pytest.approx(80.0)
    literal = node("p", [150.0], policy="fair-share")
    literal.admit(np.array([30.0]), np.array([100.0]), T0)
    literal.set_quota(np.array([[80.0]]))
    assert literal.limit[0, 0] == 150.0  # the references: at the next allocation


def test_the_first_broker_to_see_a_cut_takes_its_part_of_it_not_the_floor():
    """On real timers brokers see a quota change up to a round apart: the first to see a cut still hears its
    peers' usage under the old quota, and counts each at its part of the new one (each scales its limit the
    same way when it sees the change)."""
    brokers = {name: node(name, [150.0], policy=SAFE) for name in "abcde"}
    for round_index in range(3):
        exchange(brokers, {name: [30.0] for name in brokers}, T0 + round_index)
    first = brokers["a"]
    first.set_quota(np.array([[80.0]]))
    first.allocate()  # its peers' reports still say 30 each
    assert first.limit[0, 0] == pytest.approx(16.0)
    for broker in brokers.values():
        if broker is not first:
            broker.set_quota(np.array([[80.0]]))
    traffic = exchange(brokers, {name: [30.0] for name in brokers}, T0 + 3)
    assert [t.usage[0, 0] for t in traffic.values()] == pytest.approx([16.0] * 5)


@settings(max_examples=100, deadline=None)
@given(
    demand=st.lists(st.floats(1.0, 500.0), min_size=1, max_size=5),
    old_quota=st.floats(10.0, 1000.0),
    new_quota=st.floats(10.0, 1000.0),
)
def test_after_a_quota_cut_the_limits_never_add_up_beyond_the_new_quota(demand, old_quota, new_quota):
    names = [f"b{i}" for i in range(len(demand))]
    brokers = {name: node(name, [old_quota], policy=SAFE) for name in names}
    wanted = {name: [rate_] for name, rate_ in zip(names, demand, strict=True)}
    for round_index in range(4):
        exchange(brokers, wanted, T0 + round_index)
    total = sum(broker.limit[0, 0] for broker in brokers.values())
    assert total <= old_quota * (1 + 1e-9)
    for broker in brokers.values():
        broker.set_quota(np.array([[new_quota]]))
    rescaled = sum(broker.limit[0, 0] for broker in brokers.values())
    assert rescaled <= new_quota * (1 + 1e-9) + len(names) * MIN_LIMIT  # each limit floored at MIN_LIMIT
    exchange(brokers, wanted, T0 + 4)
    assert sum(broker.limit[0, 0] for broker in brokers.values()) <= new_quota * (1 + 1e-9) + len(names) * MIN_LIMIT


def test_a_broker_that_sees_a_cut_a_round_late_takes_no_more_than_its_fair_share_of_the_new_quota():
    """a holds 70 of 80 beside b (10); b leaves and comes back, then sees a cut to 35 a round before a. Back as a
    newcomer, b counts a at a's share (a steps down for it when it reads b's listing), and under the new quota
    that is 25: b keeps its 10. When a sees the cut, its limit scaled by 35 / 80 (30.6) would take the group
    over; it takes its share, 25."""
    brokers = {name: node(name, [80.0], policy=SAFE) for name in "ab"}
    for round_index in range(9):
        if round_index == 7:
            brokers["b"].set_quota(np.array([[35.0]]))
        if round_index == 8:
            brokers["a"].set_quota(np.array([[35.0]]))
        usage = registry_round(brokers, {"a": 130.0, "b": 0.0 if round_index == 5 else 10.0}, T0 + round_index)
    assert usage == pytest.approx({"a": 25.0, "b": 10.0})


@settings(max_examples=150, deadline=None)
@given(
    demand=st.lists(st.sampled_from([2.0, 10.0, 15.0, 50.0, 130.0, 200.0]), min_size=2, max_size=4),
    old_quota=st.sampled_from([35.0, 80.0, 170.0, 260.0]),
    new_quota=st.sampled_from([35.0, 80.0, 170.0, 260.0]),
    late=st.lists(st.booleans(), min_size=4, max_size=4),
    pauses=st.lists(st.tuples(st.integers(5, 8), st.integers(0, 2)), min_size=4, max_size=4),
    loss=st.lists(st.booleans(), min_size=10 * 12, max_size=10 * 12),
)
def test_the_limits_hold_the_quota_when_brokers_see_a_change_a_round_apart(
    demand, old_quota, new_quota, late, pauses, loss
):
    """On timers brokers see a quota change up to a round apart (here at round 7, the `late` ones at 8), while
    brokers stop serving the group and come back around it and reports are lost: in every round the group admits
    no more than the larger quota any broker holds (the new one once all see it), plus the floors."""
    names = [f"b{i}" for i in range(len(demand))]
    brokers = {name: node(name, [old_quota], policy=SAFE) for name in names}
    draws = iter(loss)
    for round_index in range(10):
        for name, is_late in zip(names, late, strict=False):
            if round_index == 7 + is_late:
                brokers[name].set_quota(np.array([[new_quota]]))
        held = {broker.quota[0, 0] for broker in brokers.values()}
        lost = {(s, r) for s in brokers for r in brokers if s != r and next(draws, False)}
        paused = {
            name for name, (since, rounds) in zip(names, pauses, strict=False) if 0 <= round_index - since < rounds
        }
        wanted = {name: 0.0 if name in paused else rate_ for name, rate_ in zip(names, demand, strict=True)}
        usage = registry_round(brokers, wanted, T0 + round_index, lost)
        assert sum(usage.values()) <= max(held) * (1 + 1e-9) + len(brokers) * MIN_LIMIT
