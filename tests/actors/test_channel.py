"""Channel statistics for fixed seeds, delivery timing, accounting, determinism and settings."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.plan import Burst, ChannelPlan
from actors.transport.channel import Channel, Counters, Exchange

N = 20_000


def one_link(spec: ChannelPlan, seed: int = 1) -> Channel:
    channel = Channel(spec, seed=seed)
    channel.subscribe("rx", [0])
    return channel


def received_per_message(spec: ChannelPlan, n: int = N, seed: int = 1) -> list[int]:
    """Publish message i at now=i with no delay and return how many copies of each arrived."""
    channel = one_link(spec, seed)
    counts = [0] * n
    for i in range(n):
        channel.publish("tx", 0, i.to_bytes(4, "big"), float(i))
        for payload in channel.fetch("rx", float(i)):
            counts[int.from_bytes(payload, "big")] += 1
    return counts


def mean_drop_run(counts: list[int]) -> float:
    runs = [len(list(group)) for lost, group in itertools.groupby(c == 0 for c in counts) if lost]
    return sum(runs) / len(runs)


def arrival_order(channel: Channel, subscriber: str = "rx") -> list[int]:
    return [int.from_bytes(p, "big") for p in channel.fetch(subscriber, float("inf"))]


def test_bernoulli_loss_rate():
    counts = received_per_message(ChannelPlan(loss=0.3))
    assert counts.count(0) / N == pytest.approx(0.3, abs=0.02)


def test_gilbert_elliott_bursts_last_one_over_p_exit():
    burst = Burst(p_enter=0.05, p_exit=0.25, loss_bad=1.0)
    bursty = received_per_message(ChannelPlan(loss=0.0, burst=burst))
    loss = bursty.count(0) / N
    assert loss == pytest.approx(burst.p_enter / (burst.p_enter + burst.p_exit), abs=0.02)
    assert mean_drop_run(bursty) == pytest.approx(1 / burst.p_exit, rel=0.1)
    bernoulli = received_per_message(ChannelPlan(loss=loss))
    assert mean_drop_run(bernoulli) == pytest.approx(1 / (1 - loss), rel=0.1)
    assert mean_drop_run(bursty) > 2 * mean_drop_run(bernoulli)


def test_burst_state_is_per_link():
    """A burst on one sender's link does not make another sender's copies to the same subscriber bursty."""
    channel = one_link(ChannelPlan(burst=Burst(p_enter=0.05, p_exit=0.25, loss_bad=1.0)))
    lost = {"a": [], "b": []}
    for i in range(N // 2):
        for sender in lost:
            channel.publish(sender, 0, b"x", float(i))
            lost[sender].append(0 if channel.fetch("rx", float(i)) else 1)
    both = sum(a and b for a, b in zip(lost["a"], lost["b"], strict=True)) / len(lost["a"])
    rate_a, rate_b = (sum(v) / len(v) for v in lost.values())
    assert both == pytest.approx(rate_a * rate_b, abs=0.01)


def test_jitter_reorders_at_the_expected_rate():
    # delay 1 +- 1 round, one message per round: message i overtakes i+1 when d_i - d_{i+1} > 1,
    # which for two U[0, 2] delays has probability 1/8.
    channel = one_link(ChannelPlan(delay_s=1.0, jitter_s=1.0))
    for i in range(N):
        channel.publish("tx", 0, i.to_bytes(4, "big"), float(i))
    position = {m: k for k, m in enumerate(arrival_order(channel))}
    inversions = sum(position[i + 1] < position[i] for i in range(N - 1)) / (N - 1)
    assert inversions == pytest.approx(1 / 8, abs=0.01)


def test_reorder_delays_a_copy_by_one_round():
    # Pairs published at the same time: the second overtakes the first when only the first is held back.
    channel = one_link(ChannelPlan(reorder=0.3))
    for i in range(N // 2):
        channel.publish("tx", 0, (2 * i).to_bytes(4, "big"), float(i))
        channel.publish("tx", 0, (2 * i + 1).to_bytes(4, "big"), float(i))
    position = {m: k for k, m in enumerate(arrival_order(channel))}
    swapped = sum(position[2 * i + 1] < position[2 * i] for i in range(N // 2)) / (N // 2)
    assert swapped == pytest.approx(0.3 * 0.7, abs=0.015)


def test_equal_due_times_keep_publish_order():
    channel = one_link(ChannelPlan(delay_s=2.0))
    for i in range(100):
        channel.publish("tx", 0, i.to_bytes(4, "big"), 5.0)
    assert arrival_order(channel) == list(range(100))


def test_duplicate_rate():
    counts = received_per_message(ChannelPlan(duplicate=0.2))
    assert set(counts) == {1, 2}
    assert counts.count(2) / N == pytest.approx(0.2, abs=0.015)


def test_partitions_block_exactly_the_cross_partition_pairs():
    brokers = ["a", "b", "c", "d", "e"]
    channel = Channel(ChannelPlan(partitions=(("a", "b"), ("c",))), seed=3)
    for name in brokers:
        channel.subscribe(name, [0])
    for name in brokers:
        channel.publish(name, 0, name.encode(), 0.0)
    heard = {(p.decode(), rx) for rx, payloads in channel.fetch_all(0.0).items() for p in payloads}
    side = {"a": 0, "b": 0, "c": 1, "d": 2, "e": 2}  # d and e: the implicit partition of the unlisted
    assert heard == {(tx, rx) for tx in brokers for rx in brokers if tx != rx and side[tx] == side[rx]}
    dropped = {name: c.deliveries_dropped for name, c in channel.take_counters().items()}
    assert dropped == {rx: sum(side[tx] != side[rx] for tx in brokers) for rx in brokers}


def test_delay_zero_delivers_at_the_same_now():
    channel = one_link(ChannelPlan())
    channel.publish("tx", 0, b"m", 3.0)
    assert channel.fetch("rx", 3.0) == [b"m"]


@pytest.mark.parametrize("interval_s", [1.0, 0.2])
def test_a_delay_of_one_interval_delivers_one_interval_later(interval_s):
    channel = Channel(ChannelPlan(delay_s=interval_s), seed=0)
    channel.subscribe("rx", [0])
    now_s = 7 * interval_s
    channel.publish("tx", 0, b"m", now_s)
    assert channel.fetch("rx", now_s) == []
    assert channel.fetch("rx", now_s + 0.99 * interval_s) == []
    assert channel.fetch("rx", now_s + interval_s) == [b"m"]


def test_sender_does_not_hear_itself_and_topics_route():
    channel = Channel(ChannelPlan(topics=3), seed=0)
    channel.subscribe("a", [0, 1, 2])
    channel.subscribe("b", [1])
    channel.subscribe("c", [0, 2])
    channel.publish("a", 1, b"t1", 0.0)
    channel.publish("b", 2, b"t2", 0.0)
    assert channel.fetch_all(0.0) == {"a": [b"t2"], "b": [b"t1"], "c": [b"t2"]}


def test_an_inbox_topic_reaches_only_its_owner():
    """Interest routing: one topic per broker, each subscribed to its own."""
    channel = Channel(ChannelPlan(topics=3, routing="interest"), seed=0)
    for index, name in enumerate(("a", "b", "c")):
        channel.subscribe(name, [index])
    channel.publish("a", 2, b"for-c", 0.0)
    assert channel.fetch_all(0.0) == {"a": [], "b": [], "c": [b"for-c"]}


def test_unsubscribe_drops_pending_copies():
    channel = one_link(ChannelPlan(delay_s=1.0))
    channel.publish("tx", 0, b"m", 0.0)
    channel.unsubscribe("rx")
    assert channel.fetch("rx", 1.0) == []
    channel.subscribe("rx", [0])
    assert channel.fetch("rx", 1.0) == []


def test_byte_counters_add_up():
    brokers = [f"b{i}" for i in range(6)]
    size = 120
    channel = Channel(ChannelPlan(loss=0.3, delay_s=0.5, jitter_s=0.5), seed=11)
    for name in brokers:
        channel.subscribe(name, [0])
    rounds = 50
    for r in range(rounds):
        for name in brokers:
            channel.publish(name, 0, bytes(size), float(r))
        channel.fetch_all(float(r))
    first = channel.take_counters()
    channel.fetch_all(float(rounds + 1))
    second = channel.take_counters()
    assert set(first) == set(second) == set(brokers)
    assert all(c.bytes_published == 0 for c in second.values())
    totals = channel.totals()
    for name in brokers:
        t = totals[name]
        assert t.minus(first[name]) == second[name]
        assert t.bytes_published == rounds * size
        assert t.bytes_delivered == t.messages_delivered * size
    published = sum(t.bytes_published for t in totals.values())
    delivered = sum(t.bytes_delivered for t in totals.values())
    dropped = sum(t.deliveries_dropped for t in totals.values())
    assert published * (len(brokers) - 1) == delivered + dropped * size
    assert dropped / (rounds * len(brokers) * (len(brokers) - 1)) == pytest.approx(0.3, abs=0.05)
    assert channel.take_counters() == dict.fromkeys(totals, Counters())


def test_counters_report_publishers_that_are_not_subscribed():
    channel = one_link(ChannelPlan())
    channel.publish("tx", 0, b"abc", 0.0)
    channel.fetch_all(0.0)
    counters = channel.take_counters()
    assert counters["tx"].bytes_published == 3
    assert counters["rx"] == Counters(bytes_published=0, bytes_delivered=3, deliveries_dropped=0, messages_delivered=1)
    assert "tx" not in channel.take_counters()


@settings(max_examples=40, deadline=None)
@given(
    loss=st.floats(0, 1),
    delay=st.floats(0, 3),
    jitter=st.floats(0, 2),
    reorder=st.floats(0, 1),
    split=st.integers(0, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_copy_is_delivered_or_dropped(loss, delay, jitter, reorder, split, seed):
    brokers = ["a", "b", "c", "d"]
    plan = ChannelPlan(loss=loss, delay_s=delay / 2, jitter_s=jitter / 2, reorder=reorder, reorder_delay_s=0.5)
    channel = Channel(plan, seed=seed)
    channel.configure(partitions=(tuple(brokers[:split]),))
    for name in brokers:
        channel.subscribe(name, [0])
    for r in range(10):
        for name in brokers:
            channel.publish(name, 0, bytes(r + 1), r * 0.5)
    channel.fetch_all(100.0)
    for t in channel.totals().values():
        assert t.messages_delivered + t.deliveries_dropped == 10 * (len(brokers) - 1)


def run_deliveries(seed: int, subscribers: list[str]) -> dict[str, list[tuple[float, bytes]]]:
    spec = ChannelPlan(loss=0.2, delay_s=0.5, jitter_s=0.5, duplicate=0.1, reorder=0.1)
    channel = Channel(spec, seed=seed)
    for name in subscribers:
        channel.subscribe(name, [0])
    log: dict[str, list[tuple[float, bytes]]] = {name: [] for name in subscribers}
    for r in range(200):
        channel.publish("tx", 0, r.to_bytes(2, "big"), float(r))
        for name, payloads in channel.fetch_all(float(r)).items():
            log[name].extend((float(r), p) for p in payloads)
    return log


def test_same_seed_same_deliveries():
    assert run_deliveries(5, ["x", "y"]) == run_deliveries(5, ["x", "y"])
    assert run_deliveries(5, ["x", "y"])["x"] != run_deliveries(6, ["x", "y"])["x"]


def test_adding_a_subscriber_leaves_the_others_draws_alone():
    without = run_deliveries(5, ["x", "y"])
    with_z = run_deliveries(5, ["w", "x", "y", "z"])
    assert with_z["x"] == without["x"]
    assert with_z["y"] == without["y"]
    assert with_z["x"] != with_z["y"]


def test_configure_takes_effect():
    channel = one_link(ChannelPlan())
    channel.publish("tx", 0, b"a", 0.0)
    channel.configure(loss=1.0)
    channel.publish("tx", 0, b"b", 0.0)
    channel.configure(loss=0.0, delay_s=2.0, burst=Burst(p_enter=0.1, p_exit=0.5, loss_bad=0.9))
    assert channel.plan.burst == Burst(p_enter=0.1, p_exit=0.5, loss_bad=0.9)
    channel.configure(burst=None, partitions=(("tx",),))
    channel.publish("tx", 0, b"c", 0.0)
    channel.configure(partitions=())
    channel.publish("tx", 0, b"d", 0.0)
    assert channel.fetch("rx", 0.0) == [b"a"]
    assert channel.fetch("rx", 2.0) == [b"d"]
    assert channel.totals()["rx"].deliveries_dropped == 2


@pytest.mark.ray
def test_channel_as_ray_actor(ray_session):
    ray = ray_session
    actor = ray.remote(Channel).remote(ChannelPlan(delay_s=0.2), 0)
    ray.get([actor.subscribe.remote(name, [0]) for name in ("a", "b")])
    ray.get([actor.publish.remote("a", 0, b"hello", 0.0), actor.publish.remote("b", 0, b"world", 0.0)])
    assert ray.get(actor.fetch_all.remote(0.1)) == {"a": [], "b": []}
    assert ray.get(actor.fetch_all.remote(0.2)) == {"a": [b"world"], "b": [b"hello"]}
    counters = ray.get(actor.take_counters.remote())
    assert counters["a"].bytes_delivered == 5
    assert counters["b"].bytes_published == 5


def test_exchange_is_publish_then_fetch_all_then_counters():
    items = [("a", 0, b"1"), ("b", 0, b"22"), ("a", 0, b"333")]
    spec = ChannelPlan(loss=0.3, jitter_s=0.4, duplicate=0.2)
    batched, stepwise = Channel(spec, seed=4), Channel(spec, seed=4)
    for channel in (batched, stepwise):
        for name in ("a", "b", "c"):
            channel.subscribe(name, [0])
    for r in range(20):
        for sender, shard, payload in items:
            stepwise.publish(sender, shard, payload, float(r))
        expected = Exchange(stepwise.fetch_all(float(r)), stepwise.take_counters())
        assert batched.exchange(items, float(r)) == expected
