"""What comes back to the driver (small aggregated tables only) and `summary.json` built from it.

The raw tables stay in Spark; the driver receives per-(group, round) and per-(run, round) aggregates, whose
size does not grow with the number of brokers, and each broker's limit for the few groups the figures show.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from actors.telemetry.liveness import run_status
from experiments.report import agreement, metrics, quota_telemetry
from experiments.report.load import Runs
from experiments.report.quota_telemetry import QuotaTelemetry
from experiments.report.session import pandas_3_accepted


@dataclass(frozen=True)
class Results:
    """The aggregated tables, as pandas DataFrames with the columns of the `metrics` transform named."""

    per_round: pd.DataFrame  # metrics.group_rounds
    groups: pd.DataFrame  # metrics.group_summary
    convergence: pd.DataFrame  # metrics.convergence
    bandwidth: pd.DataFrame  # metrics.bandwidth_per_round
    per_broker: pd.DataFrame  # metrics.bandwidth_per_broker
    runs: pd.DataFrame  # metrics.run_bandwidth
    starvation: pd.DataFrame  # metrics.starvation
    quota: QuotaTelemetry  # quota_telemetry: the PIP-323-style telemetry's aggregates
    agreement: pd.DataFrame  # agreement.rounds_to_agree (empty without a pool-size consensus)
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # the runs' events table as logged
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)  # the `extra` frames asked of collect_results


Frames = Mapping[str, tuple[DataFrame, list[str]]]  # name -> (a small result, the columns to sort it by)


def collect_results(runs: Runs, extra: Frames | None = None) -> Results:
    """Run the metric jobs and collect their (small) results, with the `extra` frames (figures' tables).

    Two collects, whatever the number of tables: the first computes the water-filling and the per-round table
    and keeps the latter cached; the second computes every other table from it and the telemetry at once
    (`collect_tables`). On small runs each Spark job costs about as much as its work, so one collect per table
    (sixteen) took most of a report's time. The first runs in a thread while this one builds and plans the
    second: building and planning a plan of twenty tables takes seconds of the driver's time, which now overlap
    the first's jobs instead of following them. A partition of the cached table is computed once either way
    (the block manager locks it while a task writes it).
    """
    per_round = metrics.group_rounds(metrics.broker_rounds(runs.rounds)).persist()
    try:
        with ThreadPoolExecutor(max_workers=1) as first_collect:
            first = first_collect.submit(collect_table, per_round, metrics.GROUP_ROUND)
            per_bandwidth_round = metrics.bandwidth_per_round(runs.messages)
            frames: dict[str, tuple[DataFrame, list[str]]] = {
                "groups": (metrics.group_summary(per_round), metrics.GROUP),
                "convergence": (metrics.convergence(per_round, runs.events), [*metrics.GROUP_ROUND, "kind"]),
                "bandwidth": (per_bandwidth_round, ["run_id", "round"]),
                "per_broker": (metrics.bandwidth_per_broker(runs.messages), ["run_id", "broker"]),
                "runs": (metrics.run_bandwidth(per_bandwidth_round), ["run_id"]),
                "starvation": (metrics.starvation(per_round), metrics.GROUP),
                "agreement": (agreement.agreement_per_round(runs.rounds), ["run_id", "round"]),
                "events": (runs.events, ["run_id", "round", "kind"]),
                **quota_telemetry_frames(runs),
            }
            tables = collect_tables({**frames, **(extra or {})})
    finally:
        per_round.unpersist()
    return Results(
        per_round=first.result(),
        groups=tables["groups"],
        convergence=tables["convergence"],
        bandwidth=tables["bandwidth"],
        per_broker=tables["per_broker"],
        runs=tables["runs"],
        starvation=tables["starvation"],
        quota=QuotaTelemetry(**{name: tables[f"quota.{name}"] for name in QUOTA_TABLES}),
        agreement=agreement.rounds_to_agree(tables["agreement"], tables["events"]),
        events=tables["events"],
        extra={name: tables[name] for name in extra or {}},
    )


QUOTA_TABLES = ("groups", "reasons", "per_round", "throttled_per_round", "timings")


def quota_telemetry_frames(runs: Runs) -> dict[str, tuple[DataFrame, list[str]]]:
    """The quota telemetry's tables (`QuotaTelemetry`'s fields, prefixed `quota.`), to collect."""
    return {
        "quota.groups": (quota_telemetry.group_summary(runs.rounds), quota_telemetry.GROUP),
        "quota.reasons": (quota_telemetry.throttled_by_reason(runs.throttles), ["run_id", "group", "reason"]),
        "quota.per_round": (quota_telemetry.group_rounds(runs.rounds), ["run_id", "group", "round"]),
        "quota.throttled_per_round": (
            quota_telemetry.throttled_rounds(runs.throttles),
            ["run_id", "reason", "round"],
        ),
        "quota.timings": (quota_telemetry.allocate_timings(runs.timings), ["run_id"]),
    }


def collect_quota_telemetry(runs: Runs) -> QuotaTelemetry:
    tables = collect_tables(quota_telemetry_frames(runs))
    return QuotaTelemetry(**{name: tables[f"quota.{name}"] for name in QUOTA_TABLES})


def collect_table(frame: DataFrame, order: list[str]) -> pd.DataFrame:
    """Collect one result, the largest (a row per group and round), through Arrow: a million rows' per-round
    table came back in 0.6 s less than as JSON rows. Its integers are made int64, as `collect_tables` makes
    them."""
    with pandas_3_accepted():
        table = frame.toPandas()
    return _typed(table, frame.schema, order)


def collect_tables(frames: Frames) -> dict[str, pd.DataFrame]:
    """Collect several small results in one Spark job: each row as JSON, tagged with its table's name, the
    tables unioned, one `collect`; then each table rebuilt with its schema's types (an integer column with
    nulls as pandas' nullable `Int64`) and sorted on the driver (a Spark orderBy would add a sampling job).

    JSON, because the tables have different columns: a union needs one schema, and one string column is the
    narrowest. Spark writes a NaN or an infinity as a quoted string (`"Infinity"`); the float columns read it
    back as the number.
    """
    tagged = [
        frame.select(F.lit(name).alias("table"), F.to_json(F.struct(*map(F.col, frame.columns))).alias("row"))
        for name, (frame, _) in frames.items()
    ]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in frames}
    for table, row in reduce(DataFrame.unionByName, tagged).collect():
        rows[table].append(json.loads(row))
    return {
        name: _typed(pd.DataFrame.from_records(rows[name], columns=frame.columns), frame.schema, order)
        for name, (frame, order) in frames.items()
    }


def _typed(table: pd.DataFrame, schema: T.StructType, order: list[str]) -> pd.DataFrame:
    for spark_field in schema:
        column = table[spark_field.name]
        kind = spark_field.dataType
        if isinstance(kind, T.IntegerType | T.LongType | T.ShortType):
            table[spark_field.name] = column.astype("Int64" if column.isna().any() else "int64")
        elif isinstance(kind, T.DoubleType | T.FloatType):
            table[spark_field.name] = column.astype("float64")
        elif isinstance(kind, T.BooleanType):
            table[spark_field.name] = column.astype("boolean" if column.isna().any() else "bool")
    return table.sort_values(order, ignore_index=True)


def collect_limits(rounds: DataFrame, shown: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Each broker's limit per round for the shown (run_id, group, dimension) triples (one Spark job)."""
    return collect_table(*limits_frame(rounds, shown))


def limits_frame(rounds: DataFrame, shown: list[tuple[str, str, str]] | None) -> tuple[DataFrame, list[str]]:
    """The frame of each broker's limit per round for the `shown` triples; None: every group."""
    spark = rounds.sparkSession
    keys = None if shown is None else spark.createDataFrame(shown, "run_id string, group string, dimension string")
    return metrics.broker_limits(rounds, keys), [*metrics.GROUP_ROUND, "broker"]


def build_summary(manifests: dict[str, dict[str, Any]], results: Results) -> dict[str, Any]:
    """`summary.json` as DESIGN.md shapes it, runs in the order given, groups by name, events by round.

    Extra keys: per run `status`, `rounds`, `reports_sent_per_round`, `reports_suppressed_per_round`,
    `deliveries_dropped` and `deliveries_lost_transport` (report copies lost to the injected faults, to the transport),
    `rounds_to_agree` (per membership event, runs with a pool-size consensus: `agreement`) and `overall` (the
    groups' scores pooled, for comparing runs); per group `rounds_over_quota` (the share of its rounds with
    U > 1.05 Q), `fairness_error`, `report_bytes_per_round`, `starved` (the share of the last quarter's
    (broker, round) pairs with a fair share where the broker got less than half of it) and the two counts it
    comes from; per event `target`.
    """
    bandwidth = results.runs.set_index("run_id")
    events_by_group = dict(list(results.convergence.groupby(metrics.GROUP, sort=False)))
    starvation = results.starvation.set_index(metrics.GROUP)
    runs = []
    for run_id, manifest in manifests.items():
        groups = [
            _group_entry(
                row,
                events_by_group.get((run_id, row.group, row.dimension)),
                starvation.loc[(run_id, row.group, row.dimension)]
                if (run_id, row.group, row.dimension) in starvation.index
                else None,
            )
            for row in results.groups[results.groups["run_id"] == run_id].itertuples()
        ]
        traffic = bandwidth.loc[run_id] if run_id in bandwidth.index else {}
        runs.append(
            {
                "run_id": run_id,
                "scenario": manifest.get("scenario_name"),
                "policy": _policy_name(manifest.get("policy")),
                "bytes_published_per_round": _number(traffic.get("bytes_published_per_round")),
                "bytes_delivered_per_round": _number(traffic.get("bytes_delivered_per_round")),
                "groups": groups,
                "status": run_status(manifest),
                "rounds": int(results.per_round.loc[results.per_round["run_id"] == run_id, "round"].nunique()),
                "reports_sent_per_round": _number(traffic.get("reports_sent_per_round")),
                "reports_suppressed_per_round": _number(traffic.get("reports_suppressed_per_round")),
                "deliveries_dropped": _number(traffic.get("deliveries_dropped")),
                "deliveries_lost_transport": _number(traffic.get("deliveries_lost_transport")),
                "overall": _overall(groups),
                "rounds_to_agree": _agreement_entries(results.agreement, run_id),
            }
        )
    return {"runs": runs}


def _agreement_entries(table: pd.DataFrame, run_id: str) -> list[dict[str, Any]]:
    """The run's membership events with the rounds its brokers took to agree on the pool size again."""
    return [
        {
            "round": int(event.round),
            "kind": event.kind,
            "target": event.target,
            "rounds": None if pd.isna(event.rounds_to_agree) else int(event.rounds_to_agree),
        }
        for event in table[table["run_id"] == run_id].itertuples()
    ]


def _group_entry(row: Any, events: pd.DataFrame | None, starvation: pd.Series | None) -> dict[str, Any]:
    fair_share, starved = (
        (0, 0)
        if starvation is None
        else (
            int(starvation["fair_share_broker_rounds"]),
            int(starvation["starved_broker_rounds"]),
        )
    )
    return {
        "group": row.group,
        "dimension": row.dimension,
        "peak_overshoot": _number(row.peak_overshoot),
        "utilization": _number(row.utilization),
        "jain": _number(row.jain),
        "events": [
            {
                "round": int(event.round),
                "kind": event.kind,
                "rounds_to_converge": None if pd.isna(event.rounds_to_converge) else int(event.rounds_to_converge),
                "target": event.target,
            }
            for event in ([] if events is None else events.itertuples())
        ],
        "rounds_over_quota": _number(row.rounds_over_quota),
        "fairness_error": _number(row.fairness_error),
        "report_bytes_per_round": _number(row.report_bytes_per_round),
        "starved": starved / fair_share if fair_share else None,
        "fair_share_broker_rounds": fair_share,
        "starved_broker_rounds": starved,
    }


def _overall(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's scores over all its groups: the worst peak overshoot, mean scores, convergence over all events.

    `rounds_over_quota` is the mean over groups of the share of rounds over quota (an unlimited group counts
    as 0: it never is); `rounds_over_quota_per_100_rounds` is the same number per 100 rounds; `starved` pools
    the groups' (broker, round) pairs.
    """
    waits = [event["rounds_to_converge"] for group in groups for event in group["events"]]
    converged = [wait for wait in waits if wait is not None]
    peaks = [group["peak_overshoot"] for group in groups if group["peak_overshoot"] is not None]
    rounds_over_quota = _mean(group["rounds_over_quota"] for group in groups)
    fair_share = sum(group["fair_share_broker_rounds"] for group in groups)
    starved = sum(group["starved_broker_rounds"] for group in groups)
    return {
        "peak_overshoot": max(peaks, default=None),
        "rounds_over_quota": rounds_over_quota,
        "rounds_over_quota_per_100_rounds": None if rounds_over_quota is None else 100 * rounds_over_quota,
        "utilization": _mean(group["utilization"] for group in groups),
        "jain": _mean(group["jain"] for group in groups),
        "fairness_error": _mean(group["fairness_error"] for group in groups),
        "mean_rounds_to_converge": _mean(converged),
        "events": len(waits),
        "events_not_converged": len(waits) - len(converged),
        "starved": starved / fair_share if fair_share else None,
        "fair_share_broker_rounds": fair_share,
        "starved_broker_rounds": starved,
    }


def _mean(values: Any) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def _number(value: Any) -> float | None:
    """A JSON-safe float: None for a missing, NaN or infinite value (JSON has no Infinity)."""
    if value is None or pd.isna(value) or not math.isfinite(value):
        return None
    return float(value)


def _policy_name(policy: Any) -> str | None:
    """The manifest's policy: a name, or the scenario's `{name, params}` mapping."""
    return policy.get("name") if isinstance(policy, dict) else policy
