"""Ramped quotas in broker nodes: every broker's own ramp, fed from its view, gives the pool the mode says, and
the brokers agree on it when they see the same reports."""

from __future__ import annotations

import numpy as np
import pytest

from allocator import policies
from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.ramps.ramped_pool import GroupRamp

MSGS = ("publish_msgs_per_s",)
T0 = 1000.0
QUOTA = 100.0
GAP = range(4, 7)  # rounds without traffic


def _brokers(mode: str) -> dict[str, BrokerNode]:
    ramp = GroupRamp(group_id=1, dimension=0, mode=mode, min_tokens=10, max_tokens=QUOTA, duration_s=9,
                     usage_threshold_pct=90)  # fmt: skip
    settings = NodeSettings(dimensions=MSGS, policy=policies.bind("pip82-steal"), ramps=(ramp,))
    return {name: BrokerNode(name, np.array([1, 2]), np.array([[QUOTA], [QUOTA]]), settings) for name in ("a", "b")}


def _pools(mode: str, demand_msgs_per_s: float, rounds: int = 14) -> list[float]:
    """The pool of group 1 after each round, the same at both brokers (checked); group 2 is not ramped."""
    brokers = _brokers(mode)
    pools = []
    for k in range(rounds):
        now_s = T0 + k
        demand = 0.0 if k in GAP else demand_msgs_per_s
        out = {}
        for name, broker in brokers.items():
            traffic = broker.admit(np.array([demand, demand]), np.array([100.0, 100.0]), now_s)
            out[name] = [payload for _, payload in broker.build_reports(traffic, now_s).payloads]
        for name, broker in brokers.items():
            broker.receive([p for other, ps in out.items() if other != name for p in ps], now_s)
            broker.cleanup(now_s)
            broker.allocate()
        assert brokers["a"].pool[0, 0] == brokers["b"].pool[0, 0]  # the brokers agree
        assert (brokers["a"].pool[1] == QUOTA).all()  # an unramped group's pool is its quota
        if demand:
            assert brokers["a"].limit[0, 0] + brokers["b"].limit[0, 0] <= brokers["a"].pool[0, 0] + 1e-9
        pools.append(float(brokers["a"].pool[0, 0]))
    return pools


# Demand far above the quota: every epoch with requests uses its whole pool. The gap is rounds 4-6. Each entry
# is the pool after round k: the one the limits of round k + 1 split, i.e. the pool of epoch k + 1.
SATURATED = {
    "scheduled": [20, 30, 40, 50, 60, 70, 80, 90, 100, 100, 100, 100, 100, 100],  # by the clock, gap or not
    "relaxed": [20, 30, 40, 50, 50, 50, 50, 60, 70, 80, 90, 100, 100, 100],  # the gap pauses it
    "only-if-used": [20, 30, 40, 50, 50, 50, 50, 60, 70, 80, 90, 100, 100, 100],
    # the slope the last full epoch earned, then one off per idle epoch: 3 idle epochs, 2 slopes below 50
    "go-back-n": [20, 30, 40, 50, 40, 30, 20, 30, 40, 50, 60, 70, 80, 90],
}


@pytest.mark.parametrize("mode", SATURATED)
def test_the_pool_of_a_saturated_group_follows_its_mode_through_a_gap(mode):
    assert _pools(mode, demand_msgs_per_s=500.0) == pytest.approx(SATURATED[mode])


def test_below_the_threshold_only_if_used_stays_and_go_back_n_goes_down():
    # 12 msgs/s from two brokers: 24 per epoch, at least 90% of a pool of 20 but not of 30.
    assert _pools("only-if-used", demand_msgs_per_s=12.0, rounds=5) == pytest.approx([20, 30, 30, 30, 30])
    assert _pools("go-back-n", demand_msgs_per_s=12.0, rounds=4) == pytest.approx([20, 30, 20, 30])
    assert _pools("scheduled", demand_msgs_per_s=12.0, rounds=5) == pytest.approx([20, 30, 40, 50, 60])
