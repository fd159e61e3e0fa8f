"""The typed boundary: a checked scenario becomes the plan the runtime runs, translated once."""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pytest

from actors.hosts.backends import LocalBackend
from actors.hosts.cluster import Cluster
from actors.plan import ChannelEvent, DemandEvent, QuotaEvent
from allocator.policies import BoundPolicy
from experiments.planner import build_plan
from experiments.scenario import parse_scenario

MSGS, BYTES = "publish_msgs_per_s", "publish_bytes_per_s"
RAMP = {"from": 0, "to": 9, "over_rounds": 3}


def scenario(**overrides):
    data = {
        "name": "plan",
        "seed": 3,
        "rounds": 20,
        "interval_s": 0.5,
        "backend": "local",
        "policy": {"name": "pip82-steal", "params": {"steal_fraction": 0.25}},
        "cleanup": {"stale_after_rounds": 4, "max_report_age_rounds": 2, "session_timeout_rounds": 3},
        "channel": {"loss": 0.1, "delay_rounds": 2, "jitter_rounds": 0.5, "reorder": 0.1, "shards": 2},
        "groups": [
            {"name": "a", "quota": {MSGS: 100}},
            {"name": "b", "quota": {MSGS: "unlimited", BYTES: 5000}},
            {"name": "c", "quota": {MSGS: 30}},
        ],
        "brokers": [
            {"name": "b1", "workload": [{"group": "a", "msgs_per_s": 10}, {"group": "b", "msgs_per_s": 5}]},
            {"name": "b2", "workload": [{"group": "a", "msgs_per_s": {"ramp": RAMP}}]},
            {"name": "b3", "workload": [{"group": "b", "msgs_per_s": 7}, {"group": "c", "msgs_per_s": 1}]},
        ],
        "events": [
            {"at": 5, "demand": {"broker": "b2", "group": "c", "msgs_per_s": 4}},
            {"at": 6, "quota": {"group": "b", BYTES: 100}},
            {"at": 7, "channel": {"delay_rounds": 1}},
        ],
    }
    data.update(overrides)
    return parse_scenario(data)


def test_rounds_become_seconds_and_unlimited_becomes_inf():
    plan = build_plan(scenario())
    assert plan.dimensions == (MSGS, BYTES)
    assert plan.quota.tolist() == [[100.0, np.inf], [np.inf, 5000.0], [30.0, np.inf]]
    assert plan.limited.tolist() == [[True, False], [True, True], [True, False]]
    assert (plan.channel.delay_s, plan.channel.jitter_s, plan.channel.reorder_delay_s) == (1.0, 0.25, 0.5)
    assert plan.node.stale_after_s == 2.0 and plan.node.max_report_age_s == 1.0
    assert plan.session_timeout_s == 1.5
    assert isinstance(plan.node.policy, BoundPolicy) and plan.node.policy.settings.steal_fraction == 0.25


def test_events_are_typed_and_carry_what_the_runtime_needs():
    plan = build_plan(scenario())
    demand, quota, channel = (planned.event for planned in plan.events)
    assert isinstance(demand, DemandEvent) and (demand.broker, demand.row) == ("b2", 1)  # c is b2's second group
    assert isinstance(quota, QuotaEvent) and quota.group_id == 1
    assert quota.quota.tolist() == [np.inf, 100.0]  # the whole row: the unnamed dimension stays as it was
    assert isinstance(channel, ChannelEvent) and channel.changes == {"delay_s": 0.5}
    b2 = plan.brokers[1]
    assert b2.group_names == ("a", "c") and b2.workload.profiles.keys() == {0}  # the ramp; c starts idle


def test_broadcast_routes_by_shard_and_interest_to_the_other_owners():
    broadcast = build_plan(scenario())
    b1 = broadcast.brokers[0]
    assert b1.routes.topics.tolist() == [0, 1] and b1.subscriptions == (0, 1)  # groups 0 and 1 over 2 shards
    interest = build_plan(scenario(channel={"routing": "interest"}))
    assert interest.channel.topics == 3
    owners = {0: {0, 1}, 1: {0, 2}, 2: {1, 2}}  # group id -> plan indices of its owners (with the demand event)
    for broker in interest.brokers:
        assert broker.subscriptions == (broker.index,)
        for row, group_id in enumerate(broker.group_ids.tolist()):
            topics = broker.routes.topics[broker.routes.offsets[row] : broker.routes.offsets[row + 1]]
            assert set(topics.tolist()) == owners[group_id] - {broker.index}


def test_each_host_gets_only_its_brokers():
    plan = build_plan(scenario(brokers_per_actor=2))
    hosts = plan.host_plans()
    assert [list(host.brokers) for host in hosts] == [["b1", "b2"], ["b3"]]
    assert all(host.node is plan.node for host in hosts)


def _generated(groups: int) -> dict:
    return {
        "name": "linear",
        "rounds": 2,
        "backend": "local",
        "generated": {
            "groups": groups,
            "brokers": 10,
            "brokers_per_group": 3,
            "quota": {MSGS: 100},
            "msgs_per_s": {"uniform": [10, 50]},
        },
    }


def _python_calls(work: Callable[[], object]) -> int:
    """Python-level calls (and generator resumptions) made by `work`: a machine-independent cost."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("routing", ["broadcast", "interest"])
def test_start_up_is_linear_in_the_number_of_groups(routing):
    """Scenario, plan, cluster and every broker's start: doubling the groups at most doubles the work (plus a little).
    A per-group scan of all groups (the bug this guards against) makes the count grow fourfold."""

    def start_up(groups: int) -> Callable[[], object]:
        data = {**_generated(groups), "channel": {"routing": routing}}

        def work() -> None:
            cluster = Cluster(build_plan(parse_scenario(data)), LocalBackend())
            cluster.start(cluster.brokers_joining(0), 0.0)

        return work

    small, large = _python_calls(start_up(1_000)), _python_calls(start_up(2_000))
    assert large < 2.3 * small, (small, large)
