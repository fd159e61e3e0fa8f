"""The producer model's invariants: who is paused by whose breach in each mode, the fallback after
`receipt_wait_s`, PIP-385's 80% send-timeout rule, admission never above the buckets, and no message lost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.producers.simulator import (
    BUFFER,
    GROUP,
    MIB,
    MODES,
    PENDING,
    REASONS,
    TOPIC,
    ProducerRound,
    ProducerSet,
    ProducerSimulator,
    ThrottleSettings,
    fails_as_throttled,
    histogram_quantile,
)

NOISY, NEIGHBOUR = 0, 1
STEP_S = 0.01


def producers(n: int = 2, **overrides: np.ndarray) -> ProducerSet:
    """`n` producers, each of its own group, all on connection 0, acknowledging signals in 1 ms."""
    fields = {
        "group_row": np.arange(n),
        "connection": np.zeros(n, dtype=np.int64),
        "send_timeout_s": np.full(n, 3.0),
        "max_pending": np.full(n, 1000.0),
        "msg_bytes": np.full(n, 1000.0),
        "topic_msgs_per_s": np.full(n, np.inf),
        "receipt_s": np.full(n, 0.001),
    }
    return ProducerSet(**{**fields, **overrides})


def simulate(
    mode: str, producer_set: ProducerSet, limits: list[float], rates: list[float], rounds: int = 3, **throttle: float
) -> list[ProducerRound]:
    """`rounds` one-second rounds at constant group limits (msgs/s) and producer rates."""
    sim = ProducerSimulator(producer_set, len(limits), np.array([False]), ThrottleSettings(mode, STEP_S, **throttle))
    seen = []
    for round_index in range(rounds):
        sim.set_group_limits(np.array(limits, dtype=np.float64)[:, None], float(round_index))
        seen.append(sim.run(np.array(rates, dtype=np.float64), float(round_index), 1.0))
    return seen


NOISY_OVER_QUOTA = {"limits": [100.0, 1000.0], "rates": [2000.0, 300.0]}  # the neighbour's group has room


def test_under_signal_a_neighbour_is_never_held_by_another_groups_breach():
    for seen in simulate("signal", producers(), **NOISY_OVER_QUOTA):
        assert seen.signals[NOISY] > 0 and seen.signals[NEIGHBOUR] == 0
        assert seen.throttled_s[NOISY, GROUP] > 0.9
        assert seen.connection_blocked_s[NEIGHBOUR] == 0.0
        assert seen.throttled_s[NEIGHBOUR].sum() == 0.0
        assert seen.admitted_msgs[NEIGHBOUR] == pytest.approx(300.0)
        assert seen.latency_p99_s[NEIGHBOUR] <= STEP_S
        assert seen.failed_timeout_msgs[NEIGHBOUR] == seen.failed_queue_full_msgs[NEIGHBOUR] == 0.0


def test_under_pause_connection_the_neighbour_waits_behind_the_breach():
    last = simulate("pause-connection", producers(), **NOISY_OVER_QUOTA, rounds=5)[-1]
    assert last.signals.sum() == 0  # nobody is told
    assert last.connection_blocked_s[NEIGHBOUR] > 0.5
    assert last.admitted_msgs[NEIGHBOUR] < 0.5 * 300.0
    assert last.latency_p50_s[NEIGHBOUR] > 1.0
    assert last.failed_timeout_msgs[NEIGHBOUR] > 0


def test_a_producer_on_another_connection_is_not_held_under_pause_connection():
    apart = producers(connection=np.array([0, 1]))
    last = simulate("pause-connection", apart, **NOISY_OVER_QUOTA, rounds=5)[-1]
    assert last.connection_blocked_s[NEIGHBOUR] == 0.0
    assert last.admitted_msgs[NEIGHBOUR] == pytest.approx(300.0)


def test_the_whole_group_is_held_when_its_quota_runs_out():
    """A breach holds every producer of the group, on any connection, in both modes."""
    same_group = producers(group_row=np.array([0, 0]), connection=np.array([0, 1]))
    for mode in MODES:
        last = simulate(mode, same_group, limits=[100.0], rates=[2000.0, 300.0])[-1]
        assert last.throttled_s[NEIGHBOUR, GROUP] > 0.5, mode
        assert last.admitted_msgs.sum() <= 100.0 + 1e-6, mode


def test_a_client_that_does_not_acknowledge_in_time_falls_back_to_a_paused_connection():
    slow = producers(receipt_s=np.array([0.25, 0.25]))
    sim = ProducerSimulator(slow, 2, np.array([False]), ThrottleSettings("signal", STEP_S, receipt_wait_s=0.1))
    sim.set_group_limits(np.array([[100.0], [1000.0]]), 0.0)
    rates = np.array([2000.0, 300.0])
    before_wait = sim.run(rates, 0.0, 0.08)  # the noisy producer breaches in its first step
    assert before_wait.signals[NOISY] == 1 and before_wait.fallbacks[NOISY] == 1
    assert before_wait.connection_blocked_s[NEIGHBOUR] == 0.0  # the broker still waits for the receipt
    after_wait = sim.run(rates, 0.08, 0.92)
    assert after_wait.connection_blocked_s[NEIGHBOUR] > 0.3
    assert after_wait.admitted_msgs[NEIGHBOUR] < 0.8 * 300.0 * 0.92


def test_a_client_acknowledging_within_the_wait_never_falls_back():
    in_time = producers(receipt_s=np.array([0.09, 0.09]))
    for seen in simulate("signal", in_time, **NOISY_OVER_QUOTA, receipt_wait_s=0.1):
        assert seen.fallbacks.sum() == 0
        assert seen.connection_blocked_s[NEIGHBOUR] == 0.0


def test_a_client_without_pip385_is_treated_as_under_pause_connection():
    old = producers(receipt_s=np.full(2, np.inf))
    signal = simulate("signal", old, **NOISY_OVER_QUOTA, rounds=5)[-1]
    paused = simulate("pause-connection", old, **NOISY_OVER_QUOTA, rounds=5)[-1]
    assert signal.signals.sum() == 0  # never sent the command
    np.testing.assert_allclose(signal.admitted_msgs, paused.admitted_msgs)
    np.testing.assert_allclose(signal.connection_blocked_s, paused.connection_blocked_s)


def test_a_timeout_after_being_told_of_throttling_for_over_80_percent_of_it_fails_as_throttled():
    """The noisy producer is throttled all the time: told (signal) its timeouts are throttled failures; not told
    (pause-connection, or a client without PIP-385) they are plain timeouts."""
    told = _failures(simulate("signal", producers(), **NOISY_OVER_QUOTA, rounds=6))
    assert told["throttled"] > 0 and told["timeout"] == 0
    for mode, receipt_s in (("pause-connection", 0.001), ("signal", np.inf)):
        seen = _failures(simulate(mode, producers(receipt_s=np.full(2, receipt_s)), **NOISY_OVER_QUOTA, rounds=6))
        assert seen["throttled"] == 0 and seen["timeout"] > 0, mode


def _failures(seen: list[ProducerRound]) -> dict[str, float]:
    """The noisy producer's send timeouts over the rounds, by kind."""
    return {
        "throttled": sum(r.failed_throttled_msgs[NOISY] for r in seen),
        "timeout": sum(r.failed_timeout_msgs[NOISY] for r in seen),
    }


def test_the_80_percent_rule_at_its_boundary():
    timeout_s = np.array([1.0, 1.0, 1.0, 30.0])
    throttled_s = np.array([0.79, 0.8, 0.81, 23.9])
    np.testing.assert_array_equal(fails_as_throttled(throttled_s, timeout_s), [False, False, True, False])


@settings(max_examples=25, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    limits=st.lists(st.floats(1.0, 500.0), min_size=1, max_size=3),
    rates=st.lists(st.floats(0.0, 2000.0), min_size=4, max_size=4),
    connections=st.lists(st.integers(0, 1), min_size=4, max_size=4),
    groups=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    topic_rate=st.sampled_from([np.inf, 50.0]),
    receipt_s=st.sampled_from([0.001, 0.5, np.inf]),
    persist_bytes_per_s=st.sampled_from([np.inf, 300_000.0]),
    max_pending_per_connection=st.sampled_from([1000.0, 40.0]),
    publish_buffer_bytes=st.sampled_from([2048.0 * MIB, 60_000.0]),
)
def test_admitted_never_above_the_buckets_and_no_message_is_lost(
    mode, limits, rates, connections, groups, topic_rate, receipt_s, **pending_limits
):
    """... and what is pending on the broker never above its limits."""
    n_groups = len(limits)
    group_row = np.array(groups) % n_groups
    connection = np.array(connections)
    connection = np.unique(connection, return_inverse=True)[1]  # numbered 0..C-1
    producer_set = producers(
        4,
        group_row=group_row,
        connection=connection,
        topic_msgs_per_s=np.full(4, topic_rate),
        receipt_s=np.full(4, receipt_s),
        send_timeout_s=np.array([0.5, 1.0, 2.0, 3.0]),
        max_pending=np.array([10.0, 100.0, 1000.0, 1000.0]),
    )
    rounds = 3
    seen = simulate(mode, producer_set, limits, rates, rounds=rounds, **pending_limits)
    for round_ in seen:
        assert np.all(round_.connection_pending_max_msgs <= pending_limits["max_pending_per_connection"] + 1e-6)
        assert round_.buffer_max_bytes <= pending_limits["publish_buffer_bytes"] + 1e-6
    admitted = sum(round_.admitted_msgs for round_ in seen)
    per_group = np.bincount(group_row, weights=admitted, minlength=n_groups)
    # a bucket starts full (one second's worth) and refills at the limit
    assert np.all(per_group <= np.array(limits) * (1 + rounds) + 1e-6)
    assert np.all(admitted <= topic_rate * (1 + rounds) + 1e-6)
    failed = sum(r.failed_throttled_msgs + r.failed_timeout_msgs + r.failed_queue_full_msgs for r in seen)
    offered = sum(round_.offered_msgs for round_ in seen)
    np.testing.assert_allclose(offered, admitted + failed + seen[-1].pending_msgs, atol=1e-6)
    assert np.all(seen[-1].pending_msgs <= producer_set.max_pending + 1e-9)


# Slow persistence: the broker persists 2000 msgs/s of 1000 bytes; one connection offers 3000 msgs/s
SLOW = {"persist_bytes_per_s": 2000 * 1000.0}
FLOOD, MODEST = 0, 1


def test_a_connection_offering_more_than_the_broker_persists_is_held_at_its_pending_limit():
    """Pending on the broker stays under maxPendingPublishRequestsPerConnection, reaches it, and the reason is
    `connection_pending_messages`, for that connection only: the other one (100 msgs/s) keeps flowing."""
    two = producers(group_row=np.array([0, 1]), connection=np.array([0, 1]), send_timeout_s=np.full(2, 30.0))
    for mode in MODES:
        seen = simulate(mode, two, limits=[1e6, 1e6], rates=[3000.0, 100.0], rounds=4, **SLOW)
        for round_ in seen[1:]:
            assert round_.connection_pending_max_msgs[FLOOD] <= 1000.0 + 1e-6, mode
            assert round_.connection_pending_max_msgs[FLOOD] >= 999.0, mode
            assert round_.throttled_s[FLOOD, PENDING] > 0.2, mode
            others = [index for index in range(len(REASONS)) if index != PENDING]
            assert round_.throttled_s[FLOOD, others].sum() == 0.0, mode
            assert round_.throttled_s[MODEST].sum() == 0.0 and round_.connection_blocked_s[MODEST] == 0.0, mode
            assert round_.admitted_msgs[MODEST] == pytest.approx(100.0, abs=5.0), mode  # its share of persistence
            assert round_.connection_pending_max_msgs[MODEST] < 200.0, mode
            # the broker persists at capacity: the flood gets what the modest producer leaves
            assert round_.admitted_msgs.sum() == pytest.approx(2000.0, rel=0.02), mode
        told = sum(round_.signals[FLOOD] for round_ in seen)
        assert (told > 0) == (mode == "signal") and sum(r.fallbacks.sum() for r in seen) == 0, mode


def test_a_held_connection_is_read_again_only_once_its_pending_messages_are_down_to_half():
    sim = ProducerSimulator(producers(1), 1, np.array([False]), ThrottleSettings("signal", STEP_S, **SLOW))
    sim.set_group_limits(np.array([[1e6]]), 0.0)
    pending = []
    for index in range(300):
        sim.run(np.array([3000.0]), index * STEP_S, STEP_S)
        pending.append(sim.connection_pending_msgs()[0])
    first_full = next(index for index, value in enumerate(pending) if value >= 1000.0 - 20.0 - 1e-6)  # 1 step served
    after = np.array(pending[first_full:])
    assert after.max() <= 1000.0 + 1e-6
    assert after.min() <= 500.0 + 1e-6  # drained to half before reading resumed (no reading at the limit)
    assert after.min() >= 500.0 - 20.0 - 1e-6  # and no lower than a step's persistence below it


def test_the_publish_buffer_holds_every_connection_until_it_is_half_empty():
    """Two connections of 10 KB messages, 100 msgs/s each, a broker persisting 1 MB/s and a 1 MiB buffer: the
    buffer (105 messages) binds before any connection's 1000 pending messages; both are held, `buffer_size`."""
    big = producers(group_row=np.array([0, 1]), connection=np.array([0, 1]), msg_bytes=np.full(2, 10_000.0))
    settings = {"persist_bytes_per_s": 1e6, "publish_buffer_bytes": 1.0 * MIB}
    sim = ProducerSimulator(big, 2, np.array([False]), ThrottleSettings("signal", STEP_S, **settings))
    sim.set_group_limits(np.array([[1e6], [1e6]]), 0.0)
    buffer, seen = [], []
    for index in range(300):
        seen.append(sim.run(np.array([100.0, 100.0]), index * STEP_S, STEP_S))
        buffer.append(sim.buffer_bytes())
    assert max(r.buffer_max_bytes for r in seen) <= MIB + 1e-3
    assert max(r.buffer_max_bytes for r in seen) >= MIB - 10_000.0
    throttled = sum(r.throttled_s for r in seen)
    assert np.all(throttled[:, BUFFER] > 0.3) and np.all(throttled[:, PENDING] == 0.0)
    assert sum(r.signals for r in seen).min() > 0  # both clients were told why
    first_full = next(i for i, r in enumerate(seen) if r.buffer_max_bytes >= MIB - 10_000.0)
    assert min(buffer[first_full:]) <= MIB / 2 + 1e-3  # read again only under half of the buffer
    admitted = sum(r.admitted_msgs for r in seen[100:])  # over the last 2 s
    assert admitted.sum() == pytest.approx(2.0 * 100.0, rel=0.05)  # persisted at capacity: 1 MB/s, 100 msgs/s


def test_under_signal_a_topic_quota_breach_spares_the_connection_a_pending_limit_does_not():
    """Same connection, noisy and neighbour. Over its topic quota the noisy producer alone is paused (signal);
    when the connection's pending messages reach the limit (slow persistence), the whole connection is paused,
    neighbour included, in both modes; a producer on another connection keeps flowing."""
    three = producers(3, group_row=np.array([0, 1, 2]), connection=np.array([0, 0, 1]))
    topic_quota = producers(3, group_row=np.array([0, 1, 2]), connection=np.array([0, 0, 1]),
                            topic_msgs_per_s=np.array([100.0, np.inf, np.inf]))  # fmt: skip
    limits, other = [1e6, 1e6, 1e6], 2
    breach = simulate("signal", topic_quota, limits, rates=[2000.0, 300.0, 100.0])[-1]
    assert breach.throttled_s[NOISY, TOPIC] > 0.9 and breach.signals[NOISY] > 0
    assert breach.admitted_msgs[NEIGHBOUR] == pytest.approx(300.0) and breach.throttled_s[NEIGHBOUR].sum() == 0.0
    assert breach.connection_blocked_s[NEIGHBOUR] == 0.0
    full = simulate("signal", three, limits, rates=[2500.0, 300.0, 100.0], **SLOW)[-1]
    assert full.throttled_s[NOISY, PENDING] > 0.2 and full.throttled_s[NEIGHBOUR, PENDING] > 0.2
    assert full.admitted_msgs[NEIGHBOUR] < 300.0  # it waits while its connection is held
    assert full.throttled_s[other].sum() == 0.0 and full.admitted_msgs[other] == pytest.approx(100.0, abs=5.0)


def test_histogram_quantile():
    counts = np.array([[1.0, 0.0, 98.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    values = np.array([0.5, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(histogram_quantile(counts, values, 0.5), [2.5, np.nan])
    np.testing.assert_allclose(histogram_quantile(counts, values, 0.99), [2.5, np.nan])
    np.testing.assert_allclose(histogram_quantile(counts, values, 1.0), [3.5, np.nan])
