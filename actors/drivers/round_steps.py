"""What both drivers do at a round's edges: the round's events applied and logged (the restarts of lost brokers
among them), lost hosts logged as crashes, and the `events` and `messages` rows."""

from __future__ import annotations

import json

import numpy as np

from actors.hosts.backends import Placement
from actors.hosts.broker_host import Published
from actors.hosts.cluster import Cluster
from actors.telemetry.writer import TelemetryWriter
from actors.transport.channel import Counters


def apply_round_events(cluster: Cluster, round_index: int, t_s: float, writer: TelemetryWriter) -> list[Published]:
    """Brokers joining this round, then the plan's events at this round, logged in `events`.

    Returns the reports that must be published on the brokers' behalf (a clean leave's zeros).
    """
    published: list[Published] = []
    joining = cluster.brokers_joining(round_index)
    cluster.start(joining, t_s)
    for broker in joining if round_index > 0 else ():
        writer.add("events", event_row(round_index, t_s, "join", broker, "{}"))
    for planned in cluster.events_at(round_index):
        published += cluster.apply(planned, t_s)
        writer.add("events", event_row(round_index, t_s, planned.kind, planned.target, planned.detail))
    for broker in cluster.restart_lost(round_index, t_s):
        detail = {"cause": "its host was lost", **_node_fields(cluster.where(broker))}
        writer.add("events", event_row(round_index, t_s, "restart", broker, json.dumps(detail)))
    return published


def log_lost(cluster: Cluster, writer: TelemetryWriter, round_index: int, t_s: float) -> None:
    """A `crash` event for each broker whose host's process died since the last call: its cause in `detail`, and
    the node its host ran on (`node_id`, `node_address`) when on Ray."""
    for lost in cluster.take_lost(round_index):
        detail = json.dumps({"cause": lost.reason, **_node_fields(lost.node)})
        writer.add("events", event_row(round_index, t_s, "crash", lost.broker, detail))


def _node_fields(node: Placement | None) -> dict[str, str]:
    return {} if node is None else {"node_id": node.node_id, "node_address": node.address}


def event_row(round_index: int, t_s: float, kind: str, target: str, detail: str) -> dict[str, list]:
    return {"round": [round_index], "t_s": [t_s], "kind": [kind], "target": [target], "detail": [detail]}


def message_rows(
    sent: dict[str, int],
    suppressed: dict[str, int],
    counters: dict[str, Counters],
    rejected: dict[str, int],
    round_index: int,
    t_s: float,
) -> dict[str, np.ndarray]:
    """One row per broker that published, received or rejected anything this round."""
    brokers = sorted(set(sent) | set(counters) | set(rejected))
    traffic = [counters.get(broker, Counters()) for broker in brokers]

    def column(values: list, dtype: type) -> np.ndarray:
        return np.array(values, dtype=dtype)

    return {
        "round": column([round_index] * len(brokers), np.int32),
        "t_s": column([t_s] * len(brokers), np.float64),
        "broker": column(brokers, object),
        "bytes_published": column([c.bytes_published for c in traffic], np.int64),
        "bytes_delivered": column([c.bytes_delivered for c in traffic], np.int64),
        "reports_sent": column([sent.get(b, 0) for b in brokers], np.int32),
        "reports_suppressed": column([suppressed.get(b, 0) for b in brokers], np.int32),
        "deliveries_dropped": column([c.deliveries_dropped for c in traffic], np.int32),
        "reports_rejected": column([rejected.get(b, 0) for b in brokers], np.int32),
        "deliveries_lost_transport": column([c.deliveries_lost_transport for c in traffic], np.int32),
    }
