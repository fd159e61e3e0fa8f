"""One lockstep round of one group over in-process `BrokerNode`s with a membership registry, each report between
two brokers delivered or lost as the caller says: what the property tests and `evaluations/random_trials.py` drive
(the runtime's drivers, with a channel and real timers, are in `actors/`)."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from allocator.node.broker_node import BrokerNode, RosterUpdate

MSG_BYTES = 100.0


def registry_round(
    brokers: dict[str, BrokerNode],
    demand: dict[str, float],
    now_s: float,
    lost: Collection[tuple[str, str]] = frozenset(),
    gone: tuple[str, ...] = (),
) -> dict[str, float]:
    """One round of group 0: every broker admits its `demand` (msgs/s) and reports, tells the registry what it
    serves, then finishes its round as the runtime does (`BrokerNode.finish_round`: the reports, the brokers
    declared dead (`gone`: their sessions ended this round), the roster, then its allocation); the report of
    `sender` to `receiver` is lost for each pair in `lost`. The usage of each broker."""
    names = list(brokers)
    published, usage = {}, {}
    for name, broker in brokers.items():
        traffic = broker.admit(np.array([demand[name]]), np.array([MSG_BYTES]), now_s)
        usage[name] = float(traffic.usage[0, 0])
        published[name] = [payload for _, payload in broker.build_reports(traffic, now_s).payloads]
    serving = np.array([brokers[name].serving[0] for name in names])
    for name, broker in brokers.items():
        received = [p for other in names if other != name and (other, name) not in lost for p in published[other]]
        roster = RosterUpdate(np.ones(len(names), np.int64), np.arange(len(names)), serving, names)
        broker.finish_round(received, now_s, dead=[(dead, 0) for dead in gone], roster=roster)
    return usage
