"""numaflow-equal: pool / N for the agreed N, fractional tokens carried (no small pool rounds to zero)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.node.pool_size import MemoryConsensusStore, PoolSizeMember

T0 = 1000.0


def node(name: str, quota: float, policy: str = "numaflow-equal") -> BrokerNode:
    settings_ = NodeSettings(dimensions=("publish_msgs_per_s",), policy=policies.bind(policy))
    return BrokerNode(name, np.array([1]), np.array([[quota]]), settings_)


def test_max_2_on_2_pods_is_1_each_where_numaflow_floors_to_0():
    assert policies.step("numaflow-equal", [2.0], [[5.0, 5.0]], [[0.0, 0.0]]).tolist() == [[1.0, 1.0]]
    assert policies.step("numaflow-equal", [1.0], [[5.0, 5.0]], [[0.0, 0.0]]).tolist() == [[0.5, 0.5]]


def test_a_broker_splits_by_the_agreed_pool_size_not_by_its_view():
    broker = node("a", 90.0)
    broker.set_pool_size(3)
    broker.admit(np.array([100.0]), np.array([100.0]), T0)  # alone in its view
    assert broker.allocate()[0, 0] == 30.0
    broker.set_pool_size(2)
    assert broker.allocate()[0, 0] == 45.0


def test_a_group_is_split_by_the_brokers_that_serve_it_not_by_the_whole_pool():
    """The agreed pool holds 4 brokers, the registry lists 2 others serving group 1: a third each, the whole quota
    handed out (dividing by the pool gave 75% of it)."""
    broker = node("a", 90.0)
    broker.set_pool_size(4)
    broker.update_roster(np.array([1, 1]), np.array([0, 1]), np.array([True, True]), ["b", "c", "d"])
    broker.admit(np.array([100.0]), np.array([100.0]), T0)
    assert broker.allocate()[0, 0] == 30.0
    broker.update_roster(np.array([1]), np.array([1]), np.array([False]), ["b", "c", "d"])
    assert broker.allocate()[0, 0] == 45.0


def test_a_newcomer_waiting_for_agreement_holds_its_floor_from_its_first_round():
    broker = node("a", 90.0)
    broker.set_pool_size(None)
    traffic = broker.admit(np.array([100.0]), np.array([100.0]), T0)
    assert traffic.usage[0, 0] == MIN_LIMIT
    assert broker.allocate()[0, 0] == MIN_LIMIT


def test_an_unlimited_quota_stays_unlimited_even_while_waiting():
    broker = node("a", np.inf)
    broker.set_pool_size(None)
    broker.admit(np.array([100.0]), np.array([100.0]), T0)
    assert broker.allocate()[0, 0] == np.inf


def test_only_a_policy_that_splits_by_a_pool_size_takes_one():
    with pytest.raises(ValueError, match="pip82-steal splits by no agreed pool size"):
        node("a", 10.0, policy="pip82-steal").set_pool_size(2)


@settings(max_examples=200, deadline=None)
@given(
    quota=st.floats(0.0, 1e9, allow_nan=False),
    changes=st.lists(st.tuples(st.sampled_from(("join", "leave", "crash")), st.sampled_from("abcde")), max_size=12),
)
def test_the_limits_of_the_live_brokers_never_add_up_to_more_than_the_quota(quota, changes):
    """Brokers join, leave and crash, one change a round; each round every live broker syncs and allocates.
    Before the broker floor (MIN_LIMIT), the limits of the live brokers add up to at most the quota."""
    store = MemoryConsensusStore(ttl_s=2.0)
    members: dict[str, PoolSizeMember] = {}
    for round_index, (kind, name) in enumerate([*changes, *[("none", "")] * 4]):
        now_s = float(round_index)
        if kind == "join" and name not in members:
            members[name] = PoolSizeMember(name, store)
            members[name].join(now_s)
        elif kind == "leave" and name in members:
            members.pop(name).leave()
        elif kind == "crash":
            members.pop(name, None)
        pool_sizes = [members[key].sync(now_s) for key in sorted(members)]
        limits = [policies.pool_share(quota, size) for size in pool_sizes if size is not None]
        assert sum(limits) <= quota * (1 + 1e-12)
    assert all(size == len(members) for size in pool_sizes)
