"""Adversaries of a scenario: an insider that inflates its own reports, and forged reports in another's name.

A liar (`BrokerPlan.usage_factor`) admits its traffic honestly but claims and reports `usage_factor` times
its usage and demand, signed with its own key: what an insider can do. A forgery (`ForgeEvent`) is a report
in a victim's name with the most damaging header there is (an incarnation and a sequence number near the top
of the range, a time years ahead), for every group the victim serves: zeros (remove the victim from every
view) or rates far above any quota (crowd the others out); signed with a stolen key, or not at all.
"""

from __future__ import annotations

import numpy as np

from actors.plan import BrokerPlan, ForgeEvent
from allocator.node.broker_node import Traffic
from allocator.node.node_settings import NodeSettings
from allocator.wire.codec import encode_split
from allocator.wire.usage_report import UsageReport

FORGED_INCARNATION = 2**62
FORGED_SEQ = 2**63 - 1
FORGED_AHEAD_MS = 10 * 365 * 86_400 * 1000  # ten years after the forger's clock
INFLATED_RATE = 1e9  # per second and dimension: above any quota a scenario is likely to set


def lie(traffic: Traffic, usage_factor: float) -> Traffic:
    """What a liar claims: its usage and demand times `usage_factor` (the time it spent throttled is kept)."""
    return Traffic(traffic.demand * usage_factor, traffic.usage * usage_factor, traffic.throttled_s)


def forged_payloads(event: ForgeEvent, victim: BrokerPlan, node: NodeSettings, now_s: float) -> list[tuple[int, bytes]]:
    """(topic, payload) pairs of the forgery: one report per topic the victim publishes its groups on."""
    n_groups, n_dims = len(victim.group_ids), len(node.dimensions)
    rate = 0.0 if event.report == "zero" else INFLATED_RATE
    usage = np.full((n_groups, n_dims), rate)
    report = UsageReport(
        broker=victim.name,
        incarnation=FORGED_INCARNATION,
        seq=FORGED_SEQ,
        sent_at_ms=int(round(now_s * 1000)) + FORGED_AHEAD_MS,
        interval_ms=int(round(node.interval_s * 1000)),
        dimensions=node.dimensions,
        group_ids=victim.group_ids,
        usage=usage,
        demand=usage,
    )
    rows, topics, bounds = victim.routes.by_topic(np.arange(n_groups))
    payloads = encode_split(report, rows, bounds, key=event.hmac_key, signer=event.signer, float32=node.float32_rates)
    return list(zip(topics.tolist(), payloads, strict=True))
