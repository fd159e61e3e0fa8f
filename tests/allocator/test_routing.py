"""Routes: which topics carry each group's entry; broadcast shards and interest inboxes between BrokerNodes."""

import numpy as np
import pytest

from allocator import policies
from allocator.node.broker_node import BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.wire.codec import decode_report
from allocator.wire.routing import Routes

MSGS = ("publish_msgs_per_s",)
T0 = 1000.0


def topics_of(routes: Routes, row: int) -> list[int]:
    return routes.topics[routes.offsets[row] : routes.offsets[row + 1]].tolist()


def test_constructors_agree_on_the_csr_layout():
    single = Routes.single(3, topic=7)
    assert [topics_of(single, row) for row in range(3)] == [[7], [7], [7]]
    sharded = Routes.sharded(np.array([10, 11, 12, 13]), 3)
    assert [topics_of(sharded, row) for row in range(4)] == [[1], [2], [0], [1]]
    lists = Routes.from_lists([[4, 2], [], [0]])
    assert [topics_of(lists, row) for row in range(3)] == [[4, 2], [], [0]]
    assert lists.offsets.tolist() == [0, 2, 2, 3] and lists.n_groups == 3
    assert Routes.single(0).n_groups == Routes.from_lists([]).n_groups == 0


def test_pairs_lists_every_topic_of_the_rows_asked_for():
    routes = Routes.from_lists([[4, 2], [], [0], [1, 3, 5]])
    rows, topics = routes.pairs(np.array([0, 1, 3]))
    assert list(zip(rows.tolist(), topics.tolist(), strict=True)) == [(0, 4), (0, 2), (3, 1), (3, 3), (3, 5)]
    rows, topics = routes.pairs(np.array([], dtype=np.int64))
    assert len(rows) == len(topics) == 0


def test_by_topic_gives_one_part_per_topic_with_its_rows_in_order():
    routes = Routes.from_lists([[4, 2], [2], [0], [1, 2, 4]])
    rows, topics, bounds = routes.by_topic(np.array([0, 1, 3]))
    parts = {topic: rows[start:end].tolist() for topic, start, end in zip(topics, bounds[:-1], bounds[1:], strict=True)}
    assert topics.tolist() == [1, 2, 4] and parts == {1: [3], 2: [0, 1, 3], 4: [0, 3]}
    rows, topics, bounds = routes.by_topic(np.array([], dtype=np.int64))
    assert len(rows) == len(topics) == 0 and bounds.tolist() == [0]


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda: Routes.from_lists([[1, 1]]), "a group lists a topic twice"),
        (lambda: Routes.from_lists([[-1]]), "topics must be in"),
        (lambda: Routes.from_lists([[70_000]]), "topics must be in"),
        (lambda: Routes.sharded(np.arange(3), 0), "shards must be in"),
        (lambda: Routes(np.array([0, 2, 1]), np.zeros(1, dtype=np.uint16)), "never decrease"),
        (lambda: Routes(np.array([0, 2]), np.zeros(1, dtype=np.uint16)), "topics must be uint16"),
        (lambda: Routes(np.array([0, 1]), np.zeros(1, dtype=np.int64)), "topics must be uint16"),
    ],
)
def test_bad_routes_fail_at_construction(make, reason):
    with pytest.raises(ValueError, match=reason):
        make()


def test_a_node_needs_routes_for_each_of_its_groups():
    with pytest.raises(ValueError, match="routes are for 2 groups, the node has 3"):
        BrokerNode("a", np.arange(3), np.ones((3, 1)), NodeSettings(MSGS), routes=Routes.single(2))


# -- interest routing between nodes ----------------------------------------------------------------------


def interest_cluster(owners: dict[int, list[int]], n_brokers: int, **settings_kw) -> list[BrokerNode]:
    """Broker i hosts the groups whose owners include i; a group's entry goes to the inbox (topic) of every
    other owner."""
    settings = NodeSettings(MSGS, policy=policies.bind("fair-share"), threshold_pct=0.0, **settings_kw)
    nodes = []
    for broker in range(n_brokers):
        groups = sorted(group for group, hosts in owners.items() if broker in hosts)
        routes = Routes.from_lists([[peer for peer in owners[group] if peer != broker] for group in groups])
        nodes.append(BrokerNode(f"b{broker}", np.array(groups), np.full((len(groups), 1), 100.0), settings,
                                routes=routes))  # fmt: skip
    return nodes


def deliver(nodes: list[BrokerNode], outboxes, now_s: float) -> None:
    """Topic i is broker i's inbox."""
    for index, node in enumerate(nodes):
        node.receive([payload for outbox in outboxes for topic, payload in outbox.payloads if topic == index], now_s)


OWNERS = {10: [0, 1, 2], 11: [0, 1], 12: [1, 2, 3], 13: [3], 14: [0, 3]}


def test_each_inbox_receives_exactly_the_entries_of_the_groups_its_broker_shares():
    nodes = interest_cluster(OWNERS, 4)
    for node in nodes:
        outbox = node.build_reports(
            node.admit(np.full(len(node.group_ids), 10.0), np.ones(len(node.group_ids)), T0), T0
        )
        sender = int(node.name[1:])
        assert len({topic for topic, _ in outbox.payloads}) == len(outbox.payloads)  # one report per topic
        for topic, payload in outbox.payloads:
            shared = sorted(g for g, hosts in OWNERS.items() if sender in hosts and topic in hosts and topic != sender)
            assert decode_report(payload).group_ids.tolist() == shared
        expected = {peer for g in node.group_ids for peer in OWNERS[int(g)] if peer != sender}
        assert {topic for topic, _ in outbox.payloads} == expected
        # a group hosted by this broker alone (13 on b3) goes nowhere
        np.testing.assert_array_equal(outbox.reported, [len(OWNERS[int(g)]) > 1 for g in node.group_ids])
        assert (outbox.report_bytes[~outbox.reported] == 0).all()
        assert outbox.report_bytes.sum() == pytest.approx(sum(len(p) for _, p in outbox.payloads))


def test_interest_routing_gives_every_broker_the_view_of_its_groups_and_leave_follows_the_routes():
    nodes = interest_cluster(OWNERS, 4)
    outboxes = [
        n.build_reports(n.admit(np.full(len(n.group_ids), 10.0), np.ones(len(n.group_ids)), T0), T0) for n in nodes
    ]
    deliver(nodes, outboxes, T0)
    for node in nodes:
        me = int(node.name[1:])
        expected = {(g, f"b{b}") for g in node.group_ids.tolist() for b in OWNERS[g] if b != me}
        assert set(node.table.entries()) - {(g, node.name) for g in node.group_ids.tolist()} == expected
        np.testing.assert_array_equal(node.table.view_brokers(), [len(OWNERS[int(g)]) for g in node.group_ids])
        assert node.table.n_slots == max(len(OWNERS[int(g)]) for g in node.group_ids)
    deliver(nodes, [nodes[1].leave(T0 + 0.5)], T0 + 0.5)
    for node in nodes[:1] + nodes[2:]:
        assert not {(g, b) for g, b in node.table.entries() if b == "b1"}


def test_a_round_costs_what_the_shared_groups_cost_not_what_the_cluster_holds():
    """100 brokers, each group on 3 of them: every table has as many slots as a group has owners, and a broker
    receives reports only from the brokers it shares a group with."""
    rng = np.random.default_rng(0)
    owners = {group: sorted(rng.choice(100, size=3, replace=False).tolist()) for group in range(200)}
    nodes = interest_cluster(owners, 100)
    outboxes = [
        n.build_reports(n.admit(np.full(len(n.group_ids), 10.0), np.ones(len(n.group_ids)), T0), T0) for n in nodes
    ]
    deliver(nodes, outboxes, T0)
    for node in nodes:
        if not len(node.group_ids):
            continue
        assert node.table.n_slots == 3 and node.table.present.shape[1] <= 4
        peers = {b for g in node.group_ids.tolist() for b in owners[g]} - {int(node.name[1:])}
        assert node.table.n_brokers == 1 + len(peers) < 100
