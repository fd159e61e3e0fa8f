"""The report's producers section (PIP-385): per producer and run, throughput, send latency and failed sends
(one table), the time throttled by each of PIP-385's five reasons (another), and a figure, side by side for the
runs (e.g. one per throttle mode).

Present only when a run has producer telemetry: the `producers` table (actors/telemetry/writer.py) is empty for a
run without producers, and absent from runs written before it existed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from actors.hosts.broker_producers import THROTTLED_COLUMNS
from experiments.report import plotting
from experiments.report.page import Section, html_table, note
from experiments.report.plotting import Figure, figure_html, line

PRODUCER = ["run_id", "broker", "client", "topic", "group", "mode"]
REASON_LABELS = {  # PIP-385's ThrottlingReason, in its order
    "throttled_topic_quota_s": "topic quota",
    "throttled_resource_group_quota_s": "resource-group quota",
    "throttled_connection_pending_messages_s": "connection pending messages",
    "throttled_buffer_size_s": "buffer size",
    "throttled_broker_quota_s": "broker quota",
}
HELD_COLORS = {  # one colour per reason, none of them the figure's topic colours
    "throttled_topic_quota_s": "#fdae61",
    "throttled_resource_group_quota_s": "#d7191c",
    "throttled_connection_pending_messages_s": "#2c7bb6",
    "throttled_buffer_size_s": "#abd9e9",
    "throttled_broker_quota_s": "#762a83",
    "connection_blocked_s": "#8c8c8c",
}
DASHES = ["solid", "dash", "dashdot", "dot"]
PEAKS = {"connection_pending_max_msgs": "peak: connection pending msgs", "publish_buffer_max_mb": "peak: buffer MiB"}


def producer_summary(producers: DataFrame) -> tuple[DataFrame, list[str]]:
    """One row per producer and run: means per round of rates, the median round's p50 latency and the worst
    round's p99, sums of throttled seconds by reason, signals and failed sends, and the peaks of what was
    pending on the broker (its connection's messages, the broker's buffer)."""
    sums = [F.sum(column).alias(column) for column in (*THROTTLED_COLUMNS, "connection_blocked_s")]
    counts = [
        F.sum(column).alias(column)
        for column in ("throttle_signals", "fallbacks", "failed_throttled_msgs", "failed_timeout_msgs")
    ]
    summary = producers.groupBy(*PRODUCER).agg(
        F.count("*").alias("rounds"),
        F.mean("offered_msgs_per_s").alias("offered_msgs_per_s"),
        F.mean("throughput_msgs_per_s").alias("throughput_msgs_per_s"),
        F.percentile_approx("latency_p50_ms", 0.5).alias("latency_p50_ms"),
        F.max("latency_p99_ms").alias("latency_p99_ms"),
        *sums,
        *counts,
        F.sum("failed_queue_full_msgs").alias("failed_queue_full_msgs"),
        *(F.max(column).alias(column) for column in PEAKS),
    )
    return summary, PRODUCER


def producer_rounds(producers: DataFrame) -> tuple[DataFrame, list[str]]:
    """Throughput and p99 latency per producer and round (small: producers x rounds x runs), to collect."""
    columns = [*PRODUCER, "round", "throughput_msgs_per_s", "latency_p99_ms"]
    return producers.select(*columns), [*PRODUCER, "round"]


def run_labels(summary: pd.DataFrame) -> dict[str, str]:
    """Each run by its throttle mode when the modes tell the runs apart, else by run id."""
    modes = summary.drop_duplicates("run_id").set_index("run_id")["mode"]
    if modes.is_unique:
        return dict(modes)
    return {run_id: f"{run_id} ({mode})" for run_id, mode in modes.items()}


def producers_section(summary: pd.DataFrame, per_round: pd.DataFrame) -> Section:
    """The section: what each producer got (throughput, latency, failed sends), why it was held (seconds by
    each of PIP-385's five reasons), then the figure."""
    labels = run_labels(summary)
    got_header = [
        "run", "client", "topic", "group", "offered msgs/s", "throughput msgs/s", "p50 ms", "p99 ms",
        "failed: throttled", "failed: timeout", "failed: queue full",
    ]  # fmt: skip
    got = [
        [
            labels[row.run_id], row.client, row.topic, row.group,
            f"{row.offered_msgs_per_s:,.1f}", f"{row.throughput_msgs_per_s:,.1f}",
            _ms(row.latency_p50_ms), _ms(row.latency_p99_ms),
            *(f"{value:,.0f}" for value in (row.failed_throttled_msgs, row.failed_timeout_msgs,
                                             row.failed_queue_full_msgs)),
        ]
        for row in summary.itertuples()
    ]  # fmt: skip
    peaks = [column for column in PEAKS if summary[column].fillna(0.0).any()]  # runs with slow persistence
    held_header = [
        "run", "topic", *REASON_LABELS.values(), "connection blocked", "signals", "fallbacks",
        *(PEAKS[column] for column in peaks),
    ]  # fmt: skip
    held = [
        [
            labels[row.run_id], row.topic,
            *(f"{getattr(row, column):,.1f}" for column in (*THROTTLED_COLUMNS, "connection_blocked_s")),
            int(row.throttle_signals), int(row.fallbacks), *(f"{getattr(row, column):,.1f}" for column in peaks),
        ]
        for row in summary.itertuples()
    ]  # fmt: skip
    got_note = (
        "Per producer over the whole run: rates are means per round, p50 the median round's, p99 the worst "
        "round's (send latency: created to persisted). Failed sends: timed out after being told of throttling for "
        "more than 80% of the send timeout (PIP-385's exception), other timeouts, and a full pending queue."
    )
    held_note = (
        "Seconds over the run its messages waited for each of PIP-385's five reasons (the first three its own "
        "quotas: topic, resource group, broker; connection pending messages and buffer size are the broker's "
        "limits on what it has read and not yet persisted); connection blocked: waiting behind its connection "
        "(paused, or read behind another producer's throttled messages) for someone else's breach. Signals: "
        "ThrottleProducer commands it received; fallbacks: times the broker paused its connection because the "
        "client's receipt came late."
        + (" Peaks: the most of its connection's messages, and of the broker's buffer (MiB), pending at once."
           if peaks else "")
    )  # fmt: skip
    held_section = Section(
        "producers-held",
        "Time throttled, by reason (seconds)",
        note(held_note) + html_table(held_header, held, text_columns=2, wide=True)
        + figure_html(held_figure(summary, labels), "producers-held-figure"),
    )  # fmt: skip
    body = (
        note(got_note)
        + html_table(got_header, got, text_columns=4, wide=True)
        + figure_html(producers_figure(per_round, labels), "producers-figure")
    )
    return Section("producers", "Producers and throttling (PIP-385)", body, [held_section])


def producers_figure(per_round: pd.DataFrame, labels: dict[str, str]) -> Figure:
    """Each producer's throughput (top row) and p99 send latency (bottom row, log scale) per round, one column
    per run; one colour and dash per topic."""
    runs = list(labels)
    topics = list(dict.fromkeys(per_round["topic"]))
    titles = [f"{labels[run_id]}: {what}" for what in ("throughput msgs/s", "p99 latency ms") for run_id in runs]
    figure = plotting.grid(2, len(runs), titles, 640)
    figure.layout |= {"showlegend": True, "hovermode": "x unified"}
    for column, run_id in enumerate(runs):
        for (topic,), lines in per_round[per_round["run_id"] == run_id].groupby(["topic"], sort=False):
            index = topics.index(topic)
            style = {"color": plotting.PALETTE[index % len(plotting.PALETTE)], "width": 2,
                     "dash": DASHES[index % len(DASHES)]}  # fmt: skip
            for row, measure in enumerate(("throughput_msgs_per_s", "latency_p99_ms")):
                panel = row * len(runs) + column + 1
                axes = {"xaxis": f"x{'' if panel == 1 else panel}", "yaxis": f"y{'' if panel == 1 else panel}"}
                figure.add(line(lines["round"], lines[measure], topic, style, legendgroup=topic,
                                showlegend=panel == 1, **axes))  # fmt: skip
    for panel in range(len(runs) + 1, 2 * len(runs) + 1):
        figure.layout[f"yaxis{'' if panel == 1 else panel}"] |= {"type": "log", "rangemode": "normal"}
    return figure


def held_figure(summary: pd.DataFrame, labels: dict[str, str]) -> Figure:
    """Per topic and run: the seconds throttled by each of PIP-385's five reasons and blocked by the connection,
    stacked."""
    x = [[labels[run_id] for run_id in summary["run_id"]], summary["topic"].tolist()]
    figure = Figure([], plotting.base_layout(460, barmode="stack", hovermode="closest"))
    figure.layout |= {"xaxis": plotting.AXIS, "yaxis": {**plotting.AXIS, "title": {"text": "seconds over the run"}}}
    for column in (*THROTTLED_COLUMNS, "connection_blocked_s"):
        name = REASON_LABELS.get(column, "connection blocked")
        figure.add({"type": "bar", "x": x, "y": plotting.values(summary[column].fillna(0.0)), "name": name,
                    "marker": {"color": HELD_COLORS[column]}})  # fmt: skip
    return figure


def _ms(value: float) -> str:
    return "—" if value is None or np.isnan(value) else f"{value:,.1f}"
