"""What comes back to the driver (small tables only), the full tables written as Parquet by Spark, and
`summary.json` built from what came back.

The raw tables stay in Spark. The per-round and per-group tables are written by Spark next to the page
(`TABLES_DIR`); the driver receives each run's scores over all its groups, the distributions over its groups,
per-(run, round) and per-event aggregates, and the rows of the groups the page details (`groups.shown_groups`:
all of a small run's, the worst few of a large one's), with each broker's limit for those.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from actors.telemetry.liveness import run_status
from experiments.report import agreement, groups, metrics, quota_section, shown_limits
from experiments.report.load import Runs
from experiments.report.quota_section import QuotaTelemetry

TABLES_DIR = "tables"  # under the report's directory: the full tables, as Parquet (a directory of parts each)
PARQUET_TABLES = ("per_round", "groups", "convergence", "quota_telemetry", "throttled_by_reason")
PER_ROUND_COLUMNS = [
    *metrics.GROUP_ROUND, "t_s", "brokers", "quota", "usage", "demand", "target", "limit", "overshoot",
    "over_quota", "utilization", "jain", "fairness_error", "throttled_s", "report_bytes", "fair_share_brokers",
    "starved_brokers",
]  # fmt: skip


@dataclass(frozen=True)
class Results:
    """The collected tables (pandas), with the columns of the Spark transforms that made them. The per-group
    ones hold the shown groups only (`groups.shown_groups`): every group of a small run."""

    per_round: pd.DataFrame  # metrics.group_rounds, the shown groups
    groups: pd.DataFrame  # groups.group_table with `rank` and `run_groups`, the shown groups
    convergence: pd.DataFrame  # metrics.convergence, the shown groups
    limits: pd.DataFrame  # each broker's limit per round, the shown groups
    scores: pd.DataFrame  # groups.run_scores: per run, over all its groups
    distributions: pd.DataFrame  # groups.distributions
    run_rounds: pd.DataFrame  # groups.run_rounds
    event_convergence: pd.DataFrame  # groups.event_convergence
    bandwidth: pd.DataFrame  # metrics.bandwidth_per_round
    per_broker: pd.DataFrame  # metrics.bandwidth_per_broker
    runs: pd.DataFrame  # metrics.run_bandwidth
    quota: QuotaTelemetry  # quota_section: the PIP-323-style telemetry's aggregates, the shown groups
    agreement: pd.DataFrame  # agreement.rounds_to_agree (empty without a pool-size consensus)
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # the runs' events table as logged
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)  # the `extra` frames asked of collect_results

    def every_group_shown(self) -> bool:
        """Whether the per-group tables hold every group of every run (then they are small: CSV too)."""
        return len(self.groups) == int(self.scores["group_rows"].sum())


Frames = Mapping[str, tuple[DataFrame, list[str]]]  # name -> (a small result, the columns to sort it by)
COLLECT_THREADS = 3  # the small results' queries in flight at a time (`collect_tables`)


def collect_results(
    runs: Runs,
    tables_dir: Path,
    extra: Frames | None = None,
    progress: Callable[[str], None] | None = None,
    partitions: int | None = None,
) -> Results:
    """Run the metric jobs: the full tables written to `tables_dir` as Parquet by Spark (`PARQUET_TABLES`) by
    a second thread, while this one collects the small results (`collect_tables`): the scores, the
    distributions and the details of the groups the page shows, selected in Spark (`groups.shown_groups`).

    The one aggregation of the `rounds` rows (`metrics.round_cells`, with the quota telemetry's) runs first, and
    its per-round table stays cached for the rest; the per-event and per-group tables are cached too (the
    page's selection and the scores read them again). What needs none of them (the `throttles` rows by reason,
    the bandwidth, the events, the `extra` frames: figures' tables of the raw rows) runs alongside it.
    `partitions`: how many the `rounds` rows are shuffled into (`metrics.round_cells`).
    """
    say = progress or (lambda text: None)
    cells = metrics.round_cells(runs.rounds, quota_section.round_aggregates(), partitions)
    per_round = metrics.group_rounds(cells, keep=quota_section.ROUND_COLUMNS).persist()
    by_reason = quota_section.throttled_by_reason(runs.throttles).persist()  # the shown groups' read it again
    cached = [per_round, by_reason]
    per_bandwidth_round = metrics.bandwidth_per_round(runs.messages)
    per_broker = metrics.bandwidth_per_broker(runs.messages)
    # The tables of the raw rows alone, in flight while the per-round table is computed: Spark runs a job's tasks
    # in the order the jobs came, so these take only the cores the per-round stage leaves idle (its last tasks,
    # the driver's planning between its stages), and their own fixed costs (planning, small stages) are spent
    # there rather than after it.
    early_frames: dict[str, tuple[DataFrame, list[str]]] = {
        "agreement": (agreement.agreement_per_round(runs.rounds), ["run_id", "round"]),
        "quota.throttled_per_round": (quota_section.throttled_rounds(runs.throttles), ["run_id", "reason", "round"]),
        "bandwidth": (per_bandwidth_round, ["run_id", "round"]),
        "per_broker": (per_broker, ["run_id", "broker"]),
        "runs": (metrics.run_bandwidth(per_bandwidth_round), ["run_id"]),
        "events": (runs.events, ["run_id", "round", "kind"]),
        "quota.timings": (quota_section.allocate_timings(runs.timings), ["run_id"]),
        **(extra or {}),
    }
    # Written by a second thread while this one runs the per-round table and then the collects: two Spark jobs
    # at a time keep both cores busy through each other's single-task stages and the driver's planning (one
    # after the other, the cores waited on the driver between each of the two dozen small jobs).
    writer = ThreadPoolExecutor(max_workers=1)
    early = ThreadPoolExecutor(max_workers=1)
    details = ThreadPoolExecutor(max_workers=1)
    try:
        written = [writer.submit(_write_each, {"throttled_by_reason": by_reason}, tables_dir)]
        early_tables = early.submit(collect_tables, early_frames)
        say("the per-round table (the water-filling over every round of every group)")
        computed = details.submit(_compute, per_round, "the per-round table")  # cached: the jobs that follow read it
        # Planned while it is computed: a cached table's plan is built as it is persisted, the driver's work (2 s
        # of one core at PIP-82's size, which the cores otherwise waited for between the per-round table and its
        # readers).
        convergence = metrics.convergence(per_round, runs.events).persist()
        by_group = groups.group_table(per_round, convergence, quota_section.group_aggregates()).persist()
        cached += [convergence, by_group]
        telemetry = [name for name in by_group.columns if name not in groups.GROUP_TABLE]  # group_aggregates'
        # In the order they are written: first the two most of the collects wait for (cached as they are
        # written), then the others.
        full_tables = {
            "convergence": convergence,
            "groups": by_group.select(*groups.GROUP_TABLE),
            "quota_telemetry": by_group.select(*metrics.GROUP, *telemetry),
            "per_round": per_round.select(*PER_ROUND_COLUMNS),
        }
        # The page's selection stays in Spark: its keys join the cached tables in the details' queries, in
        # flight with the scores' (a collect of the keys first, then of the details, cost a round of jobs).
        # Cached: six of the collect's tables join it, and each would rank every group again.
        shown = groups.shown_groups(by_group).persist()
        cached.append(shown)
        keys = F.broadcast(shown.select(*metrics.GROUP))
        named = keys.select("run_id", "group").distinct()
        shown_rounds = per_round.join(keys, on=metrics.GROUP)
        # The shown groups' rows (`quota.groups` too) are collected by a thread of their own, then their brokers'
        # limits read (`shown_limits`); the rest in the order they are collected (`collect_tables`): first the one
        # that needs neither the convergence nor the group table, which the writing thread is still computing.
        shown_rows = {"groups": (by_group.join(F.broadcast(shown), on=metrics.GROUP), metrics.GROUP)}
        frames: dict[str, tuple[DataFrame, list[str]]] = {
            "run_rounds": (groups.run_rounds(per_round), ["run_id", "round"]),
            "scores": (groups.run_scores(by_group, per_broker), ["run_id"]),
            "distributions": (groups.distributions(by_group, convergence), ["run_id", "measure"]),
            "per_round": (shown_rounds.select(*PER_ROUND_COLUMNS, *quota_section.AGE_COLUMNS), metrics.GROUP_ROUND),
            "convergence": (convergence.join(keys, on=metrics.GROUP), [*metrics.GROUP_ROUND, "kind"]),
            "event_convergence": (groups.event_convergence(convergence), ["run_id", "round", "kind"]),
            "quota.reasons": (by_reason.join(named, on=["run_id", "group"]), ["run_id", "group", "reason"]),
        }
        computed.result()
        say("the full tables, and the scores, the distributions and the shown groups' details")
        written.append(writer.submit(_write_each, full_tables, tables_dir))
        detailed = details.submit(_with_limits, shown_rows, runs)
        tables = {**collect_tables(frames), **early_tables.result(), **detailed.result()}
        for each in written:
            each.result()
    finally:
        for pool in (early, details, writer):
            pool.shutdown(wait=True)  # a failed collect still waits for the others before unpersisting
        for frame in cached:
            frame.unpersist()
    shown_groups = tables["groups"]  # with the quota telemetry's columns, its table of the shown groups
    return Results(
        per_round=tables["per_round"][PER_ROUND_COLUMNS],
        groups=shown_groups.drop(columns=telemetry),
        convergence=tables["convergence"],
        limits=tables["limits"],
        scores=tables["scores"],
        distributions=tables["distributions"],
        run_rounds=tables["run_rounds"],
        event_convergence=tables["event_convergence"],
        bandwidth=tables["bandwidth"],
        per_broker=tables["per_broker"],
        runs=tables["runs"],
        quota=QuotaTelemetry(
            groups=shown_groups[[*metrics.GROUP, *telemetry]],
            per_round=quota_section.group_rounds(tables["per_round"]),
            **{name: tables[f"quota.{name}"] for name in QUOTA_TABLES},
        ),
        agreement=agreement.rounds_to_agree(tables["agreement"], tables["events"]),
        events=tables["events"],
        extra={name: tables[name] for name in extra or {}},
    )


def _compute(frame: DataFrame, description: str) -> None:
    """`frame` computed (and so cached, when it is persisted), its job described as `description`."""
    frame.sparkSession.sparkContext.setJobDescription(description)
    frame.count()


def _with_limits(frames: Frames, runs: Runs) -> dict[str, pd.DataFrame]:
    """The shown groups' `frames` collected, and `limits`, their brokers' limits per round (`shown_limits`)."""
    tables = collect_tables(frames)
    return {**tables, "limits": shown_limits.shown_limits(runs.rounds_parts, tables["groups"])}


QUOTA_TABLES = ("reasons", "throttled_per_round", "timings")  # and `groups` and `per_round`, of the shown groups' rows


def _write_each(frames: Mapping[str, DataFrame], tables_dir: Path) -> None:
    """Each frame written as `tables_dir`/name.parquet (`_write`), one after the other."""
    for name, frame in frames.items():
        frame.sparkSession.sparkContext.setJobDescription(f"write {name}")
        _write(frame, tables_dir / name)


def _write(frame: DataFrame, path: Path) -> None:
    """`frame` as Parquet at `path`.parquet (a directory of parts), by Spark's executors: an absolute path, which
    on a cluster must be one every executor can write (a shared directory)."""
    frame.write.mode("overwrite").parquet(str(path.resolve()) + ".parquet")


def collect_tables(frames: Frames) -> dict[str, pd.DataFrame]:
    """Collect several small results, `COLLECT_THREADS` Spark jobs at a time: each row as JSON, one `collect`
    per table; then each table rebuilt with its schema's types (an integer column with nulls as pandas' nullable
    `Int64`) and sorted on the driver (a Spark orderBy would add a sampling job).

    One query per table, several at a time, not one query of them all unioned: Spark analyses, optimises and
    (adaptively) re-plans a query as a whole, after each of its stages, and a union of two dozen tables made
    each of its forty stages re-plan them all (a demo's report waited 10 s for the union's analysis and 13 s for
    its collect of 2,700 rows' aggregates). Queries in flight together keep both cores busy through each other's
    planning and single-task stages.

    JSON, because it keeps every column's value as Spark printed it: Spark writes a NaN or an infinity as a
    quoted string (`"Infinity"`); the float columns read it back as the number.
    """

    def collected(name: str, frame: DataFrame) -> list[dict[str, Any]]:
        frame.sparkSession.sparkContext.setJobDescription(f"collect {name}")  # this thread's jobs, named in Spark's UI
        as_json = frame.select(F.to_json(F.struct(*map(F.col, frame.columns))).alias("row"))
        return [json.loads(row) for (row,) in as_json.collect()]

    with ThreadPoolExecutor(max_workers=COLLECT_THREADS) as pool:
        rows = dict(zip(frames, pool.map(collected, frames, [frame for frame, _ in frames.values()]), strict=True))
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


def build_summary(manifests: dict[str, dict[str, Any]], results: Results) -> dict[str, Any]:
    """`summary.json` as DESIGN.md shapes it, runs in the order given, events by round.

    Extra keys: per run `status`, `rounds`, `reports_sent_per_round`, `reports_suppressed_per_round`,
    `deliveries_dropped` and `deliveries_lost_transport` (report copies lost to the injected faults, to the transport),
    `rounds_to_agree` (per membership event, runs with a pool-size consensus: `agreement`), `overall` (the
    groups' scores pooled over all of them, for comparing runs), `groups_total`, `group_rows` (a row per group
    and quota dimension) and `brokers` (how many),
    `groups_listed` (`all`, by name, or `worst N by peak overshoot`, worst first: `groups` holds those),
    `distributions` (per measure, its values at `quantiles` over the groups, `count` and `missing`) and
    `tables` (the full tables' Parquet directories, relative to the report); per group `rounds_over_quota` (the
    share of its rounds with U > 1.05 Q), `fairness_error`, `report_bytes_per_round`, `starved` (the share of the
    last quarter's (broker, round) pairs with a fair share where the broker got less than half of it) and the
    two counts it comes from; per event `target`.
    """
    bandwidth = results.runs.set_index("run_id")
    scores = results.scores.set_index("run_id")
    events_by_group = dict(list(results.convergence.groupby(metrics.GROUP, sort=False)))
    rounds = results.run_rounds.groupby("run_id")["round"].nunique()
    runs = []
    for run_id, manifest in manifests.items():
        shown = results.groups[results.groups["run_id"] == run_id]
        score = scores.loc[run_id] if run_id in scores.index else NO_GROUPS
        listed_all = len(shown) == score["group_rows"]
        if not listed_all:
            shown = shown.sort_values("rank")
        groups_entries = [
            _group_entry(row, events_by_group.get((run_id, row.group, row.dimension))) for row in shown.itertuples()
        ]
        traffic = bandwidth.loc[run_id] if run_id in bandwidth.index else {}
        runs.append(
            {
                "run_id": run_id,
                "scenario": manifest.get("scenario_name"),
                "policy": _policy_name(manifest.get("policy")),
                "bytes_published_per_round": _number(traffic.get("bytes_published_per_round")),
                "bytes_delivered_per_round": _number(traffic.get("bytes_delivered_per_round")),
                "groups": groups_entries,
                "status": run_status(manifest),
                "rounds": int(rounds.get(run_id, 0)),
                "reports_sent_per_round": _number(traffic.get("reports_sent_per_round")),
                "reports_suppressed_per_round": _number(traffic.get("reports_suppressed_per_round")),
                "deliveries_dropped": _number(traffic.get("deliveries_dropped")),
                "deliveries_lost_transport": _number(traffic.get("deliveries_lost_transport")),
                "overall": _overall(score),
                "rounds_to_agree": _agreement_entries(results.agreement, run_id),
                "groups_total": int(score["groups"]),
                "group_rows": int(score["group_rows"]),
                "brokers": int(score["brokers"]) if pd.notna(score["brokers"]) else 0,
                "groups_listed": "all" if listed_all else f"worst {len(shown)} by peak overshoot",
                "distributions": _distributions(results.distributions, run_id),
                "tables": {name: f"{TABLES_DIR}/{name}.parquet" for name in PARQUET_TABLES},
            }
        )
    return {"runs": runs}


NO_GROUPS = pd.Series(
    {"peak_overshoot": None, "rounds_over_quota": None, "utilization": None, "jain": None, "fairness_error": None,
     "mean_rounds_to_converge": None, "events": 0, "events_not_converged": 0, "fair_share_broker_rounds": 0,
     "starved_broker_rounds": 0, "groups": 0, "group_rows": 0, "brokers": 0},
)  # fmt: skip  # the scores of a run without a `rounds` row


def _distributions(table: pd.DataFrame, run_id: str) -> dict[str, Any]:
    return {
        row.measure: {
            "quantiles": [_number(value) for value in row.quantiles] if isinstance(row.quantiles, list) else [],
            "count": int(row.count),
            "missing": int(row.missing),
        }
        for row in table[table["run_id"] == run_id].itertuples()
    }


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


def _group_entry(row: Any, events: pd.DataFrame | None) -> dict[str, Any]:
    fair_share, starved = int(row.fair_share_broker_rounds), int(row.starved_broker_rounds)
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


def _overall(score: pd.Series) -> dict[str, Any]:
    """A run's scores over all its groups (`groups.run_scores`): the worst peak overshoot, mean scores,
    convergence over all events.

    `rounds_over_quota` is the mean over groups of the share of rounds over quota (an unlimited group counts
    as 0: it never is); `rounds_over_quota_per_100_rounds` is the same number per 100 rounds; `starved` pools
    the groups' (broker, round) pairs.
    """
    rounds_over_quota = _number(score["rounds_over_quota"])
    fair_share, starved = int(score["fair_share_broker_rounds"]), int(score["starved_broker_rounds"])
    return {
        "peak_overshoot": _number(score["peak_overshoot"]),
        "rounds_over_quota": rounds_over_quota,
        "rounds_over_quota_per_100_rounds": None if rounds_over_quota is None else 100 * rounds_over_quota,
        "utilization": _number(score["utilization"]),
        "jain": _number(score["jain"]),
        "fairness_error": _number(score["fairness_error"]),
        "mean_rounds_to_converge": _number(score["mean_rounds_to_converge"]),
        "events": int(score["events"]),
        "events_not_converged": int(score["events_not_converged"]),
        "starved": starved / fair_share if fair_share else None,
        "fair_share_broker_rounds": fair_share,
        "starved_broker_rounds": starved,
    }


def _number(value: Any) -> float | None:
    """A JSON-safe float: None for a missing, NaN or infinite value (JSON has no Infinity)."""
    if value is None or pd.isna(value) or not math.isfinite(value):
        return None
    return float(value)


def _policy_name(policy: Any) -> str | None:
    """The manifest's policy: a name, or the scenario's `{name, params}` mapping."""
    return policy.get("name") if isinstance(policy, dict) else policy
