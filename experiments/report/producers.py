"""The report's producers section (PIP-385): per producer and run, throughput, send latency and failed sends
(one table), the time throttled by each of PIP-385's five reasons (another), and a figure, side by side for the
runs (e.g. one per throttle mode).

Present only when a run has producer telemetry: the `producers` table (actors/telemetry.py) is empty for a
run without producers, and absent from runs written before it existed.
"""

from __future__ import annotations

from html import escape

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from actors.producers import THROTTLED_COLUMNS
from experiments.report.figures import png_base64
from experiments.report.html import html_table, img_tag
from experiments.report.load import Runs

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
LINE_STYLES = ["-", "--", "-.", ":"]
PEAKS = {"connection_pending_max_msgs": "peak: connection pending msgs", "publish_buffer_max_mb": "peak: buffer MiB"}


def producers_of(runs: Runs) -> DataFrame | None:
    """The `producers` table of the runs; None when no run has producers."""
    return runs.producers if runs.producers.limit(1).count() else None


def producer_summary(producers: DataFrame) -> pd.DataFrame:
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
    return summary.orderBy(*PRODUCER).toPandas()


def producer_rounds(producers: DataFrame) -> pd.DataFrame:
    """Throughput and p99 latency per producer and round (small: producers x rounds x runs)."""
    columns = [*PRODUCER, "round", "throughput_msgs_per_s", "latency_p99_ms"]
    return producers.select(*columns).orderBy(*PRODUCER, "round").toPandas()


def run_labels(summary: pd.DataFrame) -> dict[str, str]:
    """Each run by its throttle mode when the modes tell the runs apart, else by run id."""
    modes = summary.drop_duplicates("run_id").set_index("run_id")["mode"]
    if modes.is_unique:
        return dict(modes)
    return {run_id: f"{run_id} ({mode})" for run_id, mode in modes.items()}


def producers_section(summary: pd.DataFrame, per_round: pd.DataFrame) -> str:
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
    return (
        "<h2>Producers and throttling (PIP-385)</h2>"
        f'<p class="note">{escape(got_note)}</p>'
        + html_table(got_header, got, text_columns=4)
        + "<h3>Time throttled, by reason (seconds)</h3>"
        + f'<p class="note">{escape(held_note)}</p>'
        + html_table(held_header, held, text_columns=2)
        + img_tag(producers_figure(summary, per_round, labels), "producers: throughput, latency, throttled time")
    )


def producers_figure(summary: pd.DataFrame, per_round: pd.DataFrame, labels: dict[str, str]) -> str:
    """Top: each producer's throughput and p99 send latency per round, one column per run (same scales).
    Bottom: mean throughput per producer with the runs side by side, and the time throttled by each of the five
    reasons (stacked; one hatch per run) plus the time blocked by its connection."""
    runs = list(labels)
    topics = list(dict.fromkeys(summary["topic"]))
    colors = {topic: f"C{index % 10}" for index, topic in enumerate(topics)}
    figure = Figure(figsize=(15, 11), layout="constrained")
    lines_figure, bars_figure = figure.subfigures(2, 1, height_ratios=[1.3, 1])
    line_axes = lines_figure.subplots(2, len(runs), sharex=True, sharey="row", squeeze=False)
    for column, run_id in enumerate(runs):
        throughput_axes, latency_axes = line_axes[0, column], line_axes[1, column]
        for (topic,), lines in per_round[per_round["run_id"] == run_id].groupby(["topic"], sort=False):
            # thicker and solid first, thinner and dashed after: a line another one covers still shows
            index = topics.index(topic)
            style = {
                "color": colors[topic],
                "linewidth": 1.2 + 3.0 * (len(topics) - index) / len(topics),
                "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
            }
            throughput_axes.plot(lines["round"], lines["throughput_msgs_per_s"], label=topic, **style)
            latency_axes.plot(lines["round"], lines["latency_p99_ms"], label=topic, **style)
        throughput_axes.set(title=f"{labels[run_id]}: throughput per round", ylabel="msgs/s")
        latency_axes.set(title=f"{labels[run_id]}: send latency p99 per round", xlabel="round", ylabel="ms")
        latency_axes.set_yscale("log")
        for axes in (throughput_axes, latency_axes):
            axes.grid(alpha=0.3)
    line_axes[0, 0].legend(fontsize=8, ncol=2)

    bars_axes, throttled_axes = bars_figure.subplots(1, 2)
    width = 0.8 / max(len(runs), 1)
    positions = np.arange(len(topics))
    hatches = [None, "//", "..", "xx"]
    held_columns = (*THROTTLED_COLUMNS, "connection_blocked_s")
    highest = 0.0
    for run_index, run_id in enumerate(runs):
        rows = summary[summary["run_id"] == run_id].set_index("topic").reindex(topics)
        offset = positions + (run_index - (len(runs) - 1) / 2) * width
        hatch = hatches[run_index % len(hatches)]
        bars_axes.bar(offset, rows["throughput_msgs_per_s"], width, color="0.75", edgecolor="black", hatch=hatch)
        bottom = np.zeros(len(topics))
        for column in held_columns:
            values = rows[column].fillna(0.0).to_numpy()
            throttled_axes.bar(offset, values, width, bottom=bottom, color=HELD_COLORS[column], edgecolor="black",
                               linewidth=0.3, hatch=hatch)  # fmt: skip
            bottom += values
        highest = max(highest, float(bottom.max()))
    throttled_axes.set_ylim(0.0, 1.1 * highest or 1.0)  # room above the highest stack
    run_handles = [
        Patch(facecolor="white", edgecolor="black", hatch=hatches[i % len(hatches)]) for i in range(len(runs))
    ]
    bars_axes.legend(run_handles, [labels[run_id] for run_id in runs], fontsize=8)
    reason_handles = [Patch(facecolor=HELD_COLORS[column], edgecolor="black") for column in held_columns]
    reason_names = [*REASON_LABELS.values(), "connection blocked"]
    throttled_axes.legend(
        reason_handles + run_handles, reason_names + [labels[run_id] for run_id in runs],
        fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
    )  # fmt: skip
    for axes in (bars_axes, throttled_axes):
        axes.set_xticks(positions, topics, rotation=20, ha="right", fontsize=8)
        axes.grid(axis="y", alpha=0.3)
    bars_axes.set(title="mean throughput", ylabel="msgs/s")
    throttled_axes.set(title="time throttled by reason, and blocked by the connection", ylabel="seconds over the run")
    return png_base64(figure)


def _ms(value: float) -> str:
    return "—" if value is None or np.isnan(value) else f"{value:,.1f}"
