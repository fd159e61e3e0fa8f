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
    events_by_round: dict[int, list] = {}
    for event in scenario.events:
        events_by_round.setdefault(event.at, []).append(event)
    for round_index in range(scenario.rounds):
        t_s = round_index * scenario.interval_s
        leaving = _apply_events(cluster, events_by_round.get(round_index, ()), round_index, t_s, writer)
        published = leaving + _gather_flat(
            backend, [backend.call(h, "publish_phase", round_index, t_s) for h in cluster.live_hosts()]
        )
        items = [(p.broker, shard, payload) for p in published for shard, payload in p.payloads]
        deliveries, counters = backend.gather([backend.call(cluster.channel, "exchange", items, float(round_index))])[0]
        dead = cluster.heartbeat_and_expire(float(round_index))
        results = backend.gather(
            [
                backend.call(slot.handle, "allocate_phase", _inboxes(deliveries, slot.brokers), dead, round_index, t_s)
                for slot in cluster.live_slots()
            ]
        )
        rows = concat_columns([columns for columns, _ in results if columns])
        writer.add("rounds", rows)
        rejected = {broker: count for _, per_broker in results for broker, count in per_broker.items()}
        writer.add("messages", _message_rows(published, counters, rejected, round_index, t_s))
        writer.end_round(round_index)
        if on_round is not None:
            on_round(round_index)


def _apply_events(cluster: Cluster, events, round_index: int, t_s: float, writer: TelemetryWriter) -> list[Published]:
    published: list[Published] = []
    for broker in cluster.brokers_joining(round_index):
        cluster.start(broker, float(round_index))
        if round_index > 0:
            writer.add("events", _single(event_row_join(broker, round_index, t_s)))
    for event in events:
        published += cluster.apply(event, float(round_index))
        writer.add("events", _single(event_row(event, round_index, t_s)))
    return published


def event_row_join(broker: str, round_index: int, t_s: float) -> dict[str, object]:
    return {"round": round_index, "t_s": t_s, "kind": "join", "target": broker, "detail": "{}"}


def _inboxes(deliveries: dict[str, list[bytes]], brokers: tuple[str, ...]) -> dict[str, list[bytes]]:
    """Only what the host's own brokers receive travels to it."""
    return {broker: deliveries[broker] for broker in brokers if broker in deliveries}


def _single(row: dict[str, object]) -> dict[str, list]:
    return {key: [value] for key, value in row.items()}


def _gather_flat(backend: Backend, futures: list) -> list[Published]:
    return [item for batch in backend.gather(futures) for item in batch]


def _message_rows(
    published: list[Published],
    counters: dict[str, dict[str, int]],
    rejected: dict[str, int],
    round_index: int,
    t_s: float,
) -> dict[str, np.ndarray]:
    """One row per broker that published, received or rejected anything this round."""
    sent = {p.broker: p for p in published}
    brokers = sorted(set(sent) | set(counters) | set(rejected))

    def column(values: list, dtype) -> np.ndarray:
        return np.array(values, dtype=dtype)

    return {
        "round": column([round_index] * len(brokers), np.int32),
        "t_s": column([t_s] * len(brokers), np.float64),
        "broker": column(brokers, object),
        "bytes_published": column([counters.get(b, {}).get("bytes_published", 0) for b in brokers], np.int64),
        "bytes_delivered": column([counters.get(b, {}).get("bytes_delivered", 0) for b in brokers], np.int64),
        "reports_sent": column([len(sent[b].payloads) if b in sent else 0 for b in brokers], np.int32),
        "reports_suppressed": column([sent[b].reports_suppressed if b in sent else 0 for b in brokers], np.int32),
        "deliveries_dropped": column([counters.get(b, {}).get("deliveries_dropped", 0) for b in brokers], np.int32),
        "reports_rejected": column([rejected.get(b, 0) for b in brokers], np.int32),
    }
