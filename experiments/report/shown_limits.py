"""Each broker's limit per round for the groups the page details (`groups.shown_groups`), read on the driver
from the runs' `rounds` parts with pyarrow.

They are a few groups' rows: the worst 8 of a PIP-82-sized run are 600 of its 7.5 million. A Spark job found them
by reading every row again (its scan and join: 3.6 s of task CPU and 11 stages, the longest of the report's
collects). The driver has read those parts already (the report's checks decode every page before Spark starts:
`load.read_manifests`, so they are on a path it reads, on a cluster too); pyarrow decodes the few columns
needed, in its own threads, and keeps a group's rows as it reads them: about 1 s of CPU.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments.report import metrics, preflight

COLUMNS = [*metrics.GROUP_ROUND, "broker", "limit"]
TYPES = {"round": "int64", "limit": "float64"}  # as the report's loader casts them (a writer may store int64 rounds)


def shown_limits(parts: list[Path], shown: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, group, dimension) key of `shown`, round and broker: the broker's `limit` (its rows in a round
    summed, as the report sums a broker's duplicated rows), sorted by key, round and broker."""
    keys = shown[metrics.GROUP].drop_duplicates()
    names = pc.field("group").isin(sorted(set(keys["group"])))

    def read(part: Path) -> pd.DataFrame:
        return pq.read_table(part, columns=COLUMNS, filters=names).to_pandas()

    with ThreadPoolExecutor(preflight.PAGE_THREADS) as pool:
        read_parts = list(pool.map(read, parts if len(keys) else []))
    if not read_parts:
        return pd.DataFrame({name: pd.Series(dtype=TYPES.get(name, "str")) for name in COLUMNS})
    rows = pd.concat(read_parts, ignore_index=True).merge(keys, on=metrics.GROUP)
    limits = rows.groupby([*metrics.GROUP_ROUND, "broker"], as_index=False, sort=True)["limit"].sum()
    return limits.astype(TYPES)
