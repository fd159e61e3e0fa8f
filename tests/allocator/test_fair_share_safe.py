"""fair-share-safe: its rule and each of the broker's mechanisms, a table of cases each, then the invariants
(hypothesis): a limit within the quota, the limits' sum within the quota, within the new quota right after a
cut, and a newcomer never above the residual it heard. The literal policies keep every mechanism off."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose
from test_broker_node import MSGS, T0, exchange, node, payloads

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.policies import POLICIES, RECOMMENDED, Settings, bind, initial_limit, step
from allocator.policies.waterfill import max_min_fair
from allocator.wire.codec import decode_report
from allocator.wire.usage_report import UsageReport

SAFE = RECOMMENDED
MECHANISMS = (
    "cap_at_residual",
    "start_from_residual",
    "rescale_on_quota_change",
    "stale_after_multiple",
    "report_throttled_demand",
    "listen_rounds",
    "answer_newcomers",
    "listen_while_view_grows",
    "lost_change_odds",
    "silent_at_fair_share",
    "report_while_held",
    "excess_after_rounds",
)
rate = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)


def test_it_is_the_recommended_policy_with_every_mechanism_on():
    assert RECOMMENDED == "fair-share-safe"
    on = bind(SAFE).settings
    off = Settings()
    assert all(getattr(on, name) != getattr(off, name) for name in MECHANISMS)


@pytest.mark.parametrize("name", sorted(set(POLICIES) - {SAFE}))
def test_the_literal_policies_keep_every_mechanism_off_and_refuse_them(name: str):
    bound, off = bind(name).settings, Settings()
    assert all(getattr(bound, mechanism) == getattr(off, mechanism) for mechanism in MECHANISMS)
    with pytest.raises(ValueError, match="unknown parameter 'start_from_residual'"):
        bind(name, {"start_from_residual": True})


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start_from_residual": 1}, "start_from_residual: must be true or false, got 1"),
        ({"stale_after_multiple": 0.5}, r"stale_after_multiple: must be >= 1, got 0.5"),
        ({"listen_rounds": 1.5}, "listen_rounds: must be a whole number >= 0, got 1.5"),
        ({"lost_change_odds": 0.0}, r"lost_change_odds: must be in \(0, 1\], got 0.0"),
        ({"silent_at_fair_share": "yes"}, "silent_at_fair_share: must be true or false, got 'yes'"),
        ({"excess_after_rounds": -1}, "excess_after_rounds: must be a whole number >= 0, got -1"),
    ],
)
def test_bad_mechanism_values_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        bind(SAFE, params)


# -- the rule: max-min fair, never above the residual heard ----------------------------------------------

# fmt: off
RULE_CASES = [
    # quota, usage, demand, expected: min(max-min share, usage + quota - total usage)
    ("consistent views: the water-filling split", [100], [[20, 20, 20, 20, 20]], [[30] * 5], [[20] * 5]),
    ("up to the room the others leave", [100], [[10, 30, 50]], [[10, 60, 60]], [[10, 40, 45]]),
    ("an increase waits a round for the others to step down", [100], [[10, 45, 45]], [[60, 45, 45]],
     [[10, 100 / 3, 100 / 3]]),
    ("over quota every broker cuts by the excess", [80], [[30, 30, 30]], [[30, 30, 30]], [[20, 20, 20]]),
    ("a cold start at the floor takes its share", [100], [[1, 1, 1, 1, 1]], [[30] * 5], [[20] * 5]),
]
# fmt: on


@pytest.mark.parametrize(("label", "quota", "usage", "demand", "expected"), RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_rule_cases(label, quota, usage, demand, expected):
    new_limit = step(SAFE, quota, usage, usage, demand)
    assert_allclose(new_limit, expected)
    assert new_limit.sum() <= quota[0] + 1e-9


# fmt: off
UP_TO_SHARE_CASES = [
    # quota, usage, demand, expected: min(max-min share, quota - sum(others' min(usage, share)))
    ("a broker above its share counts for its share", [100], [[10, 30, 50]], [[10, 60, 60]], [[10, 45, 45]]),
    ("an increase takes the room the others above their share free", [100], [[10, 45, 45]], [[60, 45, 45]],
     [[100 / 3, 100 / 3, 100 / 3]]),
    ("a liar's claim holds its max-min share, not the others'", [100], [[10, 10, 1000]], [[50, 50, 1000]],
     [[100 / 3, 100 / 3, 100 / 3]]),
    ("over quota every broker falls to its share", [80], [[30, 30, 30]], [[30, 30, 30]], [[80 / 3] * 3]),
]
# fmt: on


@pytest.mark.parametrize(
    ("label", "quota", "usage", "demand", "expected"), UP_TO_SHARE_CASES, ids=[c[0] for c in UP_TO_SHARE_CASES]
)
def test_rule_cases_counting_others_up_to_their_share(label, quota, usage, demand, expected):
    new_limit = step(SAFE, quota, usage, usage, demand, count_others_up_to_share=True)
    assert_allclose(new_limit, expected)
    assert new_limit.sum() <= quota[0] + 1e-9


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_rule_never_exceeds_the_quota_nor_the_residual_heard(data):
    n_groups, n_brokers = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 6))
    shape = (n_groups, n_brokers)
    quota = data.draw(hnp.arrays(np.float64, n_groups, elements=st.floats(0.0, 1e6)))
    usage = data.draw(hnp.arrays(np.float64, shape, elements=rate))
    limit = data.draw(hnp.arrays(np.float64, shape, elements=rate))
    demand = data.draw(st.one_of(st.none(), hnp.arrays(np.float64, shape, elements=rate)))
    present = data.draw(hnp.arrays(np.bool_, shape))
    new_limit = step(SAFE, quota, usage, limit, demand, present)
    tolerance = quota * 1e-12 + 1e-9
    assert (new_limit <= quota[:, None] + tolerance[:, None]).all()
    assert (new_limit.sum(axis=1) <= quota + tolerance).all()
    others_usage = np.where(present, usage, 0).sum(axis=1, keepdims=True) - np.where(present, usage, 0)
    assert (new_limit <= np.maximum(quota[:, None] - others_usage, 0) + tolerance[:, None]).all()


# -- start from the residual heard -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "view", "others_usage", "expected"),
    [
        (100.0, 4, 90.0, 10.0),  # the residual, under the equal share 25
        (100.0, 4, 30.0, 25.0),  # the equal share, under the residual 70
        (100.0, 4, 120.0, 0.0),  # over quota: nothing left (the node floors it at MIN_LIMIT)
        (100.0, 1, 0.0, 0.0),  # heard nobody: listens at the floor
        (-1.0, 3, 10.0, -1.0),  # unlimited
    ],
)
def test_a_newcomer_starts_at_the_residual_it_heard(quota, view, others_usage, expected):
    assert initial_limit(SAFE, [quota], [view], [others_usage])[0] == expected
    assert initial_limit("fair-share", [quota], [view], [others_usage])[0] == (-1.0 if quota < 0 else quota / view)


@settings(max_examples=300, deadline=None)
@given(
    quota=hnp.arrays(np.float64, 5, elements=st.floats(0.0, 1e6)),
    view=hnp.arrays(np.int64, 5, elements=st.integers(0, 8)),
    others_usage=hnp.arrays(np.float64, 5, elements=rate),
)
def test_a_newcomer_never_starts_above_the_residual_it_heard(quota, view, others_usage):
    start = initial_limit(SAFE, quota, view, others_usage)
    assert (start <= np.maximum(quota - others_usage, 0.0)).all()
    assert (start <= quota / np.maximum(view, 1)).all()


def test_a_node_joining_starts_at_the_residual_it_heard_and_listens_a_round():
    brokers = {name: node(name, [100.0], policy=SAFE) for name in "abc"}
    exchange(brokers, {"a": [30.0], "b": [30.0], "c": [30.0]}, T0)
    exchange(brokers, {"a": [30.0], "b": [30.0], "c": [30.0]}, T0 + 1)
    assert [brokers[n].limit[0, 0] for n in "abc"] == pytest.approx([30.0, 30.0, 30.0])
    newcomer = node("d", [100.0], policy=SAFE)
    for broker in brokers.values():  # d has heard the others' last reports
        traffic = broker.admit(np.array([30.0]), np.array([100.0]), T0 + 2)
        newcomer.receive(payloads(broker.build_reports(traffic, T0 + 2)), T0 + 2)
    newcomer.admit(np.array([30.0]), np.array([100.0]), T0 + 2)
    assert newcomer.limit[0, 0] == pytest.approx(10.0)  # 100 - 90 heard
    assert newcomer.allocate()[0, 0] == pytest.approx(
        10.0
    )  # listening: no more than its start, whatever the split says
    deaf = node("e", [100.0], policy=SAFE)
    deaf.admit(np.array([30.0]), np.array([100.0]), T0)
    assert deaf.limit[0, 0] == MIN_LIMIT  # heard nobody yet


# -- rescale on a quota change ----------------------------------------------------------------------------


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
    assert literal.limit[0, 0] == 150.0  # today's behaviour: at the next allocation


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


# -- expiry of a silent entry, demand from throttled time, answering a newcomer --------------------------


@pytest.mark.parametrize(("multiple", "silent_s", "kept"), [(1.0, 11.0, False), (3.0, 11.0, True), (3.0, 31.0, False)])
def test_a_silent_entry_expires_after_a_multiple_of_stale_after(multiple, silent_s, kept):
    policy = policies.bind(SAFE, {"stale_after_multiple": multiple})
    a = BrokerNode("a", np.array([1]), np.array([[100.0]]), NodeSettings(MSGS, policy=policy, stale_after_s=10.0))
    b = node("b", [100.0], policy=SAFE)
    a.receive(payloads(b.build_reports(b.admit(np.array([30.0]), np.array([100.0]), T0), T0)), T0)
    a.cleanup(T0 + silent_s)
    assert ((1, "b") in a.table.entries()) == kept


def test_a_throttled_broker_reports_the_demand_its_throttled_time_tells():
    a = node("a", [10.0], policy=SAFE, threshold_pct=10.0)
    a.admit(np.array([5.0]), np.array([100.0]), T0)  # starts at the floor: nobody heard
    traffic = a.admit(np.array([40.0]), np.array([100.0]), T0 + 1)
    assert traffic.usage[0, 0] == pytest.approx(MIN_LIMIT)
    assert a.throttled_demand(traffic)[0, 0] == pytest.approx(40.0)
    (report,) = [decode_report(p) for p in payloads(a.build_reports(traffic, T0 + 1))]
    assert report.demand[0, 0] == pytest.approx(40.0)
    # the usage does not move, the demand does: reason enough to report
    traffic = a.admit(np.array([80.0]), np.array([100.0]), T0 + 2)
    assert payloads(a.build_reports(traffic, T0 + 2))


def test_a_broker_that_hears_a_newcomer_answers_in_its_next_report():
    a = node("a", [100.0], policy=SAFE, threshold_pct=10.0)

    def report(round_index: int):
        return a.build_reports(a.admit(np.array([30.0]), np.array([100.0]), T0 + round_index), T0 + round_index)

    assert [bool(report(round_index).payloads) for round_index in range(3)] == [True, False, False]  # settled
    newcomer = node("n", [100.0], policy=SAFE)
    a.receive(
        payloads(newcomer.build_reports(newcomer.admit(np.array([30.0]), np.array([100.0]), T0 + 2), T0 + 2)), T0 + 2
    )
    assert report(3).reported[0]  # the answer
    assert not report(4).payloads  # once


# -- copies of a change at the loss measured, a silent peer at its fair share, a held broker's claim --------


def safe_node(quota: float, params: dict | None = None, **node_settings) -> BrokerNode:
    """Broker "a" serving group 1 under fair-share-safe with `params`."""
    settings_ = NodeSettings(MSGS, policy=bind(SAFE, params or {}), **node_settings)
    return BrokerNode("a", np.array([1]), np.array([[quota]]), settings_)


def heard(receiver: BrokerNode, sender: str, seq: int, usage: float, demand: float, now_s: float) -> None:
    """`receiver` gets report `seq` of `sender` for group 1, sent at `now_s`."""
    report = UsageReport(sender, 0, seq, int(now_s * 1000), 1000, MSGS, np.array([1]), np.array([[usage]]),
                         np.array([[demand]]))  # fmt: skip
    receiver.table.merge(report, now_s)
    receiver.loss_meter.observe([sender], [0], [seq])


@pytest.mark.parametrize(("params", "gap", "copies"), [({}, 0, 1), ({}, 1, 5), ({"lost_change_odds": 1.0}, 1, 1)])
def test_a_change_is_reported_in_as_many_rounds_as_the_loss_measured_asks(params, gap, copies):
    a = safe_node(100.0, params, threshold_pct=10.0)
    heard(a, "b", 1, 10.0, 10.0, T0)
    heard(a, "b", 2 + gap, 10.0, 10.0, T0 + 1)  # with the gap: 1 missed of 3 seen, decayed
    expected_loss = 0.0 if gap == 0 else 1 / (1 + 0.9 + 1)
    assert a.loss_meter.loss == pytest.approx(expected_loss)
    sent = []
    for round_index, rate_ in enumerate([30.0] * 3 + [60.0] * 7):  # settled, then one change at round 3
        traffic = a.admit(np.array([rate_]), np.array([100.0]), T0 + 2 + round_index)
        sent.append(bool(a.build_reports(traffic, T0 + 2 + round_index).reported[0]))
        a.limit[:] = 100.0  # keep the limit out of the way: only the reporting is under test
        a._apply_limits()
    # loss 0.345: 0.345 ** 5 = 0.005 <= 0.01 < 0.345 ** 4 = 0.014, five copies of the change (at most
    # force_every); then a forced report force_every rounds after the last one
    expected = [True] * copies + [False] * (7 - copies)
    if copies - 1 + 5 < 7:
        expected[copies - 1 + 5] = True
    assert sent[3:] == expected


SILENT_CASES = [
    # quota, (usage, demand) of the silent peer b and of the live peer c, a's demand, mechanism, a's limit
    ("a silent peer counts at its fair share", 90.0, (60.0, 60.0), (30.0, 60.0), 60.0, True, 30.0),
    ("without the mechanism its stale usage holds the room", 90.0, (60.0, 60.0), (30.0, 60.0), 60.0, False, MIN_LIMIT),
    # demands 10/60/60 on 90: a's fair share 40, under the residual 90 - 10 - 30
    ("a silent peer under its fair share counts at its usage", 90.0, (10.0, 10.0), (30.0, 60.0), 60.0, True, 40.0),
]


@pytest.mark.parametrize(("label", "quota", "b", "c", "demand", "on", "expected"), SILENT_CASES,
                         ids=[case[0] for case in SILENT_CASES])  # fmt: skip
def test_a_silent_peer_counts_at_most_its_fair_share(label, quota, b, c, demand, on, expected):
    a = safe_node(quota, {"silent_at_fair_share": on, "excess_after_rounds": 0}, force_every=5)
    heard(a, "b", 1, *b, T0)  # then silent
    for round_index in range(7):
        now_s = T0 + round_index
        a.admit(np.array([demand]), np.array([100.0]), now_s)
        heard(a, "c", round_index + 1, *c, now_s)
        a.cleanup(now_s)
        a.allocate()
    assert a.limit[0, 0] == pytest.approx(expected)  # b silent for 6 rounds > force_every


@settings(max_examples=100, deadline=None)
@given(
    quota=st.floats(10.0, 1000.0),
    peers=st.lists(st.tuples(st.floats(0.5, 500.0), st.floats(0.0, 2.0), st.booleans()), min_size=1, max_size=5),
    own_demand=st.floats(1.0, 500.0),
)
def test_the_room_a_broker_takes_beyond_the_residual_is_at_most_the_silent_peers_usage_over_their_fair_share(
    quota, peers, own_demand
):
    """Each peer: (demand, usage as a fraction of it, silent); a's limit is within the residual it heard with
    every silent peer counted at min(usage, fair share): the documented margin over the plain residual."""
    a = safe_node(quota, {"excess_after_rounds": 0}, force_every=5)  # the live peers count at their usage
    names = [f"p{i}" for i in range(len(peers))]
    for round_index in range(7):
        now_s = T0 + round_index
        a.admit(np.array([own_demand]), np.array([100.0]), now_s)
        for name, (demand, used, silent) in zip(names, peers, strict=True):
            if round_index == 0 or not silent:
                heard(a, name, round_index + 1, demand * min(used, 1.0), demand, now_s)
        a.cleanup(now_s)
        a.allocate()
    demands = np.array([[own_demand, *(demand for demand, _, _ in peers)]])
    fair_share = max_min_fair(np.array([quota]), demands)[0, 1:]
    usage = np.array([demand * min(used, 1.0) for demand, used, _ in peers])
    silent = np.array([silent for _, _, silent in peers])
    counted = np.where(silent, np.minimum(usage, fair_share), usage)
    tolerance = 1e-9 * quota
    assert a.limit[0, 0] <= max(quota - counted.sum(), MIN_LIMIT) + tolerance
    margin = np.maximum(usage - fair_share, 0.0)[silent].sum()
    assert a.limit[0, 0] <= max(quota - usage.sum(), 0.0) + margin + MIN_LIMIT + tolerance


EXCESS_CASES = [
    # b's usage each round (its demand at least 60; quota 100, a wants 60: fair share 50 each), excess_after_rounds,
    # a's limits (the first: a newcomer listening)
    ("a lasting excess counts at the fair share from its 3rd round", [90.0] * 6, 3, [1.0, 10.0] + [50.0] * 4),
    ("off: the excess holds the room", [90.0] * 6, 0, [1.0] + [10.0] * 5),
    ("within 5% of the share is no excess", [52.0] * 6, 1, [1.0] + [48.0] * 5),
    # in excess for two rounds, then under its share for one: the count starts again
    (
        "an excess that ends starts the count again",
        [90.0, 90.0, 40.0, 90.0, 90.0, 90.0],
        3,
        [1.0, 10.0, 50.0, 10.0, 10.0, 50.0],
    ),
]


@pytest.mark.parametrize(
    ("label", "b_usage", "after", "expected"), EXCESS_CASES, ids=[case[0] for case in EXCESS_CASES]
)
def test_a_peer_in_excess_of_its_fair_share_counts_at_it_once_the_excess_has_lasted(label, b_usage, after, expected):
    a = safe_node(100.0, {"excess_after_rounds": after})
    limits = []
    for round_index, usage in enumerate(b_usage):
        now_s = T0 + round_index
        a.admit(np.array([60.0]), np.array([100.0]), now_s)
        heard(a, "b", round_index + 1, usage, max(usage, 60.0), now_s)  # b claims at least 60: fair share 50 each
        a.cleanup(now_s)
        limits.append(float(a.allocate()[0, 0]))
    assert limits == pytest.approx(expected)


def test_a_broker_held_below_its_fair_share_reports_every_round():
    def reports(on: bool) -> list[bool]:
        a = safe_node(100.0, {"report_while_held": on, "excess_after_rounds": 0}, threshold_pct=10.0)
        sent = []
        for round_index in range(6):
            now_s = T0 + round_index
            traffic = a.admit(np.array([50.0]), np.array([100.0]), now_s)
            sent.append(bool(a.build_reports(traffic, now_s).reported[0]))
            heard(a, "b", round_index + 1, 90.0, 90.0, now_s)  # b holds 90 of 100, its fair share is 50
            a.cleanup(now_s)
            a.allocate()
            assert a.limit[0, 0] == pytest.approx(10.0 if round_index else MIN_LIMIT)
        return sent

    assert reports(True) == [True] * 6
    # without it: new, listening, its usage moved (1 -> 10), then suppressed until the forced report at round 7
    assert reports(False) == [True, True, True, False, False, False]


# -- end to end: five brokers on a perfect channel -----------------------------------------------------------


def test_a_cold_start_never_goes_over_the_quota_and_reaches_the_fair_split():
    brokers = {f"b{i}": node(f"b{i}", [100.0], policy=SAFE) for i in range(5)}
    wanted = {name: [rate_] for name, rate_ in zip(brokers, (5.0, 10.0, 20.0, 40.0, 80.0), strict=True)}
    for round_index in range(4):
        traffic = exchange(brokers, wanted, T0 + round_index)
        assert sum(t.usage[0, 0] for t in traffic.values()) <= 100.0 + 1e-9
    assert_allclose([t.usage[0, 0] for t in traffic.values()], [5.0, 10.0, 20.0, 32.5, 32.5])
