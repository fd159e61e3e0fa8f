"""A realtime broker's timer: its own phase within the round, jitter that never leaves the round."""

from __future__ import annotations

import numpy as np
import pytest

from actors.drivers.realtime import RealtimeHost
from actors.hosts.broker_host import BrokerState
from experiments.planner import build_plan
from experiments.scenario import parse_scenario
from tests.actors.test_runtime_realtime import realtime_scenario

EPOCH_S = 1_000.0


def started_host(jitter_pct: float, brokers: int) -> RealtimeHost:
    """A host of `brokers` brokers, started at round 0 on a clock that has not started ticking."""
    data = realtime_scenario("local", rounds=40, interval_s=0.5, realtime={"jitter_pct": jitter_pct})
    data["brokers"] = [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 5}]} for i in range(brokers)]
    plan = build_plan(parse_scenario({**data, "brokers_per_actor": brokers}))
    (host_plan,) = plan.host_plans()
    host = RealtimeHost(host_plan)
    host._epoch = EPOCH_S
    for broker in plan.brokers:
        state = BrokerState(incarnation=0, workload=broker.workload, clock_offset_s=0.0)
        host.start(broker.name, state, plan.quota[broker.group_ids], plan.limited[broker.group_ids], 0.0)
    return host


@pytest.mark.parametrize("jitter_pct", [0.0, 5.0, 50.0])
def test_every_tick_falls_within_its_round(jitter_pct):
    host = started_host(jitter_pct, brokers=8)
    interval_s = host.plan.interval_s
    for round_index in range(40):
        for broker in host.brokers:
            host._schedule(broker, round_index)
            offset = (host._next_tick[broker] - EPOCH_S) / interval_s - round_index
            assert 0.0 <= offset <= 1.0, (broker, round_index, offset)
            assert host._tick_round[broker] == round_index


def test_brokers_tick_at_their_own_phases():
    """Without jitter each broker keeps one phase, round after round, and eight brokers do not share one beat."""
    host = started_host(0.0, brokers=8)
    interval_s = host.plan.interval_s
    phases = {}
    for broker in host.brokers:
        offsets = []
        for round_index in range(5):
            host._schedule(broker, round_index)
            offsets.append((host._next_tick[broker] - EPOCH_S) / interval_s - round_index)
        assert np.ptp(offsets) < 1e-9
        phases[broker] = offsets[0]
    assert len({round(phase, 6) for phase in phases.values()}) == 8
    assert max(phases.values()) - min(phases.values()) > 0.5  # spread over the round, not bunched
