"""The `throttle` and `clients` sections resolved into the plan: one connection per client and broker, rows
into the broker's groups, times in seconds, a client without PIP-385 never acknowledging."""

from __future__ import annotations

import numpy as np
import yaml

from experiments.planner import build_plan
from experiments.scenario import parse_scenario

SCENARIO = """\
name: producers
groups:
  - {name: g, quota: {publish_msgs_per_s: 100}}
  - {name: h, quota: {publish_msgs_per_s: 100}}
brokers:
  - {name: b1, workload: [{group: g, msgs_per_s: 10}]}
  - {name: b2}
throttle: {mode: signal, step_ms: 20, receipt_wait_ms: 50, broker_msgs_per_s: 500}
clients:
  - name: app-1
    receipt_ms: 3
    producers:
      - {topic: t1, broker: b1, group: h, msgs_per_s: 40, send_timeout_ms: 2000, topic_msgs_per_s: 30}
      - {topic: t2, broker: b2, group: g, msgs_per_s: {ramp: {from: 0, to: 10, over_rounds: 5}}}
  - name: app-2
    throttle_signal: false
    producers:
      - {topic: t3, broker: b1, group: g, msgs_per_s: 5, max_pending: 7}
"""


def test_producers_resolve_per_broker():
    plan = build_plan(parse_scenario(yaml.safe_load(SCENARIO)))
    assert plan.throttle.mode == "signal" and plan.throttle.step_s == 0.02
    assert plan.throttle.receipt_wait_s == 0.05 and plan.throttle.broker_msgs_per_s == 500
    b1, b2 = plan.brokers
    assert b1.group_names == ("g", "h")  # its workload's group, then its producers'
    producers = b1.producers.producers
    assert b1.producers.topics == ("t1", "t3") and b1.producers.clients == ("app-1", "app-2")
    np.testing.assert_array_equal(producers.group_row, [1, 0])
    np.testing.assert_array_equal(producers.connection, [0, 1])  # one connection per client
    np.testing.assert_array_equal(producers.receipt_s, [0.003, np.inf])
    np.testing.assert_array_equal(producers.topic_msgs_per_s, [30.0, np.inf])
    np.testing.assert_array_equal(producers.send_timeout_s, [2.0, 30.0])
    np.testing.assert_array_equal(producers.max_pending, [1000, 7])
    np.testing.assert_array_equal(b1.producers.workload.msgs_per_s, [40.0, 5.0])
    assert b2.group_names == ("g",) and set(b2.producers.workload.profiles) == {0}
    assert b2.workload.msgs_per_s.tolist() == [0.0]  # its load comes from its producer


def test_no_clients_no_producer_model():
    text = SCENARIO.split("throttle:")[0]
    plan = build_plan(parse_scenario(yaml.safe_load(text)))
    assert plan.throttle is None and all(broker.producers is None for broker in plan.brokers)
