"""Passing news on (`allocator.node.relay`): fair-share-safe publishes again, as they are, the peers' reports that
brought it news; a change one link lost arrives by another broker the next round."""

from __future__ import annotations

import numpy as np
import pytest
from test_broker_node import T0, node, payloads, usage_of
from test_usage_table import DIMS, GROUPS, RULES, make_table, report

from allocator.node.one_group import registry_round
from allocator.node.relay import MARK, Relay
from allocator.node.report_reader import ReportReader
from allocator.node.usage_table import UsageTable
from allocator.policies import RECOMMENDED
from allocator.policies.fair_share_safe.reporting import relayers_needed
from allocator.wire.codec import decode_report, encode_report
from allocator.wire.routing import Routes
from allocator.wire.usage_report import ReportBatch

START = 10


def three_brokers(policy: str) -> dict:
    brokers = {name: node(name, [90.0], policy=policy) for name in "abc"}
    for round_index in range(START):  # long enough for the start's news and its copies to be over
        registry_round(brokers, dict.fromkeys(brokers, 30.0), T0 + round_index)
    return brokers


@pytest.mark.parametrize(("policy", "relays"), [(RECOMMENDED, True), ("pip82-steal", False)])
def test_a_change_one_link_loses_reaches_its_receiver_by_another_broker_the_next_round(policy, relays):
    """a's demand falls from 30 to 10, and every report of a to c is lost from then on: c hears a's change from
    b's copy of a's report the round after (fair-share-safe), or never (the references)."""
    brokers = three_brokers(policy)
    heard = []
    for round_index in range(START, START + 3):
        registry_round(brokers, {"a": 10.0, "b": 30.0, "c": 30.0}, T0 + round_index, {("a", "c")})
        heard.append(float(usage_of(brokers["c"], "a", 1)[1][0]))
    assert heard[0] == pytest.approx(30.0)  # a's report of round 4 lost on its way to c
    assert (heard[1] == pytest.approx(10.0)) is relays  # b's copy of it, published in round 5


def test_fair_share_safe_passes_a_peers_news_on_in_as_many_of_its_reports_as_it_sends_copies_of_its_own():
    """a's demand falls and stays: b publishes a's report of it again the next round, then a's copies of the
    change, as many reports in all as b sends copies of a change of its own, and nothing of a's after."""
    brokers = three_brokers(RECOMMENDED)
    b = brokers["b"]
    _, copies = b._hooks.news_relays(b.loss_meter.chance_all_lost)
    assert copies >= 2  # a few rounds without loss do not rule loss out
    relayed_of_a = []
    for round_index in range(START, START + copies + 3):
        now_s, demand = T0 + round_index, {"a": 10.0, "b": 30.0, "c": 30.0}
        published = {}
        for name, broker in brokers.items():
            traffic = broker.admit(np.array([demand[name]]), np.array([100.0]), now_s)
            published[name] = payloads(broker.build_reports(traffic, now_s))
        unmarked_payloads, marked = b.relay.unmark(published["b"])
        relayed = [payload for payload, copy in zip(unmarked_payloads, marked, strict=True) if copy]
        relayed_of_a.append(sum(decode_report(payload).broker == "a" for payload in relayed))
        for name, broker in brokers.items():
            broker.receive([p for other, ps in published.items() if other != name for p in ps], now_s)
            broker.allocate()
    assert relayed_of_a == [0] + [1] * copies + [0, 0]


def note(relay: Relay, table, reports: list) -> None:
    """`reports` as (sender, seq, group, rate) merged into `table` at once, then noted with two copies a news."""
    batch = ReportBatch.of([report(sender, seq, [group], [[rate, 1.0]]) for sender, seq, group, rate in reports], DIMS)
    table.merge_many(batch, 100.0)
    relay.note(batch, np.ones(len(batch), bool), [f"{s}{q}".encode() for s, q, _, _ in reports], table, 2, copies=2)


def test_news_starts_as_many_relays_of_its_author_as_asked_and_a_report_with_nothing_new_after_them_none():
    relay, table = Relay(Routes.single(3, topic=7), "quotalab", True), make_table()
    note(relay, table, [("a", 1, 10, 50.0), ("b", 1, 10, 50.0)])
    assert relay.take() == [(7, MARK + b"a1"), (7, MARK + b"b1")]  # both new
    note(relay, table, [("a", 2, 10, 50.0), ("b", 2, 10, 80.0)])  # a's second copy; b's change
    assert relay.take() == [(7, MARK + b"a2"), (7, MARK + b"b2")]
    note(relay, table, [("a", 3, 10, 50.0), ("b", 3, 10, 80.0)])  # past a's copies; b's second copy
    assert relay.take() == [(7, MARK + b"b3")]
    note(relay, table, [("a", 4, 10, 50.0), ("b", 4, 10, 80.0)])
    assert relay.take() == []


def test_a_news_is_passed_on_by_the_brokers_after_its_author_in_name_order_as_many_as_the_hooks_ask():
    """This broker ("me") knows a, b and c: the one broker after b is c, the two after b are c and me, the one
    after c is me (the names wrap around)."""
    reports = [("a", 1, 10, 50.0), ("b", 1, 10, 50.0), ("c", 1, 10, 50.0)]
    batch = ReportBatch.of([report(sender, seq, [group], [[rate, 1.0]]) for sender, seq, group, rate in reports], DIMS)
    relayed = {}
    for relayers in (1, 2, 3):
        relay, table = Relay(Routes.single(3), "quotalab", True), make_table()
        table.merge_many(batch, 100.0)
        relay.note(batch, np.ones(3, bool), [b"a", b"b", b"c"], table, relayers, copies=1)
        relayed[relayers] = [payload[1:] for _, payload in relay.take()]
    assert relayed == {1: [b"c"], 2: [b"b", b"c"], 3: [b"a", b"b", b"c"]}


@pytest.mark.parametrize(("loss", "relayers"), [(0.005, 1), (0.05, 1), (0.1, 2), (0.3, 6)])
def test_as_many_relayers_as_leave_a_change_unheard_for_a_round_with_odds_of_at_most_one_in_a_hundred(loss, relayers):
    assert relayers_needed(loss, 0.01) == relayers
    assert loss * (1 - (1 - loss) ** 2) ** relayers <= 0.01 < loss * (1 - (1 - loss) ** 2) ** (relayers - 1) or (
        relayers == 1
    )


def test_reports_are_passed_on_only_where_a_copy_is_as_good_as_the_authors():
    """Broadcast routes (a group's topic is every broker's) in the numbered quotalab wire; not interest routes
    (one inbox per receiver) nor Pulsar's format (a receiver numbers its reports by arrival: a copy would count
    as a new round). A copy goes on the topic of a group of the report this broker holds."""
    assert Relay(Routes.sharded(GROUPS, 4), "quotalab", True).enabled
    assert Relay(Routes.single(3), "quotalab", True).enabled
    assert not Relay(Routes.from_lists([[1], [1, 2], [2]]), "quotalab", True).enabled
    assert not Relay(Routes.single(3), "pulsar", True).enabled
    assert not Relay(Routes.single(3), "quotalab", False).enabled  # a policy that passes nothing on
    relay, table = Relay(Routes.sharded(GROUPS, 4), "quotalab", True), make_table()
    batch = ReportBatch.of(
        [report("a", 1, [99, 10], [[5.0, 1.0], [6.0, 1.0]]), report("b", 1, [20], [[7.0, 1.0]])], DIMS
    )
    table.merge_many(batch, 100.0)
    relay.note(batch, np.ones(2, bool), [b"x", b"y"], table, 2, copies=1)
    assert relay.take() == [(10 % 4, MARK + b"x"), (20 % 4, MARK + b"y")]  # group 99: not one of this broker's
    payloads, copies = relay.unmark([MARK + b"x", b"y"])
    assert (payloads, copies.tolist()) == ([b"x", b"y"], [True, False])
    assert Relay(Routes.single(3), "pulsar", True).unmark([MARK + b"x"])[1].tolist() == [False]


def test_a_report_is_news_when_it_brings_an_entry_or_moves_a_rate_by_more_than_one_percent():
    table = make_table()
    table.merge_many(ReportBatch.of([report("b", 1, [10], [[100.0, 1.0]])], DIMS), 100.0)
    assert table.news.tolist() == [True]  # a new entry
    batch = ReportBatch.of([report("b", 2, [10], [[100.5, 1.0]]), report("c", 1, [10], [[50.0, 1.0]])], DIMS)
    table.merge_many(batch, 100.0)
    assert table.news.tolist() == [False, True]  # 0.5% is a steady rate's jitter; c is new
    table.merge_many(ReportBatch.of([report("b", 3, [10], [[103.0, 1.0]])], DIMS), 100.0)
    assert table.news.tolist() == [True]
    table.merge_many(ReportBatch.of([report("b", 3, [10], [[90.0, 1.0]])], DIMS), 100.0)
    assert table.news.tolist() == [False]  # a duplicate is discarded, news or not


def test_a_copy_is_told_from_its_authors_report_by_its_mark_and_the_loss_meter_counts_only_the_authors():
    """a's report of round 1 reaches c only as b's copy (a's own was lost), and d as if it were a's own: the copy
    fills c's table, but c's loss meter counts the author's link, which lost one report, where d sees no gap."""
    a = node("a", [90.0], policy=RECOMMENDED)
    receivers = {name: node(name, [90.0], policy=RECOMMENDED) for name in "cd"}
    for round_index in range(3):
        now_s = T0 + round_index
        traffic = a.admit(np.array([30.0]), np.array([100.0]), now_s)
        (own,) = payloads(a.build_reports(traffic, now_s))
        for name, receiver in receivers.items():
            receiver.receive([MARK + own if round_index == 1 and name == "c" else own], now_s)
            assert usage_of(receiver, "a", 1)[1][0] == pytest.approx(traffic.usage[0, 0])
    assert receivers["c"].loss_meter.loss > 0.0
    assert receivers["d"].loss_meter.loss == 0.0


def test_the_reader_tells_the_position_of_each_report_it_kept():
    reader = ReportReader(node("x", [10.0, 10.0], dimensions=DIMS).settings, group_names=None, known_brokers=None)
    good = [encode_report(report(name, 1, [1], [[5.0, 500.0]], sent_at_s=T0)) for name in "ab"]
    batch, rejected, positions = reader.decode([good[0], b"\x00junk", good[1]], T0)
    assert (batch.brokers, rejected, positions.tolist()) == (["a", "b"], 1, [0, 2])
    batch, rejected, positions = reader.decode([good[0], good[1]], T0, issued={"b": 0})
    assert (batch.brokers, rejected, positions.tolist()) == (["b"], 1, [1])


def test_a_table_that_tracks_no_news_merges_the_same_entries_and_tells_none():
    """A broker that passes no news on (`Relay.enabled` false: interest routes, say) merges without comparing each
    entry with the one it replaces: the same table, and no `news`."""
    tracking, untracked = make_table(), UsageTable("me", GROUPS, len(DIMS), RULES, tracks_news=False)
    for seq, rate in ((1, 100.0), (2, 100.5), (3, 90.0)):
        batch = ReportBatch.of([report("b", seq, [10, 20], [[rate, 1.0], [rate, 2.0]])], DIMS)
        assert tracking.merge_many(batch, 100.0) == untracked.merge_many(batch, 100.0)
        assert untracked.news is None
    assert tracking.entries().keys() == untracked.entries().keys()
    for key, usage in tracking.entries().items():
        np.testing.assert_array_equal(untracked.entries()[key], usage)
