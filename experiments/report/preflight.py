"""Checks of a run's Parquet files that need no Spark, so a damaged run is refused before the JVM starts.

Spark reads a part only once a job runs, and a part it cannot read fails that job with hundreds of lines of Java
stack. So every part is read here first, with pyarrow, all of it:

- `PartChecker.check`: the footer (a file truncated by a killed writer, overwritten, not Parquet at all) and the
  type of each column the report reads (a `round` stored as strings; the same type in every part of a table);
- `read_pages`: then every page of the checked parts decoded, in batches (bounded memory), with the pages'
  checksums verified where the writer wrote them (the telemetry writer does);
- `check_rounds_on_disk`: a run whose `rounds` table holds fewer rounds than its manifest says completed (parts
  deleted or lost) is refused, not reported as a shorter run with empty metrics.

Each problem is one `UserError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments.errors import UserError

BATCH_ROWS = 65_536  # rows decoded at a time: a part of a PIP-82-sized run holds a million
PAGE_THREADS = 4  # parts decoded at a time (`read_pages`)


def footer(part: Path) -> pq.FileMetaData:
    """The metadata of the Parquet file `part`, or a `UserError` naming it when the footer cannot be read."""
    try:
        return pq.read_metadata(part)
    except (OSError, pa.ArrowException) as error:
        raise UserError(f"{part}: not a readable Parquet file ({_one_line(error)})") from None


class PartChecker:
    """Checks the parts of one table over every run a report reads (`check`), and remembers how each column was
    stored: Spark scans a table's parts as one, so a column stored as int64 in one part and int32 in another
    fails its scan even though either alone reads."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._stored: dict[str, tuple[pa.DataType, Path]] = {}  # column -> its type and the first part it was in
        self.checked: list[tuple[Path, list[str]]] = []  # each part checked, and its columns to read (`read_pages`)

    def check(self, part: Path) -> pq.FileMetaData:
        """The metadata of `part` once its footer and the types of the schema's columns it holds have been read; a
        `UserError` naming the file otherwise. A column the schema has and the part lacks is the caller's to name.
        Its pages are read later, with every other part's (`read_pages`)."""
        metadata = footer(part)
        held = metadata.schema.to_arrow_schema()
        columns = [field for field in self.schema if field.name in held.names]
        for field in columns:
            stored = held.field(field.name).type
            if not _compatible(stored, field.type):
                raise UserError(f"{part}: column {field.name} is stored as {stored}, not {field.type}")
            first_type, first_part = self._stored.setdefault(field.name, (stored, part))
            if stored != first_type:
                raise UserError(
                    f"{part}: column {field.name} is stored as {stored}, but as {first_type} in {first_part}"
                )
        self.checked.append((part, [field.name for field in columns]))
        return metadata


def read_pages(checkers: Iterable[PartChecker]) -> None:
    """Every page of the parts `checkers` checked, decoded in batches (bounded memory), the pages' checksums
    verified where the writer wrote them (the telemetry writer does); a `UserError` naming the first damaged part
    (in the order they were checked) otherwise.

    Parts are read `PAGE_THREADS` at a time: pyarrow decodes without holding the interpreter, and a PIP-82-sized
    run's parts took 3.3 s one after the other, before Spark could start."""
    parts = [checked for checker in checkers for checked in checker.checked]
    with ThreadPoolExecutor(PAGE_THREADS) as pool:
        for damage in pool.map(_damage, parts):  # in order: the first damaged part is the one named
            if damage is not None:
                raise damage


def read_column(part: Path, name: str) -> pa.ChunkedArray:
    """Column `name` of `part`, whole (where a footer lacks the statistics that would answer); a `UserError` naming
    the part when its pages do not decode (read before `read_pages` has read them)."""
    try:
        return pq.read_table(part, columns=[name]).column(name)
    except (OSError, pa.ArrowException) as error:
        raise _damaged(part, error) from None


def _damaged(part: Path, error: BaseException) -> UserError:
    return UserError(f"{part}: damaged Parquet data ({_one_line(error)})")


def _damage(checked: tuple[Path, list[str]]) -> UserError | None:
    """The `UserError` of a part whose pages do not all decode, None when they do."""
    part, columns = checked
    try:
        parquet = pq.ParquetFile(part, page_checksum_verification=True)
        for _ in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            pass
    except (OSError, pa.ArrowException) as error:
        return _damaged(part, error)
    return None


def _compatible(stored: pa.DataType, wanted: pa.DataType) -> bool:
    """A stored type the report casts to `wanted` without loss of meaning: the same, or the same kind of number
    wider or narrower (an int64 `round`)."""
    if stored == wanted:
        return True
    return any(kind(stored) and kind(wanted) for kind in (pa.types.is_integer, pa.types.is_floating))


def check_rounds_on_disk(run_dir: Path, manifest: dict[str, Any], parts: list[Path]) -> None:
    """Refuse a run whose `rounds` parts (already checked) end before the round its manifest says it completed.

    The telemetry writer counts a round as completed only once its rows are on disk, so rows that end sooner
    were lost after the run (parts deleted, a partial copy). The last round of each part comes from its footer's
    statistics (the `round` column is read only where a writer left them out)."""
    completed = manifest.get("rounds_completed")
    if not isinstance(completed, int) or isinstance(completed, bool) or completed <= 0:
        return
    last = max((_last_round(part) for part in parts), default=None)
    if last is None:
        raise UserError(
            f"{run_dir}: rounds/ holds no rows, but manifest.json says {completed} rounds completed (parts lost?)"
        )
    if last + 1 < completed:
        raise UserError(
            f"{run_dir}: rounds/ holds rounds up to {last} only, but manifest.json says {completed} rounds"
            " completed (parts lost?)"
        )


def _last_round(part: Path) -> int | None:
    """The highest `round` in `part`, or None for a part without rows."""
    metadata = pq.read_metadata(part)
    column = metadata.schema.to_arrow_schema().get_field_index("round")
    highest = None
    for index in range(metadata.num_row_groups):
        row_group = metadata.row_group(index)
        if row_group.num_rows == 0:
            continue
        statistics = row_group.column(column).statistics
        if statistics is None or not statistics.has_min_max:
            return pc.max(read_column(part, "round")).as_py()
        highest = statistics.max if highest is None else max(highest, statistics.max)
    return highest


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
