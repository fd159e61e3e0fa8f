"""A usage report and a batch of them: what `allocator.wire.codec` encodes and decodes.

`UsageReport` is one broker's report for one round, as its sender built it or a receiver decoded it;
`ReportBatch` holds the valid reports of a round's inbox as columns, which is what a broker merges at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from allocator.wire.report_fields import same_optional_array


@dataclass(frozen=True, eq=False)
class UsageReport:
    """One broker's usage report for one round.

    `usage` and `demand` are per-second rates, one row per entry of `group_ids` and one column per entry of
    `dimensions`; a row of zeros says the sender's traffic for that group stopped. Decoded arrays may be
    read-only views on the received bytes. Equality compares the arrays element by element.
    """

    broker: str
    incarnation: int
    seq: int
    sent_at_ms: int
    interval_ms: int
    dimensions: tuple[str, ...]
    group_ids: np.ndarray
    usage: np.ndarray
    demand: np.ndarray | None = None
    dictionary: dict[int, str] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UsageReport):
            return NotImplemented
        return (
            (self.broker, self.incarnation, self.seq, self.sent_at_ms, self.interval_ms)
            == (other.broker, other.incarnation, other.seq, other.sent_at_ms, other.interval_ms)
            and tuple(self.dimensions) == tuple(other.dimensions)
            and np.array_equal(self.group_ids, other.group_ids)
            and np.array_equal(self.usage, other.usage)
            and same_optional_array(self.demand, other.demand)
            and self.dictionary == other.dictionary
        )


@dataclass(frozen=True, eq=False)
class ReportBatch:
    """Valid reports in the same dimensions, received together, held as columns (what a broker merges at once).

    Report i is sent by `brokers[i]` (with `incarnation[i]`, `seq[i]`, `sent_at_ms[i]`, `interval_ms[i]`,
    `dictionaries[i]`) and holds the entries `offsets[i]:offsets[i + 1]` of `group_ids`, `usage` and `demand`;
    `demand` rows are 0 for a report without demand (`has_demand[i]` False).
    """

    dimensions: tuple[str, ...]
    brokers: list[str]
    incarnation: list[int]
    seq: list[int]
    sent_at_ms: list[int]
    interval_ms: list[int]
    dictionaries: list[dict[int, str] | None]
    has_demand: np.ndarray  # bool[R]
    offsets: np.ndarray  # int64[R + 1]
    group_ids: np.ndarray  # int64[N]
    usage: np.ndarray  # float64[N, D]
    demand: np.ndarray  # float64[N, D]

    def __len__(self) -> int:
        return len(self.brokers)

    @classmethod
    def of(cls, reports: Sequence[UsageReport], dimensions: Sequence[str]) -> ReportBatch:
        """Reports already decoded (or built), all in `dimensions`; ValueError if one is not."""
        if any(tuple(report.dimensions) != tuple(dimensions) for report in reports):
            raise ValueError(f"every report must be in the dimensions {list(dimensions)}")
        no_rates = np.zeros((0, len(dimensions)))
        return cls(
            dimensions=tuple(dimensions),
            brokers=[report.broker for report in reports],
            incarnation=[int(report.incarnation) for report in reports],
            seq=[int(report.seq) for report in reports],
            sent_at_ms=[int(report.sent_at_ms) for report in reports],
            interval_ms=[int(report.interval_ms) for report in reports],
            dictionaries=[report.dictionary for report in reports],
            has_demand=np.array([report.demand is not None for report in reports], dtype=bool),
            offsets=np.cumsum([0, *(len(report.group_ids) for report in reports)], dtype=np.int64),
            group_ids=np.concatenate([np.zeros(0, np.int64), *(report.group_ids for report in reports)]),
            usage=np.concatenate([no_rates, *(report.usage for report in reports)]),
            demand=np.concatenate(
                [no_rates, *(np.zeros_like(r.usage) if r.demand is None else r.demand for r in reports)]
            ),
        )

    def report(self, index: int) -> UsageReport:
        start, end = self.offsets[index], self.offsets[index + 1]
        return UsageReport(
            broker=self.brokers[index],
            incarnation=self.incarnation[index],
            seq=self.seq[index],
            sent_at_ms=self.sent_at_ms[index],
            interval_ms=self.interval_ms[index],
            dimensions=self.dimensions,
            group_ids=self.group_ids[start:end],
            usage=self.usage[start:end],
            demand=self.demand[start:end] if self.has_demand[index] else None,
            dictionary=self.dictionaries[index],
        )

    def select(self, reports: np.ndarray) -> ReportBatch:
        """The batch of the reports where `reports` (bool[R]) is True (this batch itself when it keeps them all)."""
        if reports.all():
            return self
        keep = reports.tolist()
        entries = np.repeat(reports, np.diff(self.offsets))

        def chosen(items: list[Any]) -> list[Any]:
            return [item for item, kept in zip(items, keep, strict=True) if kept]

        return ReportBatch(
            dimensions=self.dimensions,
            brokers=chosen(self.brokers),
            incarnation=chosen(self.incarnation),
            seq=chosen(self.seq),
            sent_at_ms=chosen(self.sent_at_ms),
            interval_ms=chosen(self.interval_ms),
            dictionaries=chosen(self.dictionaries),
            has_demand=self.has_demand[reports],
            offsets=np.concatenate([[0], np.cumsum(np.diff(self.offsets)[reports])]).astype(np.int64),
            group_ids=self.group_ids[entries],
            usage=self.usage[entries],
            demand=self.demand[entries],
        )
