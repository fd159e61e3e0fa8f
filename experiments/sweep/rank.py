"""The Spark job of a sweep: the candidates ranked, the Pareto front, and each knob's effect.

Per run, the report module computes every metric from the telemetry (`experiments.report`, called by
`collect_run_metrics`); `metrics.run_metrics` reduces it to one number per metric, and `aggregate.score`
reduces a candidate's runs (every condition and seed) to its score: `<metric>_mean`, the aggregated value
(worst or mean, as the sweep says), and `<metric>_std`. Then, in Spark:

- rank: on each objective, a candidate's rank is 1 + the number of candidates strictly better on its
  aggregated value (ties share a rank); normalized to [0, 1] as (rank - 1) / (candidates - 1). The score is the
  sum of the normalized ranks over the objectives, lower is better, and the ranking orders by score, then by
  candidate id (the sweep's order). Ranks, unlike raw values, put objectives measured in rounds, fractions and
  bytes on one scale, and one extreme value cannot outweigh the others;
- Pareto front: a candidate is on it when no other candidate is at least as good on every objective and
  strictly better on one (comparing aggregated values);
- effects: per knob and value, the mean and std of each metric over every run with that value.

An aggregated value that is null (the metric undefined in every run) counts as the worst possible value on its
objective, both for ranks and for the front. Ranks and the front both come from one self-join of the
candidates, every pair compared once per objective: candidates are few (thousands at most), so the pairs are
too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import reduce
from operator import and_, or_
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from experiments.report import metrics as report_metrics
from experiments.report.load import load_runs
from experiments.report.session import pandas_3_accepted
from experiments.sweep.run_scores import METRICS, run_metrics
from experiments.sweep.sweep_file import Objective

PER_RUN_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("params", T.MapType(T.StringType(), T.StringType())),  # dotted key -> JSON of its value
        *[T.StructField(name, T.DoubleType()) for name in METRICS],
    ]
)
RANKING_RULE = (
    "score = sum over the objectives of (rank - 1) / (candidates - 1), where rank is 1 + the number of "
    "candidates with a strictly better aggregated value; lower is better; ties by candidate id. "
    "A null value counts as the worst."
)


@dataclass(frozen=True)
class Ranking:
    """The collected results: `table` one row per candidate in rank order, `effects` one row per
    (knob, value), `per_run` one row per run."""

    # rank, config_id, <knob>..., <objective>_rank, score, on_pareto_front, runs, <metric>_mean and _std
    table: pd.DataFrame
    effects: pd.DataFrame  # parameter, value (JSON), runs, <metric>_mean/_std
    per_run: pd.DataFrame  # run_id, config_id, condition_id, <condition key>..., seed, <knob>..., <metric>...


def collect_run_metrics(spark: SparkSession, run_dirs: list[Path]) -> dict[str, dict[str, float | None]]:
    """run_id -> metrics. The report module's transforms, only those the metrics need (each group's scores, the
    rounds to converge, the bandwidth: three small collects over all the runs at once, where the full report
    collects a dozen tables), then `metrics.run_metrics`."""
    runs = load_runs(spark, run_dirs)
    per_round = report_metrics.group_rounds(report_metrics.round_cells(runs.rounds)).persist()
    try:
        groups = _records(report_metrics.group_summary(per_round))
        convergence = _records(report_metrics.convergence(per_round, runs.events))
    finally:
        per_round.unpersist()
    traffic = _records(report_metrics.run_bandwidth(report_metrics.bandwidth_per_round(runs.messages)))
    by_run = {run_id: {"groups": [], "waits": [], "traffic": {}} for run_id in runs.manifests}
    for row in groups:
        by_run[row["run_id"]]["groups"].append(row)
    for row in convergence:
        by_run[row["run_id"]]["waits"].append(row["rounds_to_converge"])
    for row in traffic:
        by_run[row["run_id"]]["traffic"] = row
    return {
        run_id: run_metrics(int(manifest.get("rounds_completed", 0)), **by_run[run_id])
        for run_id, manifest in runs.manifests.items()
    }


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    """A small result as rows, a null or non-finite number as None (as `summary.json` writes it)."""
    return [
        {key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in row.items()}
        for row in (row.asDict() for row in frame.collect())
    ]


def per_run_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Rows `{run_id, params: {dotted key: value}, <metric>: float | None}` as a DataFrame; a metric missing
    from a row is null."""
    records = [
        (
            row["run_id"],
            {key: json.dumps(value) for key, value in row["params"].items()},
            *[_double(row.get(name)) for name in METRICS],
        )
        for row in rows
    ]
    return spark.createDataFrame(records, PER_RUN_SCHEMA)


def _runs_mean_std() -> list[Column]:
    """The number of runs, then each metric's mean and sample std."""
    spread = [(F.avg(name).alias(f"{name}_mean"), F.stddev_samp(name).alias(f"{name}_std")) for name in METRICS]
    return [F.count("run_id").alias("runs"), *[column for pair in spread for column in pair]]


_STATISTICS = ["runs", *[f"{name}_{statistic}" for name in METRICS for statistic in ("mean", "std")]]
CANDIDATE_SCHEMA = T.StructType(
    [
        T.StructField("config_id", T.StringType()),
        T.StructField("runs", T.LongType()),
        *[T.StructField(name, T.DoubleType()) for name in _STATISTICS[1:]],
    ]
)


def _double(value: float | None) -> float | None:
    """A value as Spark's DoubleType takes it: null stays null (a NaN would compare above every number)."""
    return None if value is None or value != value else float(value)


def rank(aggregated: DataFrame, objective: Objective) -> DataFrame:
    """Per candidate: each objective's rank, the score and whether it is on the Pareto front (see module doc)."""
    names = objective.names

    def worst_if_null(name: str) -> Column:
        worst = -math.inf if objective.maximizes(name) else math.inf
        return F.coalesce(F.col(f"{name}_mean"), F.lit(worst)).alias(name)

    scored = aggregated.select("config_id", *[worst_if_null(name) for name in names])
    mine, other = scored.alias("mine"), scored.alias("other")

    def better(name: str) -> Column:  # the other configuration is strictly better than mine on `name`
        mine_value, other_value = F.col(f"mine.{name}"), F.col(f"other.{name}")
        return other_value > mine_value if objective.maximizes(name) else other_value < mine_value

    def no_worse(name: str) -> Column:
        mine_value, other_value = F.col(f"mine.{name}"), F.col(f"other.{name}")
        return other_value >= mine_value if objective.maximizes(name) else other_value <= mine_value

    dominates = reduce(and_, [no_worse(name) for name in names]) & reduce(or_, [better(name) for name in names])
    others = F.count(F.col("other.config_id"))
    pairs = mine.join(other, on=F.col("mine.config_id") != F.col("other.config_id"), how="left")
    counted = pairs.groupBy(F.col("mine.config_id").alias("config_id")).agg(
        others.alias("others"),
        *[F.count(F.when(better(name), True)).alias(f"{name}_better") for name in names],
        F.coalesce(F.max(dominates), F.lit(False)).alias("dominated"),
    )
    normalized = [
        F.when(F.col("others") > 0, F.col(f"{name}_better") / F.col("others")).otherwise(F.lit(0.0)) for name in names
    ]
    return counted.select(
        "config_id",
        *[(F.col(f"{name}_better") + 1).alias(f"{name}_rank") for name in names],
        reduce(lambda total, term: total + term, normalized).alias("score"),
        (~F.col("dominated")).alias("on_pareto_front"),
    )


def parameter_effects(per_run: DataFrame) -> DataFrame:
    """Per knob and value: runs, and the mean and std of each metric over every run with that value (pooled
    over the other knobs, the conditions and the seeds): each knob's effect on each metric."""
    return (
        per_run.select(F.explode("params").alias("parameter", "value"), "run_id", *METRICS)
        .groupBy("parameter", "value")
        .agg(*_runs_mean_std())
        .select("parameter", "value", *_STATISTICS)
    )


def rank_sweep(
    spark: SparkSession, candidates: list[dict[str, Any]], runs: list[dict[str, Any]], objective: Objective
) -> Ranking:
    """Rank the candidates and find the front; each knob's effect over the runs; collect the small results.

    `candidates`: `{config_id, params: {knob: value}, runs, <metric>_mean, <metric>_std}` (`aggregate.score`);
    `runs`: `{run_id, config_id, condition_id, condition: {key: value}, seed, params, <metric>...}`."""
    records = [
        (row["config_id"], int(row["runs"]), *[_double(row.get(name)) for name in _STATISTICS[1:]])
        for row in candidates
    ]
    aggregated = spark.createDataFrame(records, CANDIDATE_SCHEMA)
    table = rank(aggregated, objective).join(aggregated, on="config_id", how="inner").orderBy("score", "config_id")
    with pandas_3_accepted():
        table = table.toPandas()
        effects = parameter_effects(per_run_frame(spark, runs)).orderBy("parameter", "value").toPandas()
    table.insert(0, "rank", range(1, len(table) + 1))
    params = {row["config_id"]: row["params"] for row in candidates}
    for position, key in enumerate(dict.fromkeys(key for values in params.values() for key in values), start=2):
        table.insert(position, key, [params[config_id].get(key) for config_id in table["config_id"]])
    per_run_table = pd.DataFrame(
        [
            {"run_id": row["run_id"], "config_id": row["config_id"], "condition_id": row["condition_id"]}
            | row["condition"]
            | {"seed": row["seed"]}
            | row["params"]
            | {name: row.get(name) for name in METRICS}
            for row in runs
        ]
    )
    return Ranking(table=table, effects=effects, per_run=per_run_table)
