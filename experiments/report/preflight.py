"""Checks of a run's Parquet files that need no Spark, so a damaged run is refused before the JVM starts.

A part whose footer pyarrow cannot read (truncated by a killed writer, overwritten, not Parquet at all) is a
`UserError` naming the file; Spark would fail on it only after starting, with a Java stack trace.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from experiments.errors import UserError


def footer(part: Path) -> pq.FileMetaData:
    """The metadata of the Parquet file `part`, or a `UserError` naming it when the footer cannot be read."""
    try:
        return pq.read_metadata(part)
    except (OSError, pa.ArrowException) as error:
        raise UserError(f"{part}: not a readable Parquet file ({' '.join(str(error).split())})") from None
