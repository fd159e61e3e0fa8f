"""A host's endpoint on a real Redis: reports go through Pub/Sub, the injected faults apply on receipt exactly as
on the simulated channel, what Redis loses is counted apart, and a slow subscriber or a restarted server costs
reports but never a hang."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable

import pytest
import redis

from actors.plan import ChannelPlan
from actors.transport.channel import Channel
from actors.transport.redis_channel import BACKOFF_MAX_S, RedisEndpoint, RedisLink
from actors.transport.redis_wire import channel_name, frame

PREFIXES = (f"test:endpoint:{n}" for n in itertools.count())
WAIT_S = 15.0  # the longest any condition below may take on a loaded machine


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.01)


class Hosts:
    """Endpoints of one run's topics, one per host, each with the brokers given."""

    def __init__(self, url: str, plan: ChannelPlan, brokers: dict[str, list[str]], topics: dict[str, list[int]]):
        self.epoch = time.time()
        self.link = RedisLink(url, next(PREFIXES), plan, seed=11)
        self.endpoints = {host: RedisEndpoint(self.link, self.epoch) for host in brokers}
        for host, names in brokers.items():
            for name in names:
                self.endpoints[host].subscribe(name, topics[name])
        self.received: dict[str, list[bytes]] = {name: [] for names in brokers.values() for name in names}
        self.host_of = {name: host for host, names in brokers.items() for name in names}

    def now_s(self) -> float:
        return time.time() - self.epoch

    def fetch(self) -> dict[str, list[bytes]]:
        for name, received in self.received.items():
            received += self.endpoints[self.host_of[name]].fetch(name, self.now_s())
        return self.received

    def counters(self) -> dict:
        totals = {}
        for endpoint in self.endpoints.values():
            totals |= endpoint.take_counters()
        return totals

    def close(self) -> None:
        for endpoint in self.endpoints.values():
            endpoint.close()


@pytest.fixture
def hosts_on(redis_server):
    made: list[Hosts] = []

    def make(plan: ChannelPlan, brokers: dict[str, list[str]], topics: dict[str, list[int]]) -> Hosts:
        made.append(Hosts(redis_server.url, plan, brokers, topics))
        return made[-1]

    yield make
    for hosts in made:
        hosts.close()


def test_reports_reach_every_other_subscriber_of_their_shard_in_order(hosts_on):
    hosts = hosts_on(ChannelPlan(), {"h1": ["a"], "h2": ["b", "c"]}, {"a": [0], "b": [0], "c": [0]})
    payloads = [f"report {n}".encode() for n in range(5)]
    hosts.endpoints["h1"].publish_many([("a", 0, payload) for payload in payloads], hosts.now_s())
    wait_for(lambda: len(hosts.fetch()["c"]) == 5 and len(hosts.received["b"]) == 5, "b and c got every report")
    assert hosts.received["b"] == payloads and hosts.received["c"] == payloads
    assert hosts.received["a"] == []  # a publisher does not hear itself
    counters = hosts.counters()
    assert counters["a"].bytes_published == sum(map(len, payloads))
    assert counters["b"].bytes_delivered == counters["c"].bytes_delivered == sum(map(len, payloads))
    assert counters["b"].messages_delivered == 5
    assert sum(c.deliveries_dropped + c.deliveries_lost_transport for c in counters.values()) == 0


def test_the_injected_faults_decide_on_receipt_exactly_as_the_simulated_channel(hosts_on):
    """Same seed, same copies offered in the same order: a subscriber keeps the same reports (loss, duplicates)
    over Redis as on the simulated channel, and the losses count as injected, not as the transport's."""
    plan = ChannelPlan(loss=0.4, duplicate=0.3)
    topics = {"a": [0], "b": [0], "c": [0]}
    hosts = hosts_on(plan, {"h1": ["a"], "h2": ["b"], "h3": ["c"]}, topics)
    simulated = Channel(plan, seed=11)
    for name, subscribed in topics.items():
        simulated.subscribe(name, subscribed)
    payloads = [f"report {n}".encode() for n in range(60)]
    hosts.endpoints["h1"].publish_many([("a", 0, payload) for payload in payloads], hosts.now_s())
    simulated.publish_many([("a", 0, payload) for payload in payloads], 0.0)
    expected = {name: simulated.fetch(name, 1.0) for name in ("b", "c")}
    counters: dict = {}

    def all_offered() -> bool:
        hosts.fetch()
        for name, counted in hosts.counters().items():
            counters[name] = counters[name].plus(counted) if name in counters else counted
        return all(counters[n].messages_delivered + counters[n].deliveries_dropped >= 60 for n in ("b", "c"))

    wait_for(all_offered, "every copy offered to b and c")
    wait_for(lambda: all(len(hosts.fetch()[n]) == len(expected[n]) for n in ("b", "c")), "duplicates delivered")
    assert hosts.received["b"] == expected["b"] and hosts.received["c"] == expected["c"]
    assert 0 < counters["b"].deliveries_dropped < 60 and counters["b"].deliveries_lost_transport == 0


def test_a_partition_cuts_the_copies_across_it_and_interest_routing_uses_inboxes(hosts_on):
    plan = ChannelPlan(routing="interest", topics=3, partitions=(("a", "b"), ("c",)))
    hosts = hosts_on(plan, {"h1": ["a"], "h2": ["b"], "h3": ["c"]}, {"a": [0], "b": [1], "c": [2]})
    hosts.endpoints["h1"].publish_many([("a", 1, b"to b"), ("a", 2, b"to c")], hosts.now_s())
    wait_for(lambda: hosts.fetch()["b"] == [b"to b"], "b got its inbox")
    dropped = []
    wait_for(lambda: dropped.append(hosts.counters()["c"].deliveries_dropped) or sum(dropped) == 1, "c's copy cut")
    assert hosts.fetch()["c"] == [] and hosts.received["b"] == [b"to b"]
    client = redis.Redis.from_url(hosts.link.url)
    assert client.pubsub_numsub(channel_name(hosts.link.prefix, "interest", 1))[0][1] == 1


def test_a_gap_in_a_senders_numbers_counts_as_lost_by_the_transport(hosts_on, redis_server):
    hosts = hosts_on(ChannelPlan(), {"h2": ["b", "c"]}, {"b": [0], "c": [0]})
    client = redis.Redis.from_url(redis_server.url)
    name = channel_name(hosts.link.prefix, "broadcast", 0)
    for seq in (1, 2, 5, 6, 9):  # 3, 4, 7 and 8 never published: lost on the way
        client.publish(name, frame("x", 42, seq, time.time(), f"report {seq}".encode()))
    wait_for(lambda: len(hosts.fetch()["b"]) == 5, "b got the five published")
    counters = hosts.counters()
    assert counters["b"].deliveries_lost_transport == counters["c"].deliveries_lost_transport == 4
    assert counters["b"].deliveries_dropped == 0
    client.publish(name, b"not a frame")
    client.publish(name, frame("x", 42, 10, time.time(), b"report 10"))
    wait_for(lambda: hosts.fetch()["b"][-1] == b"report 10", "the next frame after a stray message")
    assert hosts.endpoints["h2"].frames_rejected == 1


def test_a_slow_subscriber_is_dropped_by_redis_then_reconnects_and_counts_the_loss(own_redis_server):
    client = redis.Redis.from_url(own_redis_server.url)
    client.config_set("client-output-buffer-limit", "pubsub 64kb 0 0")
    hosts = Hosts(own_redis_server.url, ChannelPlan(), {"h1": ["a"], "h2": ["b"]}, {"a": [0], "b": [0]})
    try:
        reader = hosts.endpoints["h2"]
        reader.stall(["b"], hosts.now_s(), 600.0)
        report = bytes(20_000)
        # 12 MB: more than the socket buffers hold (~4 MB on loopback) and the 64 kB Redis then keeps for it
        for _ in range(600):
            hosts.endpoints["h1"].publish_many([("a", 0, report)], hosts.now_s())
        reader.stall(["b"], hosts.now_s(), 0.0)  # reads again
        events: list = []

        def reconnected() -> bool:
            events.extend(reader.take_events())
            hosts.endpoints["h1"].publish_many([("a", 0, b"after")], hosts.now_s())
            return any(kind == "transport_reconnected" for _, kind, _, _ in events) and b"after" in hosts.fetch()["b"]

        wait_for(reconnected, "the slow subscriber reconnected and reads again")
        kinds = [kind for _, kind, _, _ in events]
        assert kinds[:2] == ["transport_disconnected", "transport_reconnected"]
        counters = hosts.counters()
        received = hosts.received["b"].count(report)
        assert received < 600 and counters["b"].deliveries_lost_transport >= 600 - received
    finally:
        hosts.close()


def test_a_restarted_server_costs_reports_but_no_hang_and_both_sides_come_back(own_redis_server):
    hosts = Hosts(own_redis_server.url, ChannelPlan(), {"h1": ["a"], "h2": ["b"]}, {"a": [0], "b": [0]})
    try:
        publisher, reader = hosts.endpoints["h1"], hosts.endpoints["h2"]
        publisher.publish_many([("a", 0, b"before")], hosts.now_s())
        wait_for(lambda: hosts.fetch()["b"] == [b"before"], "b got the first report")
        own_redis_server.stop()
        started = time.monotonic()
        for _ in range(20):  # Redis is gone: each publish fails fast or waits for its back-off
            publisher.publish_many([("a", 0, b"while down")], hosts.now_s())
        assert time.monotonic() - started < 5.0
        own_redis_server.start()

        def through() -> bool:
            publisher.publish_many([("a", 0, b"after")], hosts.now_s())
            return b"after" in hosts.fetch()["b"]

        wait_for(through, "reports flow again", timeout_s=WAIT_S + 2 * BACKOFF_MAX_S)
        kinds = {(kind, json_side(detail)) for _, kind, _, detail in publisher.take_events() + reader.take_events()}
        assert ("transport_disconnected", "publisher") in kinds and ("transport_reconnected", "publisher") in kinds
        assert ("transport_disconnected", "subscriber") in kinds and ("transport_reconnected", "subscriber") in kinds
        assert b"while down" not in hosts.received["b"]
    finally:
        hosts.close()


def json_side(detail: str) -> str:
    return json.loads(detail)["side"]
