"""Read run directories (`manifest.json` and the Parquet tables) into DataFrames unioned over the runs.

The columns and types are the contract in docs/architecture.md; every table is cast to it on read, so a
writer that widens a type (int64 rounds, say) still reports. `run_id` is taken from the manifest (or the
directory name, `runs/<run_id>/`), not trusted from each row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from actors.telemetry import SCHEMAS
from experiments.errors import UserError

SPARK_TYPES = {
    pa.string(): T.StringType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.float64(): T.DoubleType(),
    pa.bool_(): T.BooleanType(),
}


def spark_schema(arrow_schema: pa.Schema) -> T.StructType:
    """The Spark schema of a telemetry table, derived from the one the runtime writes (one definition)."""
    return T.StructType([T.StructField(field.name, SPARK_TYPES[field.type]) for field in arrow_schema])


ROUNDS_SCHEMA = spark_schema(SCHEMAS["rounds"])
MESSAGES_SCHEMA = spark_schema(SCHEMAS["messages"])
EVENTS_SCHEMA = spark_schema(SCHEMAS["events"])
TABLES = {"rounds": ROUNDS_SCHEMA, "messages": MESSAGES_SCHEMA, "events": EVENTS_SCHEMA}


@dataclass(frozen=True)
class Runs:
    """The telemetry of one or more runs: each table unioned over the runs, and the manifests by run_id."""

    rounds: DataFrame
    messages: DataFrame
    events: DataFrame
    manifests: dict[str, dict[str, Any]]  # in the order the run directories were given


def load_runs(spark: SparkSession, run_dirs: list[Path] | list[str]) -> Runs:
    """Read each `RUN_DIR/{manifest.json, rounds/, messages/, events/}`; a missing piece is a `UserError`.

    Each table is one Parquet scan over every run, not one scan per run unioned: a sweep reports on a hundred
    runs or more, and per-run scans (listing, planning, a union of hundreds of plans) cost seconds each.
    """
    located = read_manifests(run_dirs)
    return Runs(
        **{name: _read_table(spark, name, schema, located) for name, schema in TABLES.items()},
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


def _read_table(
    spark: SparkSession, name: str, schema: T.StructType, located: dict[str, tuple[Path, dict[str, Any]]]
) -> DataFrame:
    """Table `name` of every run, cast to `schema`, with `run_id` mapped from the directory each part file
    is in; runs without parts (no events, say) add no rows."""
    run_of_directory: dict[str, str] = {}
    for run_id, (run_dir, _) in located.items():
        parts = sorted(part for part in (run_dir / name).rglob("*.parquet") if not part.name.startswith((".", "_")))
        if not parts:
            continue
        missing = [field.name for field in schema if field.name not in pq.read_schema(parts[0]).names + ["run_id"]]
        if missing:
            raise UserError(f"{run_dir / name}: missing columns {', '.join(missing)}")
        run_of_directory[str((run_dir / name).resolve()).lstrip("/")] = run_id
    if not run_of_directory:
        return spark.createDataFrame([], schema)
    directory = F.url_decode(F.regexp_extract(F.col("_metadata.file_path"), r"^(?:file:)?/*(.*)/[^/]+$", 1))
    run_ids = F.create_map(*[F.lit(text) for pair in run_of_directory.items() for text in pair])
    return spark.read.parquet(*["/" + directory for directory in run_of_directory]).select(
        run_ids[directory].alias("run_id"),
        *[F.col(field.name).cast(field.dataType).alias(field.name) for field in schema if field.name != "run_id"],
    )
