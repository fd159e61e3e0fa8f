"""The lockstep driver: every broker advances phase by phase on virtual time, deterministic for a seed.

Round r happens at t = r * interval_s:
  events -> publish phase (all hosts) -> channel -> membership -> allocate phase (all hosts) -> telemetry
The channel is driven in rounds (its delays are whole or fractional rounds), so reports published in round
r with no delay are received in round r.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from actors.backends import Backend
from actors.broker_host import Published, concat_columns
from actors.cluster import Cluster, event_row
from actors.config import Scenario
from actors.telemetry import TelemetryWriter


def run_lockstep(
    scenario: Scenario,
    backend: Backend,
    writer: TelemetryWriter,
    on_round: Callable[[int], None] | None = None,
) -> None:
    """Run every round of `scenario`, writing telemetry as it goes (the caller closes the writer)."""
    cluster = Cluster(scenario, backend, writer.run_id, time_per_round=1.0)
    for round_index in range(scenario.rounds):
        t_s = round_index * scenario.interval_s
        now = float(round_index)  # the channel and the registry count in rounds
        leaving = apply_round_events(cluster, round_index, t_s, writer, now)
        publishing = [backend.call(h, "publish_phase", round_index, t_s) for h in cluster.live_hosts()]
        heartbeats = cluster.send_heartbeats(now)  # the registry runs alongside the publish phase
        published = leaving + [item for batch in backend.gather(publishing) for item in batch]
        items = [(p.broker, shard, payload) for p in published for shard, payload in p.payloads]
        deliveries, counters = backend.gather([backend.call(cluster.channel, "exchange", items, now)])[0]
        dead = cluster.collect_dead(heartbeats)
        results = backend.gather(
            [
                backend.call(slot.handle, "allocate_phase", _inboxes(deliveries, slot.brokers), dead, round_index, t_s)
                for slot in cluster.live_slots()
            ]
        )
        writer.add("rounds", concat_columns([columns for columns, _ in results if columns]))
        rejected = {broker: count for _, per_broker in results for broker, count in per_broker.items()}
        sent = {p.broker: len(p.payloads) for p in published}
        suppressed = {p.broker: p.reports_suppressed for p in published}
        writer.add("messages", message_rows(sent, suppressed, counters, rejected, round_index, t_s))
        writer.end_round(round_index)
        if on_round is not None:
            on_round(round_index)


def apply_round_events(
    cluster: Cluster, round_index: int, t_s: float, writer: TelemetryWriter, now: float
) -> list[Published]:
    """Brokers joining this round, then the scenario's events at this round, logged in `events`.

    Returns the reports that must be published on the brokers' behalf (a clean leave's zeros).
    """
    published: list[Published] = []
    for broker in cluster.brokers_joining(round_index):
        cluster.start(broker, now)
        if round_index > 0:
            writer.add(
                "events", _single({"round": round_index, "t_s": t_s, "kind": "join", "target": broker, "detail": "{}"})
            )
    for event in cluster.events_at(round_index):
        published += cluster.apply(event, now)
        writer.add("events", _single(event_row(event, round_index, t_s)))
    return published


def _inboxes(deliveries: dict[str, list[bytes]], brokers: tuple[str, ...]) -> dict[str, list[bytes]]:
    """Only what the host's own brokers receive travels to it."""
    return {broker: deliveries[broker] for broker in brokers if broker in deliveries}


def _single(row: dict[str, object]) -> dict[str, list]:
    return {key: [value] for key, value in row.items()}


def message_rows(
    sent: dict[str, int],
    suppressed: dict[str, int],
    counters: dict[str, dict[str, int]],
    rejected: dict[str, int],
    round_index: int,
    t_s: float,
) -> dict[str, np.ndarray]:
    """One row per broker that published, received or rejected anything this round."""
    brokers = sorted(set(sent) | set(counters) | set(rejected))

    def column(values: list, dtype: type) -> np.ndarray:
        return np.array(values, dtype=dtype)

    def counter(name: str) -> list[int]:
        return [counters.get(broker, {}).get(name, 0) for broker in brokers]

    return {
        "round": column([round_index] * len(brokers), np.int32),
        "t_s": column([t_s] * len(brokers), np.float64),
        "broker": column(brokers, object),
        "bytes_published": column(counter("bytes_published"), np.int64),
        "bytes_delivered": column(counter("bytes_delivered"), np.int64),
        "reports_sent": column([sent.get(b, 0) for b in brokers], np.int32),
        "reports_suppressed": column([suppressed.get(b, 0) for b in brokers], np.int32),
        "deliveries_dropped": column(counter("deliveries_dropped"), np.int32),
        "reports_rejected": column([rejected.get(b, 0) for b in brokers], np.int32),
    }
