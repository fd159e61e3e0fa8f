"""Parquet telemetry written as a run goes: `rounds/`, `messages/`, `events/`, `throttles/`, `timings/` and
`producers/` parts, and `manifest.json`.

Rows are buffered and flushed as a new part file every `flush_every_rounds` rounds (or sooner, once
`flush_rows` rows are buffered: a PIP-82-sized run writes 500,000 rows a round). A flush is written by a
background thread while the run goes on (Parquet encoding releases the GIL, so it takes the other core instead
of the round's time); the next flush first waits for it, so a crash loses at most the last two batches. The
manifest is rewritten atomically (write, then rename) after each batch's parts are on disk, so its
`rounds_completed` never counts rows that are not.

Name columns (`broker`, `group`, `dimension`) may come as integer codes into the writer's `names`: Arrow
turns a batch of codes into strings at C speed, where building them as Python strings would cost more than
the round itself at that scale.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from actors.telemetry.heap import release_free_heap
from actors.telemetry.liveness import Heartbeat, driver_identity

ROUNDS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("group", pa.string()),
        ("dimension", pa.string()),
        ("quota", pa.float64()),
        ("limit", pa.float64()),
        ("usage", pa.float64()),
        ("demand", pa.float64()),
        ("throttled_s", pa.float64()),
        ("view_brokers", pa.int32()),
        ("reported", pa.bool_()),
        ("report_bytes", pa.float64()),
        ("incarnation", pa.int32()),
        # quota telemetry (actors/telemetry/quota_tracker.py; docs/telemetry.md)
        ("usage_fraction_of_limit", pa.float64()),
        ("usage_fraction_of_quota", pa.float64()),
        ("group_usage", pa.float64()),
        ("group_usage_fraction_of_quota", pa.float64()),
        ("over_quota", pa.bool_()),
        ("breach_age_s", pa.float64()),
        ("throttle_events", pa.int32()),
        ("report_age_max_s", pa.float64()),
        ("report_age_mean_s", pa.float64()),
        ("agreed_pool_size", pa.int32()),  # numaflow-equal: the pool size split by; 0 waiting; -1 no consensus
        ("pool", pa.float64()),  # what the policy split into the limits: the quota, or a ramped quota's pool
    ]
)
THROTTLES_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("group", pa.string()),
        ("reason", pa.string()),
        ("throttle_events", pa.int32()),
        ("throttled_s", pa.float64()),
    ]
)
TIMINGS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("allocate_phase_s", pa.float64()),
    ]
)
MESSAGES_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("bytes_published", pa.int64()),
        ("bytes_delivered", pa.int64()),
        ("reports_sent", pa.int32()),
        ("reports_suppressed", pa.int32()),
        ("deliveries_dropped", pa.int32()),  # copies lost to the injected faults (loss, partitions)
        ("reports_rejected", pa.int32()),
        ("deliveries_lost_transport", pa.int32()),  # copies a real transport lost (sequence gaps per sender)
    ]
)
EVENTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("kind", pa.string()),
        ("target", pa.string()),
        ("detail", pa.string()),
    ]
)
# One row per producer and round (actors.hosts.broker_producers; empty for a run without producers), docs/telemetry.md
PRODUCERS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("client", pa.string()),
        ("topic", pa.string()),
        ("group", pa.string()),
        ("mode", pa.string()),
        ("offered_msgs_per_s", pa.float64()),
        ("throughput_msgs_per_s", pa.float64()),
        ("latency_p50_ms", pa.float64()),
        ("latency_p99_ms", pa.float64()),
        ("throttled_topic_quota_s", pa.float64()),
        ("throttled_resource_group_quota_s", pa.float64()),
        ("throttled_connection_pending_messages_s", pa.float64()),
        ("throttled_buffer_size_s", pa.float64()),
        ("throttled_broker_quota_s", pa.float64()),
        ("connection_blocked_s", pa.float64()),
        ("throttle_signals", pa.int32()),
        ("fallbacks", pa.int32()),
        ("failed_throttled_msgs", pa.float64()),
        ("failed_timeout_msgs", pa.float64()),
        ("failed_queue_full_msgs", pa.float64()),
        ("pending_msgs", pa.float64()),
        ("connection_pending_max_msgs", pa.float64()),
        ("publish_buffer_max_mb", pa.float64()),
        ("incarnation", pa.int32()),
    ]
)
# One row per explained limit (round, broker, group, dimension): `BrokerNode.explain` as JSON (docs/reports.md); a
# table only runs that record decisions have (`telemetry: {decisions: true}`), so not one of SCHEMAS, which every
# run has and the report reads
DECISIONS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("round", pa.int32()),
        ("t_s", pa.float64()),
        ("broker", pa.string()),
        ("group", pa.string()),
        ("dimension", pa.string()),
        ("limit", pa.float64()),
        ("explanation", pa.string()),
    ]
)
OPTIONAL_SCHEMAS = {"decisions": DECISIONS_SCHEMA}
SCHEMAS = {
    "rounds": ROUNDS_SCHEMA,
    "messages": MESSAGES_SCHEMA,
    "events": EVENTS_SCHEMA,
    "throttles": THROTTLES_SCHEMA,
    "timings": TIMINGS_SCHEMA,
    "producers": PRODUCERS_SCHEMA,
}


class TelemetryObserver(Protocol):
    """Sees every batch of rows as the driver adds it (names as codes, as given), and the end of each round."""

    def add(self, table: str, columns: dict[str, Any]) -> None: ...

    def end_round(self, round_index: int) -> None: ...


def library_versions() -> dict[str, str]:
    """The versions of Python and of the libraries a run's numbers depend on (read from the installed
    packages' metadata: importing Ray just to ask would cost a local run most of a second)."""
    versions = {"python": platform.python_version()}
    for package in ("numpy", "pyarrow", "msgpack", "ray"):
        with contextlib.suppress(PackageNotFoundError):
            versions[package] = version(package)
    return versions


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _yield_cpu() -> None:
    """The writer thread runs at a lower CPU priority (Linux: a thread is a task with its own nice value): on
    a realtime run its parts, written every few rounds, would otherwise delay the brokers' timers."""
    if hasattr(os, "setpriority"):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


# Dictionary-encoded in Parquet: the name columns only. Trying a dictionary on every column (pyarrow's default)
# cost 0.70-0.76 s of CPU for a PIP-82-sized round (500,000 rows), names only 0.28-0.36 s, for a file no bigger.
_NAME_COLUMNS = {
    table: [field.name for field in schema if pa.types.is_string(field.type) and field.name != "explanation"]
    for table, schema in (SCHEMAS | OPTIONAL_SCHEMAS).items()
}

# Min/max statistics (what lets a reader skip a row group) only on the columns readers filter by: computing them
# on every column of a PIP-82-sized round took a fifth of the write's CPU, the group names' most of it.
_FILTERED_COLUMNS = {
    table: [name for name in ("run_id", "round", "t_s", "broker") if name in schema.names]
    for table, schema in (SCHEMAS | OPTIONAL_SCHEMAS).items()
}


class TelemetryWriter:
    """Buffers rows per table and writes them as numbered Parquet parts under `run_dir`."""

    def __init__(
        self,
        run_dir: Path,
        run_id: str,
        manifest: dict[str, Any],
        names: Mapping[str, Sequence[str]] | None = None,
        flush_every_rounds: int = 10,
        flush_rows: int = 1_000_000,
    ):
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.flush_every_rounds = flush_every_rounds
        self.flush_rows = flush_rows
        self._names = {column: pa.array(list(values), pa.string()) for column, values in (names or {}).items()}
        self._buffered_rows = 0
        self._buffers: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS | OPTIONAL_SCHEMAS}
        self._parts = dict.fromkeys(SCHEMAS | OPTIONAL_SCHEMAS, 0)
        self._rounds_since_flush = 0
        self._background = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="quotalab-telemetry", initializer=_yield_cpu
        )
        self._writing: Future[None] | None = None
        self.observers: list[TelemetryObserver] = []  # see what is written as it is (live metrics)
        self.manifest = {
            "run_id": run_id,
            **manifest,
            "versions": library_versions(),
            "started_at": _now_iso(),
            "ended_at": None,
            "status": "running",
            "rounds_completed": 0,
            "driver": driver_identity(),
            "heartbeat_at": None,
        }
        for name in SCHEMAS:  # an optional table's when it has rows (`_write_batch`)
            (self.run_dir / name).mkdir(parents=True, exist_ok=True)
        self._manifest_lock = threading.Lock()  # the batch writer and the heartbeat both rewrite the manifest
        self._written_manifest = self.manifest
        self._write_manifest(self.manifest)
        self._heartbeat = Heartbeat(lambda: self._write_manifest(self._written_manifest))

    def add(self, table: str, columns: dict[str, Any]) -> None:
        """Buffer rows given as columns (arrays or lists) without `run_id`; it is added when the batch is
        written, in the background, with the names of coded columns (a table's name column holds codes in
        every batch or names in every batch)."""
        n_rows = len(next(iter(columns.values()))) if columns else 0
        if n_rows == 0:
            return
        self._buffers[table].append(columns)
        self._buffered_rows += n_rows
        for observer in self.observers:
            observer.add(table, columns)

    def _table(self, table: str, batches: list[dict[str, Any]]) -> pa.Table:
        """The batches of one part as one table, each column built once over all of them."""
        n_rows = sum(len(next(iter(columns.values()))) for columns in batches)
        run_ids = pa.array([self.run_id], pa.string())
        arrays = {"run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n_rows, np.int32)), run_ids)}
        for field in (SCHEMAS | OPTIONAL_SCHEMAS)[table]:
            if field.name != "run_id":
                arrays[field.name] = self._column(field, [columns[field.name] for columns in batches])
        return pa.table(arrays)

    def _column(self, field: pa.Field, values: list[Any]) -> pa.Array | pa.ChunkedArray:
        """One column in the schema's type from its values in each batch (a name column: integer codes in
        every batch, or names in every batch).

        Codes become the names. With at least as many rows as names the codes stay a dictionary array, which
        Parquet writes as it is, no string copied or hashed (a PIP-82 round: 500,000 group names); with fewer,
        the names are taken, since a dictionary array is written whole (100,000 group names for a 3-row
        batch: ~0.5 MB). Parts are written without the Arrow schema (`_write_batch`), so both read back as
        plain strings."""
        names = self._names.get(field.name)
        if names is not None and all(isinstance(batch, np.ndarray) and batch.dtype.kind in "iu" for batch in values):
            codes = pa.array(np.concatenate(values), pa.int32())
            return pa.DictionaryArray.from_arrays(codes, names) if len(codes) >= len(names) else names.take(codes)
        return pa.chunked_array([pa.array(batch, field.type) for batch in values], field.type)

    def end_round(self, round_index: int, completed: int | None = None) -> None:
        """The driver's round `round_index` is over; `completed`: the rounds whose rows are all added (default:
        through this one; on timers, each broker ticks at its own phase and some of this round's ticks are to come).
        """
        self.manifest["rounds_completed"] = round_index + 1 if completed is None else completed
        for observer in self.observers:
            observer.end_round(round_index)
        self._rounds_since_flush += 1
        if self._rounds_since_flush >= self.flush_every_rounds or self._buffered_rows >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered rows to the background thread (after the previous batch is written)."""
        parts = []
        for name, batches in self._buffers.items():
            if batches:
                parts.append((name, self.run_dir / name / f"part-{self._parts[name]:05d}.parquet", batches))
                self._parts[name] += 1
                self._buffers[name] = []
        self._rounds_since_flush = 0
        self._buffered_rows = 0
        self._wait()
        self._writing = self._background.submit(self._write_batch, parts, dict(self.manifest))

    def close(self, status: str) -> None:
        """Flush what is buffered, wait until it is written, and record how the run ended: complete,
        interrupted or failed."""
        self.manifest["status"] = status
        self.manifest["ended_at"] = _now_iso()
        self._heartbeat.stop()
        self.flush()
        self._wait()
        self._background.shutdown()
        for name, schema in SCHEMAS.items():
            if self._parts[name] == 0:  # an empty table still gets a readable part with its schema
                pq.write_table(schema.empty_table(), self.run_dir / name / "part-00000.parquet")
                self._parts[name] = 1

    def _wait(self) -> None:
        """Wait for the batch being written; a failure to write it is raised here, in the driver."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def _write_batch(self, parts: list[tuple[str, Path, list[dict[str, Any]]]], manifest: dict[str, Any]) -> None:
        for name, path, batches in parts:
            path.parent.mkdir(exist_ok=True)  # an optional table's directory comes with its first part
            # Written under a hidden name (Arrow and Spark skip names starting with '.'), then renamed: a reader
            # during the run never sees a part half written, and a driver killed mid-write leaves none.
            temporary = path.with_name(f".{path.name}.tmp")
            table = self._table(name, batches)
            pq.write_table(  # pages checksummed: `quotalab report` finds a damaged page before Spark reads it
                table,
                temporary,
                use_dictionary=_NAME_COLUMNS[name],
                write_statistics=_FILTERED_COLUMNS[name],
                store_schema=False,
                write_page_checksum=True,
            )
            os.replace(temporary, path)
        self._write_manifest(manifest)
        release_free_heap()  # the batch's rows are freed now: their pages go back (actors/telemetry/heap.py)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write `manifest` (atomically: write, then rename) with a fresh `heartbeat_at`; the heartbeat thread
        rewrites the last one written, so the rounds it counts are always on disk."""
        with self._manifest_lock:
            self._written_manifest = {**manifest, "heartbeat_at": _now_iso()}
            temporary = self.run_dir / "manifest.json.tmp"
            temporary.write_text(json.dumps(self._written_manifest, indent=2, default=str))
            os.replace(temporary, self.run_dir / "manifest.json")
