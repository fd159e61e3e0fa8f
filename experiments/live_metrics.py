"""Prometheus metrics of a live run (`quotalab run --metrics-port PORT`), served by the driver.

`LiveMetrics` watches the telemetry the driver writes (it is one of the `TelemetryWriter`'s observers): the
rows the hosts hand over every round, on the local backend as on Ray. So the endpoint serves exactly what
the run's Parquet tables hold, from one process, whatever the number of nodes. A round's rows are applied
together when the driver ends the round, under a lock, so a scrape never sees half a round.

Names follow Pulsar's resource-group metrics where one exists, as gauges of the current value (Pulsar's
calculated quota is a counter incremented by the quota every round: unreadable without `rate()`); the
quota telemetry (docs/telemetry.md) is `quotalab_*`. Pulsar labels its metrics `ResourceGroup` and
`MonitoringClass`; here they are `group`, `broker` and `monitoring_class` (publish or dispatch).
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

PULSAR = "pulsar_resource_group_"
# Pulsar's per-dimension gauges: (name, column of `rounds`, kind of dimension it covers)
PULSAR_DIMENSION_GAUGES = (
    ("calculated_messages_quota", "limit", "msgs"),
    ("calculated_bytes_quota", "limit", "bytes"),
    ("messages_used", "usage", "msgs"),
    ("bytes_used", "usage", "bytes"),
    ("remote_usage_messages_used", "remote_usage", "msgs"),
    ("remote_usage_bytes_used", "remote_usage", "bytes"),
)
# quotalab's per-dimension gauges: metric name -> column of `rounds`
DIMENSION_GAUGES = {
    "quotalab_quota": "quota",
    "quotalab_usage_of_limit_ratio": "usage_fraction_of_limit",
    "quotalab_usage_of_quota_ratio": "usage_fraction_of_quota",
    "quotalab_group_usage_of_quota_ratio": "group_usage_fraction_of_quota",
    "quotalab_over_quota": "over_quota",
    "quotalab_breach_age_seconds": "breach_age_s",
}
# per-group gauges (NaN, no peer in view, is left out)
GROUP_GAUGES = {
    "quotalab_view_brokers": "view_brokers",
    "quotalab_report_age_max_seconds": "report_age_max_s",
    "quotalab_report_age_mean_seconds": "report_age_mean_s",
}
DURATION_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
GONE = frozenset({"crash", "leave"})  # events after which a broker's series are dropped until it is back

HELP = {
    f"{PULSAR}calculated_messages_quota": "Local limit of the group on the broker, messages per second",
    f"{PULSAR}calculated_bytes_quota": "Local limit of the group on the broker, bytes per second",
    f"{PULSAR}messages_used": "The broker's usage of the group over its last round, messages per second",
    f"{PULSAR}bytes_used": "The broker's usage of the group over its last round, bytes per second",
    f"{PULSAR}remote_usage_messages_used": "Usage the other brokers reported for the group, messages per second",
    f"{PULSAR}remote_usage_bytes_used": "Usage the other brokers reported for the group, bytes per second",
    f"{PULSAR}local_usage_reported": "Rounds in which the broker reported its usage of the group (cumulative)",
    f"{PULSAR}updates": "Allocations of the group's local limit by the broker (cumulative)",
    "quotalab_quota": "The group's quota (the dimension's unit per second)",
    "quotalab_usage_of_limit_ratio": "The broker's usage / the local limit it was admitted under",
    "quotalab_usage_of_quota_ratio": "The broker's usage / the group's quota",
    "quotalab_group_usage_of_quota_ratio": "Usage of every broker in the broker's view / the group's quota",
    "quotalab_over_quota": "1 while the usage in the broker's view is over the group's quota",
    "quotalab_breach_age_seconds": "Seconds the group has been over quota (0 when it is not)",
    "quotalab_view_brokers": "Brokers in the broker's view of the group",
    "quotalab_report_age_max_seconds": "Age of the oldest of the peers' freshest entries",
    "quotalab_report_age_mean_seconds": "Mean age of the peers' freshest entries",
    "quotalab_throttle_events": "Throttling episodes that began, by reason",
    "quotalab_throttled_seconds": "Seconds the group's producers were throttled, by reason",
    "quotalab_allocate_phase_seconds": "Wall-clock duration of a broker's allocate phase (receive, clean up, allocate)",
    "quotalab_broker_round": "Round of the broker's latest values",
    "quotalab_run_round": "Last round the driver completed",
}


def metric_names() -> set[str]:
    """Every metric name the endpoint serves (as a scrape's parser names the families)."""
    return set(HELP)


@dataclass
class _Broker:
    """One broker's latest values: `rounds` columns of its latest round, names decoded."""

    round_index: int
    rows: dict[str, list[Any]]


class _Histogram:
    """Counts of durations per bucket of DURATION_BUCKETS_S (the last one: above them all), and their sum."""

    def __init__(self) -> None:
        self.counts = np.zeros(len(DURATION_BUCKETS_S) + 1, dtype=np.int64)
        self.sum_s = 0.0

    def add(self, seconds: float) -> None:
        self.counts[np.searchsorted(DURATION_BUCKETS_S, seconds, side="left")] += 1
        self.sum_s += seconds


class LiveMetrics:
    """A Prometheus collector of a run's telemetry; `add` and `end_round` as a `TelemetryWriter` observer."""

    def __init__(self, names: Mapping[str, Sequence[str]]):
        self._names = {column: list(values) for column, values in names.items()}
        self._lock = threading.Lock()
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._brokers: dict[str, _Broker] = {}
        self._gone_at: dict[str, int] = {}  # broker -> round it crashed or left
        self._reported: dict[tuple[str, str], int] = defaultdict(int)
        self._updates: dict[tuple[str, str], int] = defaultdict(int)
        self._throttle_events: dict[tuple[str, str, str], int] = defaultdict(int)
        self._throttled_s: dict[tuple[str, str, str], float] = defaultdict(float)
        self._durations: dict[str, _Histogram] = defaultdict(_Histogram)
        self._run_round = -1

    # -- the writer's observer -------------------------------------------------------------------

    def add(self, table: str, columns: dict[str, Any]) -> None:
        self._pending.append((table, columns))

    def end_round(self, round_index: int) -> None:
        """Apply the round's rows at once."""
        pending, self._pending = self._pending, []
        with self._lock:
            for table, columns in pending:
                apply = getattr(self, f"_apply_{table}", None)
                if apply is not None:
                    apply(columns)
            self._run_round = round_index

    def _decoded(self, columns: dict[str, Any], column: str) -> list[Any]:
        """A column as Python values; the name columns the hosts send as codes become names."""
        values = np.asarray(columns[column]).tolist()
        names = self._names.get(column)
        if names is not None and np.asarray(columns[column]).dtype.kind in "iu":
            return [names[code] for code in values]
        return values

    def _apply_rounds(self, columns: dict[str, Any]) -> None:
        """One broker's rows of one round (as the hosts hand them over)."""
        rows = {column: self._decoded(columns, column) for column in columns}
        if not rows["broker"]:
            return
        usage, group_usage = np.asarray(columns["usage"]), np.asarray(columns["group_usage"])
        rows["remote_usage"] = np.maximum(group_usage - usage, 0.0).tolist()
        broker, round_index = rows["broker"][0], rows["round"][0]
        if round_index <= self._gone_at.get(broker, -1):
            return  # a tick from before the crash, drained after it: not the broker's current state
        self._brokers[broker] = _Broker(round_index, rows)
        seen: set[str] = set()  # a group has a row per dimension its quota names: count it once
        for group, reported in zip(rows["group"], rows["reported"], strict=True):
            if group not in seen:
                seen.add(group)
                self._updates[broker, group] += 1
                self._reported[broker, group] += bool(reported)

    def _apply_throttles(self, columns: dict[str, Any]) -> None:
        keys = zip(*(self._decoded(columns, column) for column in ("broker", "group", "reason")), strict=True)
        values = zip(self._decoded(columns, "throttle_events"), self._decoded(columns, "throttled_s"), strict=True)
        for key, (events, seconds) in zip(keys, values, strict=True):
            self._throttle_events[key] += events
            self._throttled_s[key] += seconds

    def _apply_timings(self, columns: dict[str, Any]) -> None:
        brokers, durations_s = self._decoded(columns, "broker"), self._decoded(columns, "allocate_phase_s")
        for broker, seconds in zip(brokers, durations_s, strict=True):
            self._durations[broker].add(seconds)

    def _apply_events(self, columns: dict[str, Any]) -> None:
        events = zip(*(self._decoded(columns, column) for column in ("round", "kind", "target")), strict=True)
        for round_index, kind, target in events:
            if kind in GONE:
                self._brokers.pop(target, None)
                self._gone_at[target] = round_index

    # -- the collector ---------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._dimension_gauges()
            yield from self._group_gauges()
            yield from self._cumulative()
            yield from self._broker_metrics()

    def _dimension_gauges(self) -> Iterator[Metric]:
        labels = ["group", "broker", "monitoring_class"]
        for name, column, kind in PULSAR_DIMENSION_GAUGES:
            family = GaugeMetricFamily(PULSAR + name, HELP[PULSAR + name], labels=labels)
            for broker, group, dimension, value in self._per_row(column):
                direction, _, unit = dimension.partition("_")
                if unit.startswith(kind):
                    family.add_metric([group, broker, direction], float(value))
            yield family
        for name, column in DIMENSION_GAUGES.items():
            family = GaugeMetricFamily(name, HELP[name], labels=["group", "broker", "dimension"])
            for broker, group, dimension, value in self._per_row(column):
                family.add_metric([group, broker, dimension], float(value))
            yield family

    def _group_gauges(self) -> Iterator[Metric]:
        for name, column in GROUP_GAUGES.items():
            family = GaugeMetricFamily(name, HELP[name], labels=["group", "broker"])
            for broker, group, value in self._per_group(column):
                if not math.isnan(value):
                    family.add_metric([group, broker], float(value))
            yield family

    def _cumulative(self) -> Iterator[Metric]:
        for name, counts in ((f"{PULSAR}local_usage_reported", self._reported), (f"{PULSAR}updates", self._updates)):
            family = CounterMetricFamily(name, HELP[name], labels=["group", "broker"])  # served as NAME_total
            for (broker, group), count in sorted(counts.items()):
                family.add_metric([group, broker], count)
            yield family
        labels = ["group", "broker", "reason"]
        counters = {"quotalab_throttle_events": self._throttle_events, "quotalab_throttled_seconds": self._throttled_s}
        for name, totals in counters.items():
            family = CounterMetricFamily(name, HELP[name], labels=labels)
            for (broker, group, reason), total in sorted(totals.items()):
                family.add_metric([group, broker, reason], total)
            yield family

    def _broker_metrics(self) -> Iterator[Metric]:
        name = "quotalab_allocate_phase_seconds"
        histogram = HistogramMetricFamily(name, HELP[name], labels=["broker"])
        for broker, durations in sorted(self._durations.items()):
            cumulative = np.cumsum(durations.counts).tolist()
            buckets = [(str(bound), count) for bound, count in zip(DURATION_BUCKETS_S, cumulative, strict=False)]
            histogram.add_metric([broker], [*buckets, ("+Inf", cumulative[-1])], sum_value=durations.sum_s)
        yield histogram
        rounds = GaugeMetricFamily("quotalab_broker_round", HELP["quotalab_broker_round"], labels=["broker"])
        for broker, latest in sorted(self._brokers.items()):
            rounds.add_metric([broker], latest.round_index)
        yield rounds
        yield GaugeMetricFamily("quotalab_run_round", HELP["quotalab_run_round"], value=self._run_round)

    def _per_row(self, column: str) -> Iterator[tuple[str, str, str, Any]]:
        for broker, latest in sorted(self._brokers.items()):
            rows = latest.rows
            yield from zip([broker] * len(rows[column]), rows["group"], rows["dimension"], rows[column], strict=True)

    def _per_group(self, column: str) -> Iterator[tuple[str, str, Any]]:
        """One value per group (the per-group columns repeat over the group's dimensions)."""
        for broker, latest in sorted(self._brokers.items()):
            seen: set[str] = set()
            for group, value in zip(latest.rows["group"], latest.rows[column], strict=True):
                if group not in seen:
                    seen.add(group)
                    yield broker, group, value


class MetricsServer:
    """The HTTP endpoint (`/metrics`) of a `LiveMetrics`, on its own thread until `stop`."""

    def __init__(self, metrics: LiveMetrics, host: str, port: int):
        self.metrics = metrics
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host, self.port = host, self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
