"""The report's producers section (PIP-385): per producer and run, throughput, send latency, time throttled by
reason and failed sends, as a table and a figure, side by side for the runs (e.g. one per throttle mode).

Present only when a run has producer telemetry: the `producers` table (actors/telemetry.py) is empty for a
run without producers, and absent from runs written before it existed.
"""

from __future__ import annotations

from html import escape

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from actors.producers import THROTTLED_COLUMNS
from experiments.report.figures import png_base64
from experiments.report.html import html_table, img_tag
from experiments.report.load import Runs

PRODUCER = ["run_id", "broker", "client", "topic", "group", "mode"]
REASON_NAMES = {column: column.removeprefix("throttled_").removesuffix("_s") for column in THROTTLED_COLUMNS}


def producers_of(runs: Runs) -> DataFrame | None:
    """The `producers` table of the runs; None when no run has producers."""
    return runs.producers if runs.producers.limit(1).count() else None


def producer_summary(producers: DataFrame) -> pd.DataFrame:
    """One row per producer and run: means per round of rates, the median round's p50 latency and the worst
    round's p99, and sums of throttled seconds by reason, signals and failed sends."""
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
    """The section: the table of every producer of every run, then the figure."""
    labels = run_labels(summary)
    header = [
        "run", "client", "topic", "group", "offered msgs/s", "throughput msgs/s", "p50 ms", "p99 ms",
        *(f"throttled s: {name}" for name in REASON_NAMES.values()), "connection blocked s", "signals",
        "fallbacks", "failed: throttled", "failed: timeout", "failed: queue full",
    ]  # fmt: skip
    rows = [
        [
            labels[row.run_id], row.client, row.topic, row.group,
            f"{row.offered_msgs_per_s:,.1f}", f"{row.throughput_msgs_per_s:,.1f}",
            _ms(row.latency_p50_ms), _ms(row.latency_p99_ms),
            *(f"{getattr(row, column):,.1f}" for column in THROTTLED_COLUMNS), f"{row.connection_blocked_s:,.1f}",
            int(row.throttle_signals), int(row.fallbacks),
            *(f"{value:,.0f}" for value in (row.failed_throttled_msgs, row.failed_timeout_msgs,
                                             row.failed_queue_full_msgs)),
        ]
        for row in summary.itertuples()
    ]  # fmt: skip
    note = (
        "Per producer over the whole run: rates are means per round, p50 the median round's, p99 the worst "
        "round's; throttled seconds are the time its messages waited for its own limiters, by reason; connection "
        "blocked is the time they waited behind its connection (paused, or read behind another producer's "
        "throttled messages) for someone else's breach. Failed sends: timed out after being told of throttling "
        "for more than 80% of the send timeout (PIP-385's exception), other timeouts, and a full pending queue."
    )
    return (
        "<h2>Producers and throttling (PIP-385)</h2>"
        f'<p class="note">{escape(note)}</p>'
        + html_table(header, rows, text_columns=4)
        + img_tag(producers_figure(summary, per_round, labels), "producers: throughput, latency, throttled time")
    )


def producers_figure(summary: pd.DataFrame, per_round: pd.DataFrame, labels: dict[str, str]) -> str:
    """Top: each producer's throughput per round, and its p99 send latency, one line style per run. Bottom:
    mean throughput per producer with the runs side by side, and time throttled by reason (stacked) plus
    time blocked by its connection."""
    figure = Figure(figsize=(15, 9), layout="constrained")
    (throughput_axes, latency_axes), (bars_axes, throttled_axes) = figure.subplots(2, 2)
    styles = ["-", "--", ":", "-."]
    topics = list(dict.fromkeys(summary["topic"]))
    colors = {topic: f"C{index % 10}" for index, topic in enumerate(topics)}
    for run_index, run_id in enumerate(labels):
        for (topic,), lines in per_round[per_round["run_id"] == run_id].groupby(["topic"], sort=False):
            style = {"color": colors[topic], "linestyle": styles[run_index % len(styles)]}
            label = f"{topic} ({labels[run_id]})"
            throughput_axes.plot(lines["round"], lines["throughput_msgs_per_s"], label=label, **style)
            latency_axes.plot(lines["round"], lines["latency_p99_ms"], label=label, **style)
    throughput_axes.set(title="throughput per round", xlabel="round", ylabel="msgs/s")
    latency_axes.set(title="send latency p99 per round", xlabel="round", ylabel="ms", yscale="log")
    throughput_axes.legend(fontsize=7, ncol=2)

    runs = list(labels)
    width = 0.8 / max(len(runs), 1)
    positions = np.arange(len(topics))
    for run_index, run_id in enumerate(runs):
        rows = summary[summary["run_id"] == run_id].set_index("topic").reindex(topics)
        offset = positions + (run_index - (len(runs) - 1) / 2) * width
        bars_axes.bar(offset, rows["throughput_msgs_per_s"], width, label=labels[run_id])
        bottom = np.zeros(len(topics))
        for reason_index, column in enumerate((*THROTTLED_COLUMNS, "connection_blocked_s")):
            values = rows[column].fillna(0.0).to_numpy()
            name = REASON_NAMES.get(column, "connection blocked")
            throttled_axes.bar(
                offset, values, width, bottom=bottom, color=f"C{reason_index}", edgecolor="black", linewidth=0.3,
                hatch="//" if run_index % 2 else None, label=f"{name} ({labels[run_id]})" if values.any() else None,
            )  # fmt: skip
            bottom += values
    bars_axes.set_xticks(positions, topics, rotation=20, ha="right", fontsize=8)
    bars_axes.set(title="mean throughput", ylabel="msgs/s")
    bars_axes.legend(fontsize=8)
    throttled_axes.set_xticks(positions, topics, rotation=20, ha="right", fontsize=8)
    throttled_axes.set(title="time throttled by reason, and blocked by the connection", ylabel="seconds over the run")
    throttled_axes.legend(fontsize=7)
    return png_base64(figure)


def _ms(value: float) -> str:
    return "—" if value is None or np.isnan(value) else f"{value:,.1f}"
