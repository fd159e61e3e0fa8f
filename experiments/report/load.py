"""Read run directories (`manifest.json` and the Parquet tables) into DataFrames unioned over the runs.

The columns and types are the contract in docs/architecture.md; every table is cast to it on read, so a
writer that widens a type (int64 rounds, say) still reports.

`run_id` has one source: the column the telemetry writer puts in every row. Before Spark starts, each part's
values are checked against the manifest's `run_id` (from the Parquet footer's statistics, so no data is read
unless a writer left them out), and a part that holds another run's id is refused: a run directory copied
together from two runs would otherwise report as one. The directory's name plays no part (a run directory
may be renamed).
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
from pyspark.sql.pandas.types import from_arrow_type

from actors.telemetry.writer import SCHEMAS
from experiments.errors import UserError
from experiments.report import preflight
from experiments.report.manifest import check_manifest

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


TABLES = {name: spark_schema(schema) for name, schema in SCHEMAS.items()}
ROUNDS_SCHEMA, MESSAGES_SCHEMA, EVENTS_SCHEMA = TABLES["rounds"], TABLES["messages"], TABLES["events"]


@dataclass(frozen=True)
class Runs:
    """The telemetry of one or more runs: each table unioned over the runs, and the manifests by run_id."""

    rounds: DataFrame
    messages: DataFrame
    events: DataFrame
    throttles: DataFrame  # per round, broker, group and reason that throttled it
    timings: DataFrame  # per round and broker: the allocate phase's wall-clock duration
    producers: DataFrame  # per round and producer (PIP-385; empty for runs without producers)
    manifests: dict[str, dict[str, Any]]  # in the order the run directories were given
    rounds_parts: list[Path]  # the `rounds` table's part files, every run's (`shown_limits` reads a few groups')


@dataclass(frozen=True)
class RunDirectory:
    """One checked run directory: its manifest and each table's Parquet part files."""

    path: Path
    manifest: dict[str, Any]
    parts: dict[str, list[Path]]  # table name -> part files (none for a table the run wrote nothing to)
    rows: dict[str, int]  # table name -> rows in its parts (from the footers)


def load_runs(spark: SparkSession, run_dirs: list[Path] | list[str]) -> Runs:
    """Read each `RUN_DIR/{manifest.json, rounds/, messages/, events/, throttles/, timings/, producers/}`; a
    missing piece is a `UserError`.

    Each table is one Parquet scan over every run's part files, not one scan per run unioned: a sweep reports
    on a hundred runs or more, and per-run scans (listing, planning, a union of hundreds of plans) cost seconds
    each.
    """
    return runs_of(spark, read_manifests(run_dirs))


def runs_of(spark: SparkSession, located: dict[str, RunDirectory]) -> Runs:
    """The tables of run directories already checked by `read_manifests`."""
    return Runs(
        **{
            name: _read_table(spark, schema, [run.parts[name] for run in located.values()])
            for name, schema in TABLES.items()
        },
        manifests={run_id: run.manifest for run_id, run in located.items()},
        rounds_parts=[part for run in located.values() for part in run.parts["rounds"]],
    )


def read_manifests(run_dirs: list[Path] | list[str]) -> dict[str, RunDirectory]:
    """Check the run directories without Spark (a mistake fails at once, not after the JVM has started).

    Returns run_id -> its checked directory, in the order given.
    """
    if not run_dirs:
        raise UserError("no run directory given")
    located: dict[str, RunDirectory] = {}
    checkers = {name: preflight.PartChecker(SCHEMAS[name]) for name in TABLES}  # over all runs: one scan each
    for run_dir in map(Path, run_dirs):
        manifest = _read_manifest(run_dir)
        check_manifest(run_dir, manifest)
        run_id = manifest["run_id"]
        if run_id in located:
            raise UserError(f"{run_dir}: run {run_id!r} is given twice")
        checked = {name: _checked_parts(run_dir, name, checkers[name], run_id) for name in TABLES}
        parts = {name: [part for part, _ in found] for name, found in checked.items()}
        rows = {name: sum(count for _, count in found) for name, found in checked.items()}
        located[run_id] = RunDirectory(run_dir, manifest, parts, rows)
        preflight.check_rounds_on_disk(run_dir, manifest, parts["rounds"])
    preflight.read_pages(checkers.values())
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


def _checked_parts(run_dir: Path, name: str, checker: preflight.PartChecker, run_id: str) -> list[tuple[Path, int]]:
    """The part files of table `name` with their row counts, each checked to have the table's columns and only
    `run_id` in its rows."""
    table_dir = run_dir / name
    if not table_dir.is_dir():
        raise UserError(f"{table_dir}: missing telemetry table")
    parts = sorted(part for part in table_dir.glob("*.parquet") if not part.name.startswith((".", "_")))
    counted = []
    for part in parts:
        metadata = checker.check(part)
        counted.append((part, metadata.num_rows))
        names = metadata.schema.to_arrow_schema().names
        missing = [field.name for field in checker.schema if field.name not in names]
        if missing:
            raise UserError(f"{part}: missing columns {', '.join(missing)}")
        others = _run_ids(part, metadata, names.index("run_id")) - {run_id}
        if others:
            held = ", ".join(sorted(map(repr, others)))
            raise UserError(f"{run_dir}: {name}/{part.name} holds run_id {held}, not the manifest's {run_id!r}")
    return counted


def _run_ids(part: Path, metadata: pq.FileMetaData, column: int) -> set[str | None]:
    """The run_id values of one part: its row groups' min and max when every one has them and no null (the
    footer alone), else the column read and deduplicated."""
    values: set[str | None] = set()
    for index in range(metadata.num_row_groups):
        statistics = metadata.row_group(index).column(column).statistics
        if statistics is None or not statistics.has_min_max or statistics.null_count != 0:
            return set(preflight.read_column(part, "run_id").unique().to_pylist())
        values |= {statistics.min, statistics.max}
    return values


def _read_table(spark: SparkSession, schema: T.StructType, parts_per_run: list[list[Path]]) -> DataFrame:
    """One table of every run, from the part files already checked, cast to `schema`; runs without parts (no
    events, say) add no rows.

    Spark is told the columns' types as stored (the first part's footer: `preflight.PartChecker` has checked
    that every part stores a column alike), so it infers nothing: inferring a Parquet schema is a Spark job per
    table, a second or more of a small report."""
    parts = [str(part.resolve()) for parts in parts_per_run for part in parts]
    if not parts:
        return spark.createDataFrame([], schema)
    stored = pq.read_schema(parts[0])
    as_stored = T.StructType([T.StructField(f.name, from_arrow_type(stored.field(f.name).type)) for f in schema])
    return (
        spark.read.schema(as_stored)
        .parquet(*parts)
        .select(*[F.col(field.name).cast(field.dataType).alias(field.name) for field in schema])
    )
