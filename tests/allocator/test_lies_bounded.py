"""Lies are bounded: whatever one broker reports, no limit exceeds the group's quota and the limits add up to at
most the quota plus the policy's documented margin.

The honest brokers are in a consistent state (each uses at most its own limit); one broker's entry (the last
column) is one arbitrary report: any usage and demand, however far above the quota.

`fair-share-safe` bounds a liar in its hooks, not in its rule (a peer counts at the usage it can be known to
hold: `allocator.policies.fair_share_safe.counting`): that is checked on brokers (`BrokerNode`) running rounds on
a perfect channel, one of them reporting `usage_factor` times what it uses.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from allocator.node.broker_node import MIN_LIMIT, BrokerNode, Traffic
from allocator.node.node_settings import NodeSettings
from allocator.policies import POLICIES, RECOMMENDED, bind, step
from allocator.policies.fair_share_safe.counting import EXCESS_TOLERANCE
from allocator.policies.waterfill import max_min_fair

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

TOLERANCE = 1e-9  # absolute; the water level of a 1e12 lie rounds at ~1e-11 of the quota, so sums get 1e-9 relative


def documented_overshoot(name: str, quota: np.ndarray, usage: np.ndarray) -> np.ndarray:
    """[G] how far the limits may add up beyond the quota, as each policy's docstring says
    (`allocator.policies.rules`, `allocator.policies.pulsar`); every broker is present."""
    n_brokers = usage.shape[1]
    if name == "pulsar":  # proportional on whole numbers, at least 1 each; nobody using anything: the full quota each
        total = np.floor(usage + 0.5).sum(axis=1)
        float32_rounding = 2.0**-23 * (quota + total)  # Java floats: a unit in the last place of the residual
        return np.where(total > 0, n_brokers * (1 + float32_rounding) + 0.5, (n_brokers - 1) * quota)
    if name == "pip82-equal":  # each broker adds the whole residual: (n - 1) residuals over the quota
        return (n_brokers - 1) * np.maximum(quota - usage.sum(axis=1), 0.0)
    if name == "pip82-steal":  # the steals of one round: at most one per pair, each capped at the quota
        return (n_brokers // 2) * quota
    return np.zeros(len(quota))  # proportional, Doorman's and the max-min policies: within the quota


rate = st.floats(0.0, 1e6)
lie = st.one_of(st.floats(0.0, 1e12), st.sampled_from([0.0, 1e12]))


@st.composite
def one_liar(draw):
    """quota [G], usage, limit, demand (or None) [G, B]: honest brokers under their limits, the last one lying."""
    n_groups, n_brokers = draw(st.integers(1, 3)), draw(st.integers(2, 5))
    shape = (n_groups, n_brokers)
    quota = draw(hnp.arrays(np.float64, n_groups, elements=st.floats(1.0, 1e6)))
    limit = draw(hnp.arrays(np.float64, shape, elements=rate))
    usage = limit * draw(hnp.arrays(np.float64, shape, elements=st.floats(0.0, 1.0)))
    demand = draw(st.one_of(st.none(), hnp.arrays(np.float64, shape, elements=rate)))
    usage[:, -1] = draw(hnp.arrays(np.float64, n_groups, elements=lie))
    if demand is not None:
        demand[:, -1] = draw(hnp.arrays(np.float64, n_groups, elements=lie))
    return quota, usage, limit, demand


@settings(max_examples=300, deadline=None)
@given(view=one_liar(), name=st.sampled_from(sorted(POLICIES)))
def test_one_report_cannot_push_a_limit_over_the_quota_nor_the_sum_past_the_margin(view, name: str) -> None:
    quota, usage, limit, demand = view
    new_limit = step(name, quota, usage, limit, demand)
    assert (new_limit >= 0).all()
    assert (new_limit <= quota[:, None] * (1 + 1e-12) + TOLERANCE).all(), "a limit above the group's quota"
    bound = quota + documented_overshoot(name, quota, usage)
    assert (new_limit.sum(axis=1) <= bound * (1 + 1e-9) + TOLERANCE).all(), (new_limit.sum(axis=1), bound)


def test_the_pip82_steal_liar_of_the_issue_no_longer_lifts_limits_over_the_quota() -> None:
    """Issue 11: a 10x liar under pip82-steal gave the others 128.8 each on a quota of 100."""
    quota = np.array([100.0])
    usage = np.array([[40.0, 40.0, 400.0]])  # the last broker reports 10x its 40
    new_limit = step("pip82-steal", quota, usage, usage)
    assert new_limit.max() <= 100.0
    assert new_limit.sum() <= 200.0  # one steal (three brokers: one pair) over the quota at most


MSGS = ("publish_msgs_per_s",)
ROUNDS = 12
HELD_FROM = 3  # the liar is held to its share from the third allocation on (the first is a newcomer's listening)


def limits_with_a_liar(quota: float, demands: list[float], usage_factor: float) -> np.ndarray:
    """[round, broker] every broker's limit after each of `ROUNDS` lockstep rounds of the recommended policy with
    its defaults, each report reaching every other broker; the last broker claims and reports `usage_factor`
    times its traffic from the start."""
    settings_ = NodeSettings(MSGS, policy=bind(RECOMMENDED), threshold_pct=10.0, force_every=5)
    brokers = [BrokerNode(f"b{i}", np.array([1]), np.array([[quota]]), settings_) for i in range(len(demands))]
    liar = brokers[-1]
    limits = []
    for round_index in range(ROUNDS):
        now_s = 1000.0 + round_index
        published = []
        for broker, demand in zip(brokers, demands, strict=True):
            traffic = broker.admit(np.array([demand]), np.array([100.0]), now_s)
            if broker is liar:
                traffic = Traffic(traffic.demand * usage_factor, traffic.usage * usage_factor, traffic.throttled_s)
                broker.claim(traffic)
            published.append([payload for _, payload in broker.build_reports(traffic, now_s).payloads])
        for index, broker in enumerate(brokers):
            broker.receive([p for other, ps in enumerate(published) if other != index for p in ps], now_s)
            broker.cleanup(now_s)
            broker.allocate()
        limits.append([broker.limit[0, 0] for broker in brokers])
    return np.array(limits)


@settings(max_examples=30, deadline=None)
@given(
    quota=st.floats(50.0, 1e4),
    honest=st.lists(st.floats(1.0, 1e4), min_size=1, max_size=4),
    liar_demand=st.floats(1.0, 1e4),
    usage_factor=st.one_of(st.floats(1.0, 1e3), st.sampled_from([1e6])),
)
def test_a_liar_under_fair_share_safe_is_held_to_its_max_min_share_within_three_allocations(
    quota: float, honest: list[float], liar_demand: float, usage_factor: float
) -> None:
    """From the third allocation on the liar holds at most its max-min share of what it claims and every honest
    broker at least its own (less the margin: a liar claiming up to `EXCESS_TOLERANCE` above its share is within
    it and counts in full); from the second on, no honest broker is held at the floor by the lie."""
    limits = limits_with_a_liar(quota, [*honest, liar_demand], usage_factor)
    claimed = np.array([[*honest, liar_demand * usage_factor]])
    share = max_min_fair(np.array([quota]), claimed)[0]  # min(claimed demand, the max-min level)
    tolerance = quota * 1e-9
    assert (limits <= quota + tolerance).all(), "a limit above the quota"
    assert (limits.sum(axis=1) <= quota + tolerance).all(), "the limits add up beyond the quota"
    held = limits[HELD_FROM - 1 :]
    assert (held[:, -1] <= share[-1] + tolerance).all(), "the liar beyond its max-min share of what it claims"
    margin = EXCESS_TOLERANCE * share[-1]
    assert (held[:, :-1] >= share[:-1] - margin - tolerance).all(), ("an honest broker starved", limits, share)
    above_floor = share[:-1] > MIN_LIMIT + margin
    assert (limits[1:, :-1][:, above_floor] > MIN_LIMIT).all(), ("an honest broker at the floor", limits)
