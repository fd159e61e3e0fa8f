"""The producer model's invariants: who is paused by whose breach in each mode, the fallback after
`receipt_wait_s`, PIP-385's 80% send-timeout rule, admission never above the buckets, and no message lost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.producers import (
    GROUP,
    MODES,
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
)
def test_admitted_never_above_the_buckets_and_no_message_is_lost(
    mode, limits, rates, connections, groups, topic_rate, receipt_s
):
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
    seen = simulate(mode, producer_set, limits, rates, rounds=rounds)
    admitted = sum(round_.admitted_msgs for round_ in seen)
    per_group = np.bincount(group_row, weights=admitted, minlength=n_groups)
    # a bucket starts full (one second's worth) and refills at the limit
    assert np.all(per_group <= np.array(limits) * (1 + rounds) + 1e-6)
    assert np.all(admitted <= topic_rate * (1 + rounds) + 1e-6)
    failed = sum(r.failed_throttled_msgs + r.failed_timeout_msgs + r.failed_queue_full_msgs for r in seen)
    offered = sum(round_.offered_msgs for round_ in seen)
    np.testing.assert_allclose(offered, admitted + failed + seen[-1].pending_msgs, atol=1e-6)
    assert np.all(seen[-1].pending_msgs <= producer_set.max_pending + 1e-9)


def test_histogram_quantile():
    counts = np.array([[1.0, 0.0, 98.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    values = np.array([0.5, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(histogram_quantile(counts, values, 0.5), [2.5, np.nan])
    np.testing.assert_allclose(histogram_quantile(counts, values, 0.99), [2.5, np.nan])
    np.testing.assert_allclose(histogram_quantile(counts, values, 1.0), [3.5, np.nan])
