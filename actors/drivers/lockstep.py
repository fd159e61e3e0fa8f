"""The lockstep driver: every broker advances phase by phase on virtual time, deterministic for a seed.

Round r happens at t_s = r * interval_s:
  events -> publish phase (all hosts) -> channel -> membership (heartbeats, roster) -> allocate phase (all hosts)
  -> telemetry
The channel's delays are seconds, so reports published in round r with no delay are received in round r.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.drivers.round_steps import apply_round_events, log_lost, message_rows
from actors.hosts.backends import Backend
from actors.hosts.cluster import Cluster
from actors.plan import Plan
from actors.telemetry.writer import TelemetryWriter


def run_lockstep(
    plan: Plan,
    backend: Backend,
    writer: TelemetryWriter,
    on_round: Callable[[int], None] | None = None,
    on_publish: Callable[[float, list[tuple[str, int, bytes]]], None] | None = None,
) -> None:
    """Run every round of `plan`, writing telemetry as it goes (the caller closes the writer). `on_publish` sees
    each round's published (broker, topic, payload) items with the round's time (`quotalab run --capture`)."""
    cluster = Cluster(plan, backend)
    for round_index in range(plan.rounds):
        t_s = round_index * plan.interval_s
        leaving = apply_round_events(cluster, round_index, t_s, writer)
        publishing = [(s, backend.call(s.handle, "publish_phase", round_index, t_s)) for s in cluster.live_slots()]
        heartbeats = cluster.send_heartbeats(t_s)  # the registry runs alongside the publish phase
        syncs = cluster.sync_pool_sizes(t_s)
        published = leaving + [item for batch in cluster.gather_hosts(publishing) for item in batch]
        items = [(p.broker, topic, payload) for p in published for topic, payload in p.payloads]
        if on_publish is not None:
            on_publish(t_s, items)
        (exchange,) = backend.gather([backend.call(cluster.channel, "exchange", items, t_s)])
        dead = cluster.collect_dead(heartbeats)
        roster = cluster.serve(published)
        pool_sizes = cluster.collect_pool_sizes(syncs)
        issued = cluster.issued()
        allocating = []
        for slot in cluster.live_slots():
            inboxes = _inboxes(exchange.deliveries, slot.brokers)
            own_pool_sizes = _own(pool_sizes, slot.brokers)
            args = (inboxes, dead, round_index, t_s, own_pool_sizes, issued, roster)
            call = backend.call(slot.handle, "allocate_phase", *args)
            allocating.append((slot, call))
        results = cluster.gather_hosts(allocating)
        log_lost(cluster, writer, round_index, t_s)
        for result in results:
            for rows in result.rows:
                writer.add("rounds", rows)
            for table, columns in result.tables:
                writer.add(table, columns)
        rejected = {broker: count for result in results for broker, count in result.rejected.items()}
        sent = {p.broker: len(p.payloads) for p in published}
        suppressed = {p.broker: p.reports_suppressed for p in published}
        writer.add("messages", message_rows(sent, suppressed, exchange.counters, rejected, round_index, t_s))
        writer.end_round(round_index)
        if on_round is not None:
            on_round(round_index)


def _inboxes(deliveries: dict[str, list[bytes]], brokers: tuple[str, ...]) -> dict[str, list[bytes]]:
    """Only what the host's own brokers receive travels to it."""
    return {broker: deliveries[broker] for broker in brokers if broker in deliveries}


def _own(pool_sizes: dict | None, brokers: tuple[str, ...]) -> dict | None:
    """Only the host's own brokers' answers of the pool-size consensus travel to it."""
    return None if pool_sizes is None else {broker: pool_sizes[broker] for broker in brokers if broker in pool_sizes}
