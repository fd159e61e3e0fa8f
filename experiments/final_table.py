"""The table `quotalab run` prints at the end: each group's quota, usage and final limits in the last round.

Read with Arrow, without a Python loop over the rows: the groups to show are picked among the distinct group
names (sorted), and only their rows become text. A big run (PIP-82's size: 100,000 groups, 500,000 rows a
round) shows its first `MAX_GROUPS` groups and says where the rest are, so the terminal is not flooded.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

MAX_GROUPS = 20  # groups printed; the others are counted and left in the telemetry
_COLUMNS = ["group", "dimension", "broker", "quota", "limit", "usage"]


def final_table(run_dir: Path, max_groups: int = MAX_GROUPS) -> str:
    """Per group and dimension of the last round: quota, total usage and each broker's final limit (brokers in
    the order the telemetry holds them), for the first `max_groups` groups by name; then the rounds since the
    last event."""
    rounds = ds.dataset(run_dir / "rounds", format="parquet")
    last_round = pc.max(rounds.to_table(columns=["round"]).column("round")).as_py()
    if last_round is None:
        return "(no telemetry)"
    last = rounds.to_table(columns=_COLUMNS, filter=ds.field("round") == last_round)
    groups = pc.unique(last.column("group"))
    shown_groups = groups.take(pc.sort_indices(groups)[:max_groups])
    shown = last.filter(pc.is_in(last.column("group"), value_set=shown_groups))
    shown = shown.take(pc.sort_indices(shown, sort_keys=[("group", "ascending"), ("dimension", "ascending")]))
    lines = [f"{'group':<24} {'dimension':<20} {'quota':>9} {'usage':>9}  final limits"]
    lines += _group_lines(shown)
    if len(groups) > max_groups:
        lines.append(f"... {len(groups) - max_groups:,} more groups; all in {run_dir / 'rounds'}")
    events = ds.dataset(run_dir / "events", format="parquet").to_table(columns=["round"]).column("round")
    since_event = last_round - (pc.max(events).as_py() or 0)  # no event: counted from the start
    lines.append(f"round {last_round}: {since_event} rounds since the last event")
    return "\n".join(lines)


def _group_lines(rows: pa.Table) -> list[str]:
    """One line per (group, dimension) of `rows`, which are sorted by both (a few rows: plain Python)."""
    lines = []
    for (group, dimension), items in groupby(rows.to_pylist(), key=lambda row: (row["group"], row["dimension"])):
        items = list(items)
        limits = ", ".join(f"{row['broker']}={row['limit']:.1f}" for row in items)
        usage = sum(row["usage"] for row in items)
        lines.append(f"{group:<24} {dimension:<20} {items[0]['quota']:>9.1f} {usage:>9.1f}  {limits}")
    return lines
