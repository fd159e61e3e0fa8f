"""Hand-built telemetry for the report tests: rows with known answers, as DataFrames or as run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from actors.telemetry.quota_tracker import fraction
from actors.telemetry.writer import SCHEMAS
from experiments.report.load import EVENTS_SCHEMA, MESSAGES_SCHEMA, ROUNDS_SCHEMA


def rounds_row(
    round: int, broker: str, usage: float, demand: float, quota: float = 100.0, group: str = "g", **more: Any
) -> dict[str, Any]:
    """One `rounds` row with plausible defaults for the columns a test does not care about."""
    row = {
        "run_id": "r1",
        "round": round,
        "t_s": float(round),
        "broker": broker,
        "group": group,
        "dimension": "publish_msgs_per_s",
        "quota": float(quota),
        "limit": quota / 2,
        "usage": float(usage),
        "demand": float(demand),
        "throttled_s": 0.0,
        "view_brokers": 2,
        "reported": True,
        "report_bytes": 10.0,
        "incarnation": 1,
        "usage_fraction_of_limit": float(fraction(np.float64(usage), np.float64(quota / 2))),
        "usage_fraction_of_quota": float(fraction(np.float64(usage), np.float64(quota))),
        "group_usage": float(usage),
        "group_usage_fraction_of_quota": float(fraction(np.float64(usage), np.float64(quota))),
        "over_quota": False,
        "breach_age_s": 0.0,
        "throttle_events": 0,
        "report_age_max_s": 0.0,
        "report_age_mean_s": 0.0,
        "agreed_pool_size": -1,  # no pool-size consensus
        "pool": float(quota),
    }
    return row | more


def messages_row(round: int, broker: str, published: int, delivered: int, **more: Any) -> dict[str, Any]:
    row = {
        "run_id": "r1",
        "round": round,
        "t_s": float(round),
        "broker": broker,
        "bytes_published": published,
        "bytes_delivered": delivered,
        "reports_sent": 1,
        "reports_suppressed": 0,
        "deliveries_dropped": 0,
        "reports_rejected": 0,
        "deliveries_lost_transport": 0,
    }
    return row | more


def event_row(round: int, kind: str, target: str = "", detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "run_id": "r1",
        "round": round,
        "t_s": float(round),
        "kind": kind,
        "target": target,
        "detail": json.dumps(detail or {}),
    }


def rounds_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return _frame(spark, rows, ROUNDS_SCHEMA)


def messages_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return _frame(spark, rows, MESSAGES_SCHEMA)


def events_frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return _frame(spark, rows, EVENTS_SCHEMA)


def _frame(spark: SparkSession, rows: list[dict[str, Any]], schema: T.StructType) -> DataFrame:
    """Rows as dicts -> a DataFrame with the loader's schema (the columns `load_runs` hands to the metrics)."""
    return spark.createDataFrame([tuple(row[name] for name in schema.fieldNames()) for row in rows], schema)


def write_run(
    root: Path,
    run_id: str,
    rounds: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    events: list[dict[str, Any]],
    more_tables: dict[str, list[dict[str, Any]]] | None = None,
    **manifest: Any,
) -> Path:
    """A run directory as the runtime writes it: manifest.json and a directory of Parquet parts per table.

    Each table is split in two parts (as batches are written during a run); an empty table has no part (the
    other tables, `throttles` and `timings`, are empty unless given in `more_tables`).
    """
    run_dir = root / run_id
    given = {"rounds": rounds, "messages": messages, "events": events, **(more_tables or {})}
    for name in SCHEMAS:
        rows = given.get(name, [])
        table_dir = run_dir / name
        table_dir.mkdir(parents=True)
        rows = [row | {"run_id": run_id} for row in rows]
        half = len(rows) // 2
        for index, part in enumerate((rows[:half], rows[half:])):
            if part:
                table = pa.Table.from_pylist(part, schema=SCHEMAS[name])
                pq.write_table(table, table_dir / f"part-{index:05d}.parquet")
    manifest = {
        "run_id": run_id,
        "scenario_name": "two-brokers",
        "policy": "pip82-equal",
        "seed": 7,
        "backend": "local",
        "mode": "lockstep",
        "scenario": {"name": "two-brokers", "policy": {"name": "pip82-equal", "params": {}}},
        "versions": {"quotalab": "0.1.0"},
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:01:00Z",
        "status": "complete",
        "rounds_completed": len({row["round"] for row in rounds}),
    } | manifest
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir
