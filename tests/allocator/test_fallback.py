"""The fallbacks when reports stop: pure properties (hypothesis), then a broker node that loses its peer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.fallback import MODES, Fallback, FallbackSettings, fallback_limit
from allocator.node.node_settings import NodeSettings

MSGS = ("publish_msgs_per_s",)
rates = st.floats(0.0, 1e6, allow_nan=False)


@st.composite
def silent_groups(draw):
    n = draw(st.integers(1, 8))
    quota = draw(hnp.arrays(np.float64, (n, 1), elements=rates))
    held = draw(hnp.arrays(np.float64, (n, 1), elements=st.floats(0.0, 2e6, allow_nan=False)))
    brokers = draw(hnp.arrays(np.int64, n, elements=st.integers(1, 50)))
    return quota, held, brokers


@settings(max_examples=200, deadline=None)
@given(silent_groups(), st.sampled_from(MODES[1:]), st.integers(0, 40), st.integers(1, 20))
def test_no_fallback_gives_a_limit_above_the_quota(groups, mode, rounds, decay_rounds):
    quota, held, brokers = groups
    limit = fallback_limit(mode, held, quota, brokers, np.full(len(quota), rounds), decay_rounds, MIN_LIMIT)
    assert (limit <= quota).all()
    assert (limit >= 0).all()


@settings(max_examples=200, deadline=None)
@given(silent_groups(), st.integers(1, 20))
def test_decay_moves_monotonically_from_the_held_limit_to_the_share(groups, decay_rounds):
    quota, held, brokers = groups
    share = quota / brokers[:, None]
    start = np.minimum(held, quota)
    steps = [
        fallback_limit("decay", held, quota, brokers, np.full(len(quota), k), decay_rounds, MIN_LIMIT)
        for k in range(decay_rounds + 3)
    ]
    distances = [np.abs(step - share) for step in steps]
    assert (distances[0] <= np.abs(start - share) + 1e-9).all()
    for before, after in zip(distances, distances[1:], strict=False):
        assert (after <= before + 1e-9).all()  # every step is closer to the share (or there)
    for before, after in zip(steps, steps[1:], strict=False):  # and never crosses it
        assert ((after - before) * (share - before) >= -1e-9).all()
    np.testing.assert_allclose(steps[decay_rounds - 1], share)
    np.testing.assert_allclose(steps[-1], share)


def _step(fallback, heard, limit_before, policy_limit, quota, view=2):
    n = len(quota)
    return fallback.step(np.full(n, heard), np.full(n, view), limit_before, policy_limit, quota, MIN_LIMIT)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(MODES[1:]), st.integers(1, 6), st.integers(0, 10), st.integers(1, 10))
def test_the_fallback_applies_after_after_rounds_and_stops_the_round_reports_return(mode, after, extra, decay):
    fallback = Fallback(FallbackSettings(mode, after_rounds=after, decay_rounds=decay), 1, 1)
    quota = np.array([[1000.0]])
    policy_limit = np.array([[700.0]])  # what the policy computes on its stale view
    assert (_step(fallback, True, policy_limit, policy_limit, quota) == policy_limit).all()
    for silent in range(1, after + extra + 1):
        limit = _step(fallback, False, policy_limit, policy_limit, quota)
        assert bool(fallback.active[0]) == (silent >= after)
        expected = {"hold": 700.0, "open": 1000.0, "closed": MIN_LIMIT, "share": 500.0}.get(mode)
        if silent < after:
            assert limit[0, 0] == 700.0
        elif expected is not None:
            assert limit[0, 0] == expected
        else:  # decay: from 700 toward 500
            assert 500.0 <= limit[0, 0] < 700.0
    assert _step(fallback, True, policy_limit, policy_limit, quota)[0, 0] == 700.0  # recovered at once
    assert not fallback.active.any()


def test_a_broker_that_was_alone_never_falls_back():
    fallback = Fallback(FallbackSettings("closed", after_rounds=1), 1, 1)
    quota = np.array([[100.0]])
    for _ in range(5):
        assert _step(fallback, False, quota, quota, quota, view=1)[0, 0] == 100.0


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="fallback mode"):
        FallbackSettings("panic")


# -- in a broker node ----------------------------------------------------------------------------

T0 = 1000.0
DEMAND = {"a": 80.0, "b": 30.0}  # the policy's split is not an equal share


def _pair(mode: str, after: int = 3) -> dict[str, BrokerNode]:
    settings_ = NodeSettings(
        dimensions=MSGS,
        policy=policies.bind("pip82-steal"),
        threshold_pct=0.0,
        force_every=1,  # every round a report: silence is the channel's, not suppression
        fallback=FallbackSettings(mode, after_rounds=after, decay_rounds=4),
    )
    return {name: BrokerNode(name, np.array([1]), np.array([[100.0]]), settings_) for name in ("a", "b")}


def _round(brokers, now_s, deliver=True):
    out = {}
    for name, broker in brokers.items():
        traffic = broker.admit(np.array([DEMAND[name]]), np.array([100.0]), now_s)
        out[name] = [payload for _, payload in broker.build_reports(traffic, now_s).payloads]
    for name, broker in brokers.items():
        broker.receive([p for other, ps in out.items() if other != name for p in ps] if deliver else [], now_s)
        broker.cleanup(now_s)
        broker.allocate()
    return {name: float(broker.limit[0, 0]) for name, broker in brokers.items()}


@pytest.mark.parametrize(("mode", "expected"), [("open", 100.0), ("closed", MIN_LIMIT), ("share", 50.0)])
def test_a_partitioned_broker_applies_its_fallback_after_after_rounds_and_recovers(mode, expected):
    brokers = _pair(mode, after=3)
    for k in range(5):
        _round(brokers, T0 + k)
    for silent in range(1, 8):
        limits = _round(brokers, T0 + 4 + silent, deliver=False)
        assert bool(brokers["a"].fallback.active[0]) == (silent >= 3)
        if silent >= 3:
            assert limits == {"a": expected, "b": expected}
    for k in range(12, 16):
        limits = _round(brokers, T0 + k)
        assert not brokers["a"].fallback.active.any()
    assert limits["a"] > limits["b"] > MIN_LIMIT  # the policy's split again, not a fallback's


def test_an_unreachable_registry_counts_as_hearing_no_reports():
    brokers = _pair("closed", after=2)
    for k in range(4):
        _round(brokers, T0 + k)
    brokers["a"].set_registry_reachable(False)
    limits = [_round(brokers, T0 + k)["a"] for k in range(4, 7)]
    assert limits[0] > MIN_LIMIT and limits[1:] == [MIN_LIMIT, MIN_LIMIT]
    assert _round(brokers, T0 + 7)["b"] > MIN_LIMIT  # b's registry answers: b never fell back
    brokers["a"].set_registry_reachable(True)
    assert _round(brokers, T0 + 8)["a"] > MIN_LIMIT
