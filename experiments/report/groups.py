"""The report at any number of groups: one row per group in Spark, and from it what the page and summary.json
hold, whatever the size of the run.

- `group_table`: per run, group and dimension, the group's scores and starvation counts
  (`metrics.group_summary`), its events' convergence counted, and the quota telemetry's aggregates; written
  whole as Parquet, never collected whole.
- `shown_groups`: the groups the page details: every group of a run with at most `ALL_GROUPS_UP_TO` of them
  (today's page), else the `WORST_GROUPS` worst by peak overshoot (then events never converged, then Jain).
- `run_scores`: each run's scores pooled over all its groups (the worst peak, means, convergence over every
  event, starvation pooled), computed over the whole table.
- `distributions`: per run, the quantiles of each group's peak overshoot, rounds over quota, utilization and
  Jain, and of the rounds to converge after each event: a CDF of a few hundred numbers per run.
- `run_rounds` and `event_convergence`: per run and round, and per run and event, what the conclusion and the
  fallbacks' comparison need of the groups (any group over quota; the worst overshoot; the target and what was
  held back of it; the slowest group to converge).
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F

from experiments.report import metrics
from experiments.report.metrics import GROUP

ALL_GROUPS_UP_TO = 40  # (group, dimension) rows per run detailed one by one, as the page always did
WORST_GROUPS = 8  # past that, the groups detailed (table and figures) per run: the worst by peak overshoot
QUANTILES = [index / 200 for index in range(201)]  # a CDF's points per run and measure
QUANTILE_ACCURACY = 10_000  # percentile_approx's: relative error 1/10,000 of the rank
DISTRIBUTED = ("peak_overshoot", "rounds_over_quota", "utilization", "jain")  # per group; and rounds to converge


WAITS = ("events", "events_not_converged", "rounds_to_converge_sum")  # `group_table`'s counts of its events
GROUP_TABLE = [*GROUP, *metrics.GROUP_SCORES, *metrics.STARVATION_COUNTS, *WAITS]  # the `groups` table's columns


def group_table(
    per_round: DataFrame, convergence: DataFrame, more: list[Column] | tuple[Column, ...] = ()
) -> DataFrame:
    """Per run, group and dimension (`GROUP_TABLE`): `metrics.group_summary` (the scores and the starvation
    counts), the number of events that apply to it, those never converged after, and the sum of the rounds to
    converge of the others; then the aggregates `more` over its rounds (`metrics.group_summary`'s)."""
    waits = convergence.groupBy(*GROUP).agg(
        F.count("*").alias("events"),
        F.count(F.when(F.col("rounds_to_converge").isNull(), True)).alias("events_not_converged"),
        F.sum("rounds_to_converge").alias("rounds_to_converge_sum"),
    )
    summary = metrics.group_summary(per_round, more)
    return summary.join(waits, on=GROUP, how="left").select(
        *GROUP,
        *metrics.GROUP_SCORES,
        *metrics.STARVATION_COUNTS,
        F.coalesce("events", F.lit(0)).alias("events"),
        F.coalesce("events_not_converged", F.lit(0)).alias("events_not_converged"),
        "rounds_to_converge_sum",
        *(name for name in summary.columns if name not in GROUP_TABLE),
    )


def shown_groups(groups: DataFrame) -> DataFrame:
    """The (run_id, group, dimension) keys the page details, with `rank` (1: the worst of its run) and
    `run_groups` (how many rows the run has)."""
    worst_first = W.partitionBy("run_id").orderBy(
        F.col("peak_overshoot").desc_nulls_last(),
        F.col("events_not_converged").desc(),
        F.col("jain").asc_nulls_last(),
        "group",
        "dimension",
    )
    ranked = groups.select(
        *GROUP,
        F.row_number().over(worst_first).alias("rank"),
        F.count("*").over(W.partitionBy("run_id")).alias("run_groups"),
    )
    return ranked.filter((F.col("run_groups") <= ALL_GROUPS_UP_TO) | (F.col("rank") <= WORST_GROUPS))


def run_scores(groups: DataFrame, per_broker: DataFrame) -> DataFrame:
    """Per run, over all its groups: the worst peak overshoot, the means over groups of rounds over quota,
    utilization, Jain and fairness error, the mean rounds to converge over the events that converged, the
    events and those never converged, starvation pooled over the (broker, round) pairs; how many groups
    (named, and rows with their dimension) and brokers (that published) it has."""
    converged = F.sum("events") - F.sum("events_not_converged")
    brokers = per_broker.groupBy("run_id").agg(F.count("*").alias("brokers"))
    return (
        groups.groupBy("run_id")
        .agg(
            F.max("peak_overshoot").alias("peak_overshoot"),
            F.avg("rounds_over_quota").alias("rounds_over_quota"),
            F.avg("utilization").alias("utilization"),
            F.avg("jain").alias("jain"),
            F.avg("fairness_error").alias("fairness_error"),
            F.try_divide(F.sum("rounds_to_converge_sum"), converged).alias("mean_rounds_to_converge"),
            F.sum("events").alias("events"),
            F.sum("events_not_converged").alias("events_not_converged"),
            F.sum("fair_share_broker_rounds").alias("fair_share_broker_rounds"),
            F.sum("starved_broker_rounds").alias("starved_broker_rounds"),
            F.countDistinct("group").alias("groups"),
            F.count("*").alias("group_rows"),
        )
        .join(brokers, on="run_id", how="left")
    )


def distributions(groups: DataFrame, convergence: DataFrame) -> DataFrame:
    """Per run and measure: `quantiles` (the values at `QUANTILES`, over the groups, nulls left out), `count`
    (the values) and `missing` (the nulls: for rounds to converge, the events never converged after).

    The group measures in one aggregation of `groups` (an array of one struct per measure, then a row each):
    one pass over the table instead of one per measure."""

    def measured(column: str) -> Column:
        return F.struct(
            F.lit(column).alias("measure"),
            F.percentile_approx(column, QUANTILES, QUANTILE_ACCURACY).alias("quantiles"),
            F.count(column).alias("count"),
            F.count(F.when(F.col(column).isNull(), True)).alias("missing"),
        )

    per_group = groups.groupBy("run_id").agg(F.array(*map(measured, DISTRIBUTED)).alias("measures"))
    waits = convergence.groupBy("run_id").agg(F.array(measured("rounds_to_converge")).alias("measures"))
    return per_group.unionByName(waits).select("run_id", F.inline("measures"))


def run_rounds(per_round: DataFrame) -> DataFrame:
    """Per run and round, over its groups: `over_quota` (a group was), `groups_over_quota`, the worst
    `overshoot`, and over the groups with a quota the `target` summed and `held_back`, `max(0, T - U)` summed."""
    limited = F.col("quota") < math.inf
    return per_round.groupBy("run_id", "round").agg(
        (F.count(F.when(F.col("over_quota"), True)) > 0).alias("over_quota"),
        F.count(F.when(F.col("over_quota"), True)).alias("groups_over_quota"),
        F.max("overshoot").alias("overshoot"),
        F.sum(F.when(limited, F.col("target"))).alias("target"),
        F.sum(F.when(limited, F.greatest(F.col("target") - F.col("usage"), F.lit(0.0)))).alias("held_back"),
    )


def event_convergence(convergence: DataFrame) -> DataFrame:
    """Per run and event (round, kind): the groups it applies to, the most rounds any took to converge after it,
    and how many never did."""
    return convergence.groupBy("run_id", "round", "kind").agg(
        F.count("*").alias("groups"),
        F.max("rounds_to_converge").alias("rounds_to_converge"),
        F.count(F.when(F.col("rounds_to_converge").isNull(), True)).alias("never"),
    )
