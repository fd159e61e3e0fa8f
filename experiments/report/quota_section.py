"""The report's quota telemetry section (docs/telemetry.md): Spark aggregates of the PIP-323-style columns of
`rounds`, the `throttles` table by reason and the `timings` table, and their figure.

Per run, group and dimension, over every (broker, round) row: the mean and highest usage as a fraction of the
local limit, the highest usage in a broker's view as a fraction of the quota, the share of rows over quota, the
longest breach, throttle events; the report age (oldest and mean of the peers' freshest entries, rows with no
peer in view left out). Per run, group and reason: throttle events and throttled seconds. Per run: the allocate
phase's wall-clock duration (p50, p99, max).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from experiments.report import plotting
from experiments.report.plotting import Figure, line

GROUP = ["run_id", "group", "dimension"]


@dataclass(frozen=True)
class QuotaTelemetry:
    """The collected aggregates (pandas), one table per grain."""

    groups: pd.DataFrame  # per run, group, dimension: `GROUP`, then `group_aggregates`' columns
    reasons: pd.DataFrame  # per run, group, reason: `throttled_by_reason`
    per_round: pd.DataFrame  # per run, round, group: `group_rounds`
    throttled_per_round: pd.DataFrame  # per run, round, reason: `throttled_rounds`
    timings: pd.DataFrame  # per run: `allocate_timings`


def _known(column: str) -> Column:
    """A column with NaN (no peer in view) as null, which aggregates skip."""
    return F.when(~F.isnan(column), F.col(column))


def round_aggregates() -> list[Column]:
    """What each round of a group keeps of its (broker) rows for the telemetry's aggregates, computed in the
    report's one aggregation of the `rounds` rows (`metrics.round_cells`): sums and counts where a mean over
    rows is wanted, maxima, and the rows over quota."""
    fraction, age = F.col("usage_fraction_of_limit"), _known("report_age_mean_s")
    return [
        F.sum(fraction).alias("usage_of_limit_sum"),
        F.count(fraction).alias("usage_of_limit_rows"),
        F.max(fraction).alias("usage_of_limit_max"),
        F.max("group_usage_fraction_of_quota").alias("group_usage_of_quota_max"),
        F.count(F.when(F.col("over_quota"), True)).alias("rows_over_quota"),
        F.count("*").alias("rows"),
        F.max("breach_age_s").alias("breach_age_s"),
        F.sum("throttle_events").cast("long").alias("throttle_events"),
        F.sum(age).alias("report_age_mean_sum"),
        F.count(age).alias("report_age_mean_rows"),
        F.max(_known("report_age_max_s")).alias("report_age_max_s"),
    ]


ROUND_COLUMNS = (
    "usage_of_limit_sum", "usage_of_limit_rows", "usage_of_limit_max", "group_usage_of_quota_max", "rows_over_quota",
    "rows", "breach_age_s", "throttle_events", "report_age_mean_sum", "report_age_mean_rows", "report_age_max_s",
)  # fmt: skip


def group_aggregates() -> list[Column]:
    """Per run, group and dimension, over every (broker, round) row: what the telemetry's table by group holds,
    as aggregates of the report's table of group rounds with `ROUND_COLUMNS`
    (`metrics.group_rounds`), computed in its one aggregation by group (`metrics.group_summary`'s `more`)."""
    return [
        (F.sum("usage_of_limit_sum") / F.sum("usage_of_limit_rows")).alias("usage_of_limit_mean"),
        F.max("usage_of_limit_max").alias("usage_of_limit_max"),
        F.max("group_usage_of_quota_max").alias("group_usage_of_quota_max"),
        (F.sum("rows_over_quota") / F.sum("rows")).alias("over_quota_share"),
        F.max("breach_age_s").alias("longest_breach_s"),
        F.sum("throttle_events").cast("long").alias("throttle_events"),
        F.try_divide(F.sum("report_age_mean_sum"), F.sum("report_age_mean_rows")).alias("report_age_mean_s"),
        F.max("report_age_max_s").alias("report_age_max_s"),
    ]


def throttled_by_reason(throttles: DataFrame) -> DataFrame:
    return throttles.groupBy("run_id", "group", "reason").agg(
        F.sum("throttle_events").cast("long").alias("throttle_events"),
        F.sum("throttled_s").alias("throttled_s"),
    )


AGE_COLUMNS = ("breach_age_s", "report_age_max_s", "report_age_mean_sum", "report_age_mean_rows")  # `group_rounds`'


def group_rounds(per_round: pd.DataFrame) -> pd.DataFrame:
    """Per run, round and group, over brokers and dimensions (from the collected rows of `metrics.group_rounds`
    with `AGE_COLUMNS`, the shown groups'; as `group_aggregates` does over rounds): the longest breach and the
    report ages. pandas, on the few rows the page details: a Spark query of its own cost one more round of jobs."""
    by_round = per_round.groupby(["run_id", "round", "group"], as_index=False, sort=False).agg(
        breach_age_s=("breach_age_s", "max"),
        report_age_max_s=("report_age_max_s", "max"),
        report_age_mean_sum=("report_age_mean_sum", "sum"),
        report_age_mean_rows=("report_age_mean_rows", "sum"),
    )
    rows = by_round["report_age_mean_rows"]
    mean = by_round["report_age_mean_sum"] / rows.where(rows > 0)
    return (
        by_round.assign(report_age_mean_s=mean.astype("float64"))
        .drop(columns=["report_age_mean_sum", "report_age_mean_rows"])
        .sort_values(["run_id", "group", "round"], ignore_index=True)
    )


def throttled_rounds(throttles: DataFrame) -> DataFrame:
    """Per run, round and reason: throttled seconds summed over brokers and groups."""
    return throttles.groupBy("run_id", "round", "reason").agg(F.sum("throttled_s").alias("throttled_s"))


def allocate_timings(timings: DataFrame) -> DataFrame:
    quantiles = F.percentile_approx("allocate_phase_s", [0.5, 0.99], 10_000)
    return (
        timings.groupBy("run_id")
        .agg(quantiles.alias("q"), F.max("allocate_phase_s").alias("max_s"), F.count("*").alias("phases"))
        .select("run_id", F.col("q")[0].alias("p50_s"), F.col("q")[1].alias("p99_s"), "max_s", "phases")
    )


def quota_figure(per_round: pd.DataFrame, throttled: pd.DataFrame) -> Figure:
    """Top: the longest breach per group; middle: throttled seconds per round by reason; bottom: the oldest
    (solid) and the mean (dotted) report age per group, one colour per group."""
    figure = plotting.stacked([1, 1, 1], 580)
    for index, (group, series) in enumerate(per_round.groupby("group")):
        color = plotting.PALETTE[index % len(plotting.PALETTE)]
        x = series["round"].tolist()
        figure.add(line(x, series["breach_age_s"], group, {"color": color, "width": 1.8}, legendgroup=group))
        figure.add(line(x, series["report_age_max_s"], f"{group} oldest", {"color": color, "width": 1.8}, panel=3,
                        legendgroup=group, showlegend=False))  # fmt: skip
        figure.add(line(x, series["report_age_mean_s"], f"{group} mean", {"color": color, "width": 1.4, "dash": "dot"},
                        panel=3, legendgroup=group, showlegend=False))  # fmt: skip
    rounds = sorted(per_round["round"].unique())
    for index, (reason, series) in enumerate(throttled.groupby("reason")):
        # a round without a row for the reason was not throttled by it: 0, not the last value carried over
        seconds = series.set_index("round")["throttled_s"].reindex(rounds, fill_value=0.0)
        style = {"shape": "hvh", "width": 2, "color": plotting.PALETTE[-1 - index % len(plotting.PALETTE)]}
        figure.add(line(rounds, seconds, f"throttled: {reason}", style, panel=2))
    for axis, title in (("yaxis", "breach age (s)"), ("yaxis2", "throttled (s/round)"), ("yaxis3", "report age (s)")):
        figure.layout[axis] |= {"title": {"text": title}, "rangemode": "tozero"}
    return figure
