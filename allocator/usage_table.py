"""The usage map `group -> broker -> entry`, held as dense arrays, with every cleanup rule of PIP-82.

Rows are the groups this broker serves (local indices 0..G-1, looked up from global group ids); columns
are the brokers heard of so far, column 0 being this broker itself. An entry is (usage, demand, refreshed
at, sequence number) per quota dimension. Reports for groups this broker does not serve are ignored: a
broker only needs the entries of the groups it shares (PIP-82's memory estimate counts exactly those).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from allocator.codec import UsageReport

OWN = 0  # column of the broker that holds the table


class Merge(Enum):
    """What became of one report."""

    ACCEPTED = "accepted"
    TOO_OLD = "too_old"  # published more than max_report_age_s ago (by the publisher's clock)
    OLD_INCARNATION = "old_incarnation"  # from an incarnation older than one already seen
    DUPLICATE = "duplicate"  # no entry had a lower sequence number: a duplicate or a stale reordering


@dataclass(frozen=True)
class CleanupRules:
    stale_after_s: float  # an entry not refreshed for this long expires
    max_report_age_s: float  # a report published longer ago than this is dropped


class UsageTable:
    """One broker's view of every broker's usage for the groups it serves."""

    def __init__(self, own_broker: str, group_ids: np.ndarray, n_dimensions: int, rules: CleanupRules):
        self.own_broker = own_broker
        self.rules = rules
        self.group_ids = np.asarray(group_ids, dtype=np.int64)
        self._order = np.argsort(self.group_ids)
        self._sorted_ids = self.group_ids[self._order]
        self._lookup = _dense_lookup(self.group_ids)
        self.brokers: list[str] = []
        self._column: dict[str, int] = {}
        self._incarnation = np.zeros(0, dtype=np.int64)
        n_groups = len(self.group_ids)
        self.usage = np.zeros((n_groups, 0, n_dimensions))
        self.demand = np.zeros((n_groups, 0, n_dimensions))
        self.present = np.zeros((n_groups, 0), dtype=bool)
        self.demand_known = np.zeros((n_groups, 0), dtype=bool)
        self._refreshed_s = np.zeros((n_groups, 0))
        self._seq = np.full((n_groups, 0), -1, dtype=np.int64)
        self._column_of(own_broker)

    def __repr__(self) -> str:
        return (
            f"UsageTable(own={self.own_broker!r}, groups={len(self.group_ids)}, brokers={len(self.brokers)}, "
            f"entries={int(self.present.sum())})"
        )

    @property
    def n_brokers(self) -> int:
        return len(self.brokers)

    def local_rows(self, group_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local row of each global group id, and the mask of the ids this table holds."""
        if not len(self._sorted_ids):  # a table of no groups holds none of them (and has no row to index)
            return np.zeros(len(group_ids), dtype=np.int64), np.zeros(len(group_ids), dtype=bool)
        ids = np.asarray(group_ids)
        if self._lookup is not None and ids.dtype.kind in "iu":
            # Direct lookup: a binary search of thousands of ids in random order costs ~100x more.
            inside = (ids >= 0) & (ids < len(self._lookup))
            rows = self._lookup[np.where(inside, ids, 0)]
            known = inside & (rows >= 0)
            return np.where(known, rows, 0), known
        positions = np.searchsorted(self._sorted_ids, group_ids)
        positions = np.clip(positions, 0, len(self._sorted_ids) - 1)
        known = self._sorted_ids[positions] == group_ids
        return self._order[positions], known

    def set_own(self, usage: np.ndarray, demand: np.ndarray, serving: np.ndarray, now_s: float) -> None:
        """This broker's own entries: measured, never stale, present while it serves the group."""
        self.usage[:, OWN] = usage
        self.demand[:, OWN] = demand
        self.present[:, OWN] = serving
        self.demand_known[:, OWN] = serving
        self._refreshed_s[:, OWN] = now_s

    def merge(self, report: UsageReport, now_s: float) -> Merge:
        """Apply a decoded report: newer entries replace older ones; a row of zeros removes the entry.

        Sequence numbers are checked per entry, not per report, so a broker may split one round's report
        over several shards (all with that round's number) and a late copy never overwrites fresher data.
        """
        if report.sent_at_ms / 1000.0 < now_s - self.rules.max_report_age_s:
            return Merge.TOO_OLD
        column = self._column_of(report.broker)
        if report.incarnation < self._incarnation[column]:
            return Merge.OLD_INCARNATION
        if report.incarnation > self._incarnation[column]:
            self._clear_column(column)  # a restarted broker: what its old incarnation said is void
            self._incarnation[column] = report.incarnation
        rows, known = self.local_rows(report.group_ids)
        rows = rows[known]
        newer = report.seq > self._seq[rows, column]
        if not newer.any():
            return Merge.DUPLICATE
        rows = rows[newer]
        usage = report.usage[known][newer]
        stopped = ~usage.any(axis=1)
        self.usage[rows, column] = usage
        if report.demand is not None:
            self.demand[rows, column] = report.demand[known][newer]
        self.demand_known[rows, column] = report.demand is not None
        self.present[rows, column] = ~stopped
        self._refreshed_s[rows, column] = now_s
        self._seq[rows, column] = report.seq
        return Merge.ACCEPTED

    def expire(self, now_s: float) -> int:
        """Remove the entries of other brokers not refreshed within `stale_after_s`; returns how many."""
        stale = self.present & (self._refreshed_s < now_s - self.rules.stale_after_s)
        stale[:, OWN] = False
        self.present &= ~stale
        return int(stale.sum())

    def remove_broker(self, broker: str, incarnation: int | None = None) -> bool:
        """Drop every entry of a broker the membership registry declared dead (that incarnation or older)."""
        column = self._column.get(broker)
        if column is None or column == OWN:
            return False
        if incarnation is not None and incarnation < self._incarnation[column]:
            return False  # the dead one is an older incarnation; the live one keeps its entries
        self._clear_column(column)
        # A dead incarnation never comes back (a restart registers a higher one): a late report of it still
        # in the channel must not bring its entries back, so that incarnation and older ones are refused.
        dead = self._incarnation[column] if incarnation is None else max(incarnation, self._incarnation[column])
        self._incarnation[column] = dead + 1
        return True

    def view_brokers(self) -> np.ndarray:
        """Number of brokers present in this broker's view, per group."""
        return self.present.sum(axis=1)

    def _clear_column(self, column: int) -> None:
        self.present[:, column] = False
        self.demand_known[:, column] = False
        self._seq[:, column] = -1

    def _column_of(self, broker: str) -> int:
        column = self._column.get(broker)
        if column is not None:
            return column
        column = len(self.brokers)
        self.brokers.append(broker)
        self._column[broker] = column
        if column >= self.present.shape[1]:
            self._grow(max(4, 2 * self.present.shape[1]))
        return column

    def _grow(self, n_columns: int) -> None:
        """Widen every per-entry array to `n_columns`, amortised by doubling."""
        extra = n_columns - self.present.shape[1]

        def widen(array: np.ndarray, fill: float | bool) -> np.ndarray:
            pad_shape = (array.shape[0], extra, *array.shape[2:])
            return np.concatenate([array, np.full(pad_shape, fill, dtype=array.dtype)], axis=1)

        self.usage = widen(self.usage, 0.0)
        self.demand = widen(self.demand, 0.0)
        self.present = widen(self.present, False)
        self.demand_known = widen(self.demand_known, False)
        self._refreshed_s = widen(self._refreshed_s, 0.0)
        self._seq = widen(self._seq, -1)
        self._incarnation = np.concatenate([self._incarnation, np.zeros(extra, dtype=np.int64)])


def _dense_lookup(group_ids: np.ndarray) -> np.ndarray | None:
    """Row of each id as an array indexed by id (-1: not held), when the ids are small enough for one
    (at most 1M entries or 64 per group held); None otherwise, and lookups use a binary search."""
    if not len(group_ids) or group_ids.min() < 0:
        return None
    size = int(group_ids.max()) + 1
    if size > max(1 << 20, 64 * len(group_ids)):
        return None
    lookup = np.full(size, -1, dtype=np.intp)
    lookup[group_ids] = np.arange(len(group_ids))
    return lookup
