"""Read run directories (`manifest.json` and the Parquet tables) into DataFrames unioned over the runs.

The columns and types are the contract in docs/architecture.md; every table is cast to it on read, so a
writer that widens a type (int64 rounds, say) still reports. `run_id` is taken from the manifest (or the
directory name, `runs/<run_id>/`), not trusted from each row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from experiments.cli import UserError

ROUNDS_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("round", T.IntegerType()),
        T.StructField("t_s", T.DoubleType()),
        T.StructField("broker", T.StringType()),
        T.StructField("group", T.StringType()),
        T.StructField("dimension", T.StringType()),
        T.StructField("quota", T.DoubleType()),
        T.StructField("limit", T.DoubleType()),
        T.StructField("usage", T.DoubleType()),
        T.StructField("demand", T.DoubleType()),
        T.StructField("throttled_s", T.DoubleType()),
        T.StructField("view_brokers", T.IntegerType()),
        T.StructField("reported", T.BooleanType()),
        T.StructField("report_bytes", T.DoubleType()),
        T.StructField("incarnation", T.IntegerType()),
    ]
)
MESSAGES_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("round", T.IntegerType()),
        T.StructField("t_s", T.DoubleType()),
        T.StructField("broker", T.StringType()),
        T.StructField("bytes_published", T.LongType()),
        T.StructField("bytes_delivered", T.LongType()),
        T.StructField("reports_sent", T.IntegerType()),
        T.StructField("reports_suppressed", T.IntegerType()),
        T.StructField("deliveries_dropped", T.IntegerType()),
        T.StructField("reports_rejected", T.IntegerType()),
    ]
)
EVENTS_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("round", T.IntegerType()),
        T.StructField("t_s", T.DoubleType()),
        T.StructField("kind", T.StringType()),
        T.StructField("target", T.StringType()),
        T.StructField("detail", T.StringType()),
    ]
)
TABLES = {"rounds": ROUNDS_SCHEMA, "messages": MESSAGES_SCHEMA, "events": EVENTS_SCHEMA}


@dataclass(frozen=True)
class Runs:
    """The telemetry of one or more runs: each table unioned over the runs, and the manifests by run_id."""

    rounds: DataFrame
    messages: DataFrame
    events: DataFrame
    manifests: dict[str, dict[str, Any]]  # in the order the run directories were given


def load_runs(spark: SparkSession, run_dirs: list[Path] | list[str]) -> Runs:
    """Read each `RUN_DIR/{manifest.json, rounds/, messages/, events/}`; a missing piece is a `UserError`."""
    located = read_manifests(run_dirs)
    tables = {
        name: [_read_table(spark, run_dir / name, schema, run_id) for run_id, (run_dir, _) in located.items()]
        for name, schema in TABLES.items()
    }
    return Runs(
        rounds=reduce(DataFrame.unionByName, tables["rounds"]),
        messages=reduce(DataFrame.unionByName, tables["messages"]),
        events=reduce(DataFrame.unionByName, tables["events"]),
        manifests={run_id: manifest for run_id, (_, manifest) in located.items()},
    )


def read_manifests(run_dirs: list[Path] | list[str]) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Check the run directories without Spark (a mistake fails at once, not after the JVM has started).

    Returns run_id -> (directory, manifest), in the order given.
    """
    if not run_dirs:
        raise UserError("no run directory given")
    located: dict[str, tuple[Path, dict[str, Any]]] = {}
    for run_dir in map(Path, run_dirs):
        manifest = _read_manifest(run_dir)
        run_id = str(manifest.get("run_id") or run_dir.name)
        if run_id in located:
            raise UserError(f"{run_dir}: run {run_id!r} is given twice")
        for name in TABLES:
            if not (run_dir / name).is_dir():
                raise UserError(f"{run_dir / name}: missing telemetry table")
        located[run_id] = (run_dir, manifest)
    return located


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    path = run_dir / "manifest.json"
    if not path.is_file():
        raise UserError(f"{path}: missing (is {run_dir} a run directory?)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path}: expected a JSON object")
    return manifest


def _read_table(spark: SparkSession, path: Path, schema: T.StructType, run_id: str) -> DataFrame:
    """One table of one run, cast to `schema`; a directory without parts (no events, say) is an empty table."""
    has_parts = any(part.is_file() and not part.name.startswith((".", "_")) for part in path.rglob("*"))
    if not has_parts:
        return spark.createDataFrame([], schema)
    table = spark.read.parquet(str(path))
    missing = [field.name for field in schema if field.name not in table.columns]
    if missing:
        raise UserError(f"{path}: missing columns {', '.join(missing)}")
    return table.select(
        F.lit(run_id).alias("run_id"),
        *[F.col(field.name).cast(field.dataType).alias(field.name) for field in schema if field.name != "run_id"],
    )
