"""BrokerNode: one broker's round (traffic, report, receive, clean up, allocate) with time passed in."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.node.usage_table import OWN
from allocator.policies.waterfill import max_min_fair
from allocator.wire.codec import decode_report
from allocator.wire.routing import Routes

MSGS = ("publish_msgs_per_s",)
MSGS_BYTES = ("publish_msgs_per_s", "publish_bytes_per_s")
T0 = 1000.0  # virtual clocks start from a positive base


def node(name, quota, *, groups=None, dimensions=MSGS, routes=None, policy="pip82-steal", **settings_kw) -> BrokerNode:
    quota = np.asarray(quota, dtype=np.float64)
    quota = quota.reshape(-1, len(dimensions))
    groups = np.arange(1, len(quota) + 1) if groups is None else np.asarray(groups)
    kw = {"threshold_pct": 0.0} | settings_kw
    settings = NodeSettings(dimensions=dimensions, policy=policies.bind(policy), **kw)
    return BrokerNode(name, groups, quota, settings, routes=routes)


def payloads(outbox) -> list[bytes]:
    return [payload for _, payload in outbox.payloads]


def publish(brokers: dict[str, BrokerNode], demand: dict[str, list[float]], now_s: float, msg_bytes=100.0):
    """Phase 1 for every node: traffic, then the encoded reports; returns (traffic, payloads) per node."""
    out = {}
    for name, broker in brokers.items():
        d = np.asarray(demand[name], dtype=np.float64)
        traffic = broker.admit(d, np.full(len(d), msg_bytes), now_s)
        out[name] = (traffic, payloads(broker.build_reports(traffic, now_s)))
    return out


def exchange(brokers: dict[str, BrokerNode], demand: dict[str, list[float]], now_s: float, msg_bytes=100.0):
    """One lockstep round over a perfect channel: every report reaches every other node."""
    published = publish(brokers, demand, now_s, msg_bytes)
    for name, broker in brokers.items():
        broker.receive([p for other, (_, ps) in published.items() if other != name for p in ps], now_s)
        broker.cleanup(now_s)
        broker.allocate()
    return {name: traffic for name, (traffic, _) in published.items()}


def usage_of(receiver: BrokerNode, sender: str, group: int) -> tuple[bool, np.ndarray]:
    (_,), (known,) = receiver.table.local_rows(np.array([group]))
    assert known
    usage = receiver.table.entries().get((group, sender))
    return usage is not None, np.zeros(len(receiver.settings.dimensions)) if usage is None else usage


def slot_of(receiver: BrokerNode, sender: str, group: int) -> tuple[int, int]:
    (row,), _ = receiver.table.local_rows(np.array([group]))
    (slot,) = np.flatnonzero(receiver.table.slot_broker[row] == receiver.table.brokers.index(sender))
    return row, slot


# -- traffic through the buckets -------------------------------------------------------------------


@pytest.mark.parametrize("interval_s", [1.0, 0.5])
def test_demand_over_the_limit_is_admitted_up_to_it_and_the_rest_is_throttled_time(interval_s):
    broker = node("a", [50.0], interval_s=interval_s)
    traffic = broker.admit(np.array([80.0]), np.array([100.0]), T0)
    assert broker.limit[0, 0] == 50.0  # alone: the full quota
    np.testing.assert_allclose(traffic.usage, [[50.0]])
    np.testing.assert_allclose(traffic.demand, [[80.0]])
    np.testing.assert_allclose(traffic.throttled_s, [0.375 * interval_s])  # (80 - 50) / 80 of the interval
    broker.build_reports(traffic, T0)
    broker.allocate()
    for round_index in range(1, 4):  # and the same every round after
        traffic = broker.admit(np.array([80.0]), np.array([100.0]), T0 + round_index * interval_s)
        np.testing.assert_allclose(traffic.usage, [[50.0]])
        np.testing.assert_allclose(traffic.throttled_s, [0.375 * interval_s])
        broker.allocate()


def test_the_most_stringent_dimension_decides_what_is_admitted():
    quota = [[100.0, 20_000.0]] * 3  # msgs/s and bytes/s, per group
    broker = node("a", quota, dimensions=MSGS_BYTES)
    demand = np.array([80.0, 150.0, 50.0])
    msg_bytes = np.array([1000.0, 100.0, 100.0])
    traffic = broker.admit(demand, msg_bytes, T0)
    # group 1: 80 KB/s wanted, 20 KB/s allowed -> 20 msgs/s; group 2: 100 msgs/s bind; group 3: nothing binds
    np.testing.assert_allclose(traffic.usage, [[20.0, 20_000.0], [100.0, 10_000.0], [50.0, 5_000.0]])
    np.testing.assert_allclose(traffic.demand, [[80.0, 80_000.0], [150.0, 15_000.0], [50.0, 5_000.0]])
    np.testing.assert_allclose(traffic.throttled_s, [0.75, 1.0 / 3.0, 0.0])


def test_a_group_without_demand_is_not_served_and_not_limited():
    broker = node("a", [[50.0], [50.0]])
    traffic = broker.admit(np.array([0.0, 10.0]), np.array([100.0, 100.0]), T0)
    np.testing.assert_array_equal(broker.serving, [False, True])
    np.testing.assert_array_equal(traffic.usage, [[0.0], [10.0]])
    np.testing.assert_array_equal(traffic.throttled_s, [0.0, 0.0])
    np.testing.assert_array_equal(broker.table.present[:, OWN], [False, True])


# -- the initial limit -----------------------------------------------------------------------------


def test_a_broker_starts_at_an_equal_share_of_the_brokers_it_knows_itself_included():
    newcomer = node("c", [120.0])
    others = {name: node(name, [120.0]) for name in ("a", "b")}
    published = publish(others, {"a": [30.0], "b": [30.0]}, T0)
    newcomer.receive([p for _, ps in published.values() for p in ps], T0)
    newcomer.admit(np.array([0.0]), np.array([100.0]), T0)  # not serving yet: no limit set
    assert newcomer.limit[0, 0] == 0.0
    newcomer.admit(np.array([90.0]), np.array([100.0]), T0 + 1)
    assert newcomer.limit[0, 0] == pytest.approx(40.0)  # 120 / 3: a, b and itself


@pytest.mark.parametrize("policy, known, expected", [("fair-share", 0, 120.0), ("pulsar", 2, 120.0)])
def test_alone_or_under_pulsar_a_broker_starts_at_the_full_quota(policy, known, expected):
    newcomer = node("c", [120.0], policy=policy)
    others = {name: node(name, [120.0], policy=policy) for name in ("a", "b")[:known]}
    published = publish(others, {"a": [30.0], "b": [30.0]}, T0)
    newcomer.receive([p for _, ps in published.values() for p in ps], T0)
    newcomer.admit(np.array([90.0]), np.array([100.0]), T0)
    assert newcomer.limit[0, 0] == expected


# -- reports between nodes -------------------------------------------------------------------------


def test_reports_round_trip_between_two_nodes_split_by_shard():
    shards = Routes.sharded(np.arange(1, 5), 2)
    a, b = node("a", [[100.0]] * 4, routes=shards), node("b", [[100.0]] * 4, routes=shards)
    traffic = a.admit(np.array([10.0, 20.0, 0.0, 40.0]), np.full(4, 100.0), T0)
    outbox = a.build_reports(traffic, T0)
    np.testing.assert_array_equal(outbox.reported, [True, True, False, True])
    assert sorted(shard for shard, _ in outbox.payloads) == [0, 1]  # groups 2, 4 -> shard 0; group 1 -> 1
    assert outbox.report_bytes.sum() == pytest.approx(sum(len(p) for _, p in outbox.payloads))
    assert outbox.report_bytes[2] == 0.0 and (outbox.report_bytes[[0, 1, 3]] > 0).all()
    inbox = b.receive(payloads(outbox), T0)
    assert (inbox.accepted, inbox.rejected, inbox.discarded) == (2, 0, 0)
    for group, expected in ((1, 10.0), (2, 20.0), (4, 40.0)):
        present, usage = usage_of(b, "a", group)
        assert present and usage[0] == expected
    assert not usage_of(b, "a", 3)[0]
    # the next round, unchanged: nothing to send, three groups suppressed
    traffic = a.admit(np.array([10.0, 20.0, 0.0, 40.0]), np.full(4, 100.0), T0 + 1)
    again = a.build_reports(traffic, T0 + 1)
    assert again.payloads == [] and again.suppressed == 3 and not again.reported.any()


def test_a_report_with_demand_carries_it_to_the_receiver():
    a, b = node("a", [100.0], report_demand=True), node("b", [100.0], report_demand=True)
    traffic = a.admit(np.array([150.0]), np.array([100.0]), T0)
    b.receive(payloads(a.build_reports(traffic, T0)), T0)
    row, slot = slot_of(b, "a", 1)
    assert b.table.usage[row, slot, 0] == 100.0 and b.table.demand[row, slot, 0] == 150.0
    assert b.table.demand_known[row, slot]


def _valid_payload(**settings_kw) -> bytes:
    a = node("a", [100.0], **settings_kw)
    return payloads(a.build_reports(a.admit(np.array([10.0]), np.array([100.0]), T0), T0))[0]


def test_corrupted_payloads_are_counted_as_rejected_and_never_raise():
    good = _valid_payload()
    b = node("b", [100.0])
    bad = [b"", b"\x00", b"\xc1", good[:-1], good[: len(good) // 2], good + b"\x00", b"\x93\x01\x00\xc4\x00", b"x" * 64]
    inbox = b.receive(bad, T0)
    assert (inbox.accepted, inbox.rejected, inbox.discarded) == (0, len(bad), 0)
    assert b.table.n_brokers == 1 and not b.table.present.any()
    assert b.receive([good], T0).accepted == 1  # and the node still works


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_corruption_of_a_report_is_counted_and_never_raises(data):
    good = bytearray(_valid_payload(compress=data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(good) - 1))
        good[position] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        good = good[: data.draw(st.integers(0, len(good)))]
    b = node("b", [100.0])
    inbox = b.receive([bytes(good)], T0)
    assert inbox.accepted + inbox.rejected + inbox.discarded == 1
    seen = b.table.usage[b.table.present]
    assert np.isfinite(seen).all() and (seen >= 0).all()


def test_reports_in_other_dimensions_are_rejected_not_misread():
    two = node("two", [[100.0, 1e6]], dimensions=MSGS_BYTES)
    swapped = node("swapped", [[1e6, 100.0]], dimensions=("publish_bytes_per_s", "publish_msgs_per_s"))
    one = node("one", [100.0])
    out = publish({"two": two, "swapped": swapped, "one": one}, {"two": [10.0], "swapped": [10.0], "one": [10.0]}, T0)
    assert two.receive(out["one"][1] + out["swapped"][1], T0).rejected == 2
    assert one.receive(out["two"][1], T0).rejected == 1
    assert two.table.n_brokers == 1 and one.table.n_brokers == 1


def test_a_signature_made_with_another_key_is_rejected():
    signed = _valid_payload(hmac_key=b"cluster-key")
    unsigned = _valid_payload()
    assert node("b", [100.0], hmac_key=b"cluster-key").receive([signed], T0).accepted == 1
    assert node("b", [100.0], hmac_key=b"other-key").receive([signed], T0).rejected == 1
    assert node("b", [100.0], hmac_key=b"cluster-key").receive([unsigned], T0).rejected == 1


def test_a_report_from_an_unknown_broker_is_rejected_when_the_cluster_is_known():
    b = BrokerNode("b", np.array([1]), np.array([[100.0]]), NodeSettings(MSGS), known_brokers=["b", "c"])
    assert b.receive([_valid_payload()], T0).rejected == 1  # the sender is "a"


def test_a_node_ignores_its_own_report():
    a = node("a", [100.0])
    traffic = a.admit(np.array([30.0]), np.array([100.0]), T0)
    inbox = a.receive(payloads(a.build_reports(traffic, T0)), T0)
    assert (inbox.accepted, inbox.discarded) == (0, 1)
    assert a.table.brokers == ["a"]
    assert a.table.usage[0, OWN, 0] == 30.0


def test_a_restarted_broker_replaces_what_its_old_incarnation_reported():
    b = node("b", [[100.0]] * 2)
    old = node("a", [[100.0]] * 2)
    b.receive(payloads(old.build_reports(old.admit(np.array([10.0, 20.0]), np.full(2, 100.0), T0), T0)), T0)
    new = BrokerNode("a", np.array([1, 2]), np.full((2, 1), 100.0), NodeSettings(MSGS), incarnation=1)
    b.receive(payloads(new.build_reports(new.admit(np.array([5.0, 0.0]), np.full(2, 100.0), T0 + 1), T0 + 1)), T0 + 1)
    assert usage_of(b, "a", 1) == (True, pytest.approx([5.0]))
    assert not usage_of(b, "a", 2)[0]  # the new incarnation does not serve it: the old entry is void


# -- clean up -------------------------------------------------------------------------------------


def test_cleanup_removes_dead_brokers_and_expires_silent_ones():
    brokers = {name: node(name, [100.0], force_every=1000) for name in ("a", "b", "c")}
    exchange(brokers, {"a": [10.0], "b": [20.0], "c": [30.0]}, T0)
    b = brokers["b"]
    assert b.cleanup(T0, dead=[("a", 0)]) == 1
    assert not usage_of(b, "a", 1)[0] and usage_of(b, "c", 1)[0]
    assert b.cleanup(T0, dead=[("a", 0), ("nobody", 3)]) == 0
    assert b.table.view_brokers()[0] == 2
    stale_after_s = b.settings.stale_after_s
    assert b.cleanup(T0 + stale_after_s) == 0
    assert b.cleanup(T0 + stale_after_s + 0.5) == 1  # c was silent for longer than stale_after_s
    assert b.table.view_brokers()[0] == 1  # only itself


def test_a_dead_older_incarnation_does_not_remove_the_live_one():
    b = node("b", [100.0])
    a = BrokerNode("a", np.array([1]), np.array([[100.0]]), NodeSettings(MSGS), incarnation=2)
    b.receive(payloads(a.build_reports(a.admit(np.array([10.0]), np.array([100.0]), T0), T0)), T0)
    assert b.cleanup(T0, dead=[("a", 1)]) == 0
    assert usage_of(b, "a", 1)[0]


def test_leave_sends_zeros_that_remove_the_entry_at_the_receiver():
    brokers = {"a": node("a", [[100.0]] * 2), "b": node("b", [[100.0]] * 2)}
    exchange(brokers, {"a": [10.0, 20.0], "b": [10.0, 0.0]}, T0)
    a, b = brokers["a"], brokers["b"]
    assert usage_of(b, "a", 1)[0] and usage_of(b, "a", 2)[0]
    outbox = a.leave(T0 + 0.5)
    np.testing.assert_array_equal(outbox.reported, [True, True])
    assert b.receive(payloads(outbox), T0 + 0.5).accepted == 1
    assert not usage_of(b, "a", 1)[0] and not usage_of(b, "a", 2)[0]
    assert a.leave(T0 + 0.6).payloads == []  # nothing left standing
    quiet = node("q", [100.0])
    assert quiet.leave(T0).payloads == []  # never reported anything


# -- allocation -----------------------------------------------------------------------------------


def test_set_quota_takes_effect_at_the_next_allocation():
    a = node("a", [100.0])
    traffic = a.admit(np.array([150.0]), np.array([100.0]), T0)
    assert traffic.usage[0, 0] == 100.0
    a.allocate()
    a.set_quota(np.array([[60.0]]))
    assert a.limit[0, 0] == 100.0
    assert a.admit(np.array([150.0]), np.array([100.0]), T0 + 1).usage[0, 0] == 100.0  # old rate still
    assert a.allocate()[0, 0] == 60.0
    assert a.admit(np.array([150.0]), np.array([100.0]), T0 + 2).usage[0, 0] == pytest.approx(60.0)


@pytest.mark.parametrize("policy", sorted(policies.POLICIES))
def test_an_unlimited_quota_gives_an_infinite_limit_and_admits_all_demand(policy):
    brokers = {"a": node("a", [np.inf], policy=policy), "b": node("b", [np.inf], policy=policy)}
    for round_index in range(3):
        traffic = exchange(brokers, {"a": [1e6], "b": [3.0]}, T0 + round_index)
        assert traffic["a"].usage[0, 0] == 1e6 and traffic["b"].usage[0, 0] == 3.0
        assert traffic["a"].throttled_s[0] == 0.0
        assert brokers["a"].limit[0, 0] == math.inf and brokers["b"].limit[0, 0] == math.inf


def test_allocate_keeps_the_own_column_of_the_policy_floored_at_min_limit():
    """Four brokers starting at the full quota overshoot 2x; pip82-steal's dominant brokers yield to
    `quota - others' usage` < 0, which the node floors at MIN_LIMIT (a rate of 0 would mean unlimited)."""
    names = ("a", "b", "c", "d")
    brokers = {name: node(name, [100.0], policy="pip82-steal") for name in names}
    published = publish(brokers, dict(zip(names, ([200.0], [10.0], [30.0], [60.0]), strict=True)), T0)
    for name, broker in brokers.items():
        broker.receive([p for other, (_, ps) in published.items() if other != name for p in ps], T0)
        n = broker.table.n_slots
        limit_view = np.zeros((1, n))
        limit_view[0, OWN] = broker.limit[0, 0]
        raw = policies.bind("pip82-steal")(
            broker.quota[:, 0], broker.table.usage[:, :n, 0], limit_view, None, broker.table.present[:, :n]
        )[0, OWN]
        assert broker.allocate()[0, 0] == max(raw, MIN_LIMIT)
    assert brokers["a"].limit[0, 0] == MIN_LIMIT and brokers["d"].limit[0, 0] == MIN_LIMIT


def test_reported_demand_gives_fair_share_the_exact_max_min_split():
    """Warm up at 40/40/40 (limits 33.3 each), then demand shifts to 70/25/5: with demand in the reports
    fair-share hands out exactly the water-filling split at once; without, the throttled broker can only
    ask for `limit * (1 + headroom)`."""
    shift = {"a": [70.0], "b": [25.0], "c": [5.0]}
    for report_demand, expected_a in ((True, 70.0), (False, 100.0 / 3 * 1.1)):
        brokers = {name: node(name, [100.0], policy="fair-share", report_demand=report_demand) for name in "abc"}
        exchange(brokers, {"a": [40.0], "b": [40.0], "c": [40.0]}, T0)
        np.testing.assert_allclose([brokers[n].limit[0, 0] for n in "abc"], [100.0 / 3] * 3)
        exchange(brokers, shift, T0 + 1)
        assert brokers["a"].limit[0, 0] == pytest.approx(expected_a)
    fair = max_min_fair(np.array([100.0]), np.array([[70.0, 25.0, 5.0]]))[0]
    np.testing.assert_allclose(fair, [70.0, 25.0, 5.0])
    brokers = {name: node(name, [100.0], policy="fair-share", report_demand=True) for name in "abc"}
    exchange(brokers, {"a": [40.0], "b": [40.0], "c": [40.0]}, T0)
    exchange(brokers, shift, T0 + 1)
    np.testing.assert_allclose([brokers[n].limit[0, 0] for n in "abc"], fair, rtol=0, atol=1e-9)
    # a report without demand in the view: the policy falls back to usage for everyone
    mixed = node("m", [100.0], policy="fair-share", report_demand=True)
    plain = node("p", [100.0], policy="fair-share")
    mixed.receive(payloads(plain.build_reports(plain.admit(np.array([90.0]), np.array([100.0]), T0), T0)), T0)
    mixed.admit(np.array([90.0]), np.array([100.0]), T0)
    assert not mixed.table.demand_known[slot_of(mixed, "p", 1)]
    assert mixed.allocate()[0, 0] == pytest.approx(50.0)  # usages 90/90 split evenly; demand would give 90


def test_a_negative_or_nan_quota_is_refused_infinity_is_the_one_unlimited():
    for quota in ([-1.0], [np.nan]):
        with pytest.raises(ValueError, match="quota must be >= 0, or np.inf for unlimited"):
            node("a", quota)
    a = node("a", [np.inf])
    with pytest.raises(ValueError, match="np.inf for unlimited"):
        a.set_quota(np.array([[-1.0]]))
    a.set_quota(np.array([[50.0]]))
    a.admit(np.array([80.0]), np.array([100.0]), T0)
    assert a.allocate()[0, 0] == 50.0
    a.set_quota(np.array([[np.inf]]))
    assert a.allocate()[0, 0] == math.inf


def test_settings_refuse_a_key_that_is_not_bytes_and_a_policy_that_is_not_bound():
    with pytest.raises(TypeError, match="key must be non-empty bytes or None, got str"):
        NodeSettings(MSGS, hmac_key="cluster-key")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"policy must be allocator.policies.bind\(name, params\), not str"):
        NodeSettings(MSGS, policy="fair-share")  # type: ignore[arg-type]


def test_the_report_header_carries_incarnation_sequence_and_publish_time():
    a = BrokerNode(
        "a", np.array([1, 2]), np.full((2, 1), 100.0), NodeSettings(MSGS, interval_s=0.5, threshold_pct=0.0),
        incarnation=3, group_names={1: "tenant/ns-1", 2: "tenant/ns-2"},
    )  # fmt: skip
    seqs = []
    for round_index, demand in enumerate(([10.0, 0.0], [10.0, 0.0], [10.0, 5.0], [11.0, 5.0])):
        now_s = T0 + 0.5 * round_index
        outbox = a.build_reports(a.admit(np.array(demand), np.full(2, 100.0), now_s), now_s)
        for payload in payloads(outbox):
            report = decode_report(payload)
            assert (report.broker, report.incarnation, report.interval_ms) == ("a", 3, 500)
            assert report.sent_at_ms == round(now_s * 1000)
            assert report.dimensions == MSGS
            # each group's name travels once, with its first report
            assert report.dictionary == {0: {1: "tenant/ns-1"}, 2: {2: "tenant/ns-2"}}.get(round_index)
            seqs.append((round_index, report.seq, report.group_ids.tolist()))
    # round 1 changes nothing, so it sends nothing and uses no sequence number
    assert seqs == [(0, 1, [1]), (2, 2, [2]), (3, 3, [1])]
