"""Which limit of a run to explain: the run directory read without Spark, and `--group`, `--broker`, `--round`,
`--dimension` checked against its `rounds` table (a name or round the run does not have is one line naming it).

Without a round, the round of the group's worst peak (its total usage over its quota at its highest); without a
broker, the broker whose limit was highest that round (the one that took most).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

from experiments.errors import UserError

LISTED_NAMES = 8  # names shown in an error saying which exist


@dataclass(frozen=True)
class Limit:
    """One limit of a run: broker `broker`'s limit of group `group` in `dimension` at round `round`."""

    round: int
    broker: str
    group: str
    dimension: str


@dataclass(frozen=True)
class Run:
    """A run directory: its manifest and where it is."""

    run_dir: Path
    manifest: dict[str, Any]
    _group_rows: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id", self.run_dir.name))

    @property
    def rounds_completed(self) -> int:
        return int(self.manifest.get("rounds_completed", 0))

    def group_rows(self, group: str) -> dict[str, np.ndarray]:
        """The `rounds` rows of `group`: round, broker, dimension, quota, limit, usage, demand (empty if none; read
        once: a large run's table takes seconds to scan)."""
        if group not in self._group_rows:
            columns = ["round", "broker", "dimension", "quota", "limit", "usage", "demand"]
            table = _rounds(self.run_dir).to_table(columns=columns, filter=pc.field("group") == group)
            self._group_rows[group] = {name: table.column(name).to_numpy(zero_copy_only=False) for name in columns}
        return self._group_rows[group]

    def group_names(self) -> list[str]:
        """The groups the run has (from the first part of `rounds`: every round names every group)."""
        table = _rounds(self.run_dir).head(1_000_000, columns=["group"])
        return sorted(set(table.column("group").to_pylist()))


def read_run(run_dir: Path) -> Run:
    """The run at `run_dir`; UserError when it is not one."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: missing (is {run_dir} a run directory?)") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(manifest, dict) or not (run_dir / "rounds").is_dir():
        raise UserError(f"{run_dir}: not a run directory (no manifest object or no rounds table)")
    return Run(run_dir, manifest)


def chosen_limit(run: Run, group: str, broker: str | None, round_index: int | None, dimension: str | None) -> Limit:
    """The limit `--group`, `--broker`, `--round` and `--dimension` name, the defaults filled in."""
    rows = run.group_rows(group)
    if not len(rows["round"]):
        raise UserError(f"--group {group}: run {run.run_id} has no such group (it has {_some(run.group_names())})")
    dimensions = sorted(set(rows["dimension"]))
    if dimension is None:
        dimension = dimensions[0]
    elif dimension not in dimensions:
        raise UserError(f"--dimension {dimension}: group {group} has no quota in it (it has {_some(dimensions)})")
    rows = {name: values[rows["dimension"] == dimension] for name, values in rows.items()}
    if round_index is None:
        round_index = worst_peak_round(rows)
    elif round_index not in set(rows["round"].tolist()):
        last = int(rows["round"].max())
        raise UserError(f"--round {round_index}: run {run.run_id} has rounds 0 to {last} of group {group}")
    at_round = rows["round"] == round_index
    brokers = rows["broker"][at_round]
    if broker is None:
        broker = str(brokers[int(np.argmax(rows["limit"][at_round]))])
    elif broker not in set(brokers.tolist()):
        serving = set(rows["broker"].tolist())
        if broker in serving:
            raise UserError(f"--broker {broker}: has no limit of group {group} at round {round_index} (it was down)")
        raise UserError(f"--broker {broker}: not a broker of group {group} in run {run.run_id} ({_some(serving)})")
    return Limit(int(round_index), broker, group, dimension)


def worst_peak_round(rows: dict[str, np.ndarray]) -> int:
    """The round where the group's total usage over its quota was highest (the first of equals; an unlimited
    quota counts its total usage)."""
    rounds, position = np.unique(rows["round"], return_inverse=True)
    usage = np.bincount(position, weights=rows["usage"], minlength=len(rounds))
    quota = np.zeros(len(rounds))
    np.maximum.at(quota, position, rows["quota"])
    peak = np.where(np.isfinite(quota) & (quota > 0), usage / np.where(quota > 0, quota, 1.0), usage)
    return int(rounds[int(np.argmax(peak))])


def recorded_limit(run: Run, limit: Limit) -> float:
    """The limit as the `rounds` table holds it."""
    rows = run.group_rows(limit.group)
    at = (rows["round"] == limit.round) & (rows["broker"] == limit.broker) & (rows["dimension"] == limit.dimension)
    return float(rows["limit"][at][0]) if at.any() else math.nan


def _rounds(run_dir: Path) -> ds.Dataset:
    parts = sorted(path for path in (run_dir / "rounds").glob("*.parquet") if not path.name.startswith((".", "_")))
    return ds.dataset([str(path) for path in parts], format="parquet")


def _some(names: Any) -> str:
    names = sorted(map(str, names))
    shown = ", ".join(names[:LISTED_NAMES])
    return shown + (f" and {len(names) - LISTED_NAMES} more" if len(names) > LISTED_NAMES else "")
