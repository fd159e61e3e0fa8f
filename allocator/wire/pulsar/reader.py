"""A broker's round of received `ResourceUsageInfo` payloads, as the `ReportBatch` its usage table merges.

Pulsar's format carries a broker's name and its counts per group, nothing else; the usage table wants more of
a report, so the reader stands in for it, as Pulsar's own reader does without it:

- group: looked up by name (`owner`) among the receiver's groups; an owner it does not serve is skipped, as
  Pulsar skips a resource group it has no consumer for;
- usage: `count / interval_s` in the receiver's dimensions; a report without the `publish` or `dispatch` a
  dimension needs is refused;
- publish time: the arrival (the publish time is in Pulsar's message metadata, not in the payload), so no
  report is ever too old or too new;
- sequence number: how many rounds the receiver has heard the sender in, one number for all of a sender's
  reports of a round, so an entry is replaced by whatever arrives later. Within a round the reports are handed
  over last first (the table keeps the first of equal numbers): the copy that arrived last wins, as in
  Pulsar, which overwrites the sender's entry on every message. There are no gaps: a receiver's loss meter
  reads 0;
- incarnation: the one the membership registry issued the sender (`issued`), 0 without a registry: a restart
  is seen through the registry, never through the report;
- demand, dictionary, signature: none.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from allocator.wire.pulsar.usage_info import decode
from allocator.wire.report_fields import DIMENSIONS, ReportError
from allocator.wire.usage_report import ReportBatch, UsageReport


class PulsarReader:
    """Decodes the `ResourceUsageInfo` payloads one broker receives; keeps, per sender, the rounds heard."""

    def __init__(
        self,
        dimensions: Sequence[str],
        interval_s: float,
        group_ids_by_name: Mapping[str, int],
        *,
        known_brokers: Container[str] | None = None,
        max_bytes: int,
    ) -> None:
        self.dimensions = tuple(dimensions)
        self.interval_s = interval_s
        self.group_ids_by_name = dict(group_ids_by_name)
        self.known_brokers = known_brokers
        self.max_bytes = max_bytes
        self._columns = [DIMENSIONS.index(dimension) for dimension in self.dimensions]
        self._rounds_heard: dict[str, int] = {}  # sender -> receive calls that brought a valid report of it

    def __repr__(self) -> str:
        return f"PulsarReader(dimensions={self.dimensions}, senders heard={len(self._rounds_heard)})"

    def decode(
        self, payloads: Iterable[bytes], now_s: float, issued: Mapping[str, int] | None = None
    ) -> tuple[ReportBatch, dict[int, ReportError]]:
        """The valid reports among `payloads` as one batch (the last arrived first), and the `ReportError` of each
        other one by its position in `payloads`."""
        payloads = list(payloads)
        reports: list[UsageReport] = []
        rejected: dict[int, ReportError] = {}
        heard: set[str] = set()
        for position in reversed(range(len(payloads))):
            try:
                reports.append(self._report(payloads[position], now_s, issued))
            except ReportError as error:
                rejected[position] = error
                continue
            heard.add(reports[-1].broker)
        for broker in heard:
            self._rounds_heard[broker] = self._rounds_heard.get(broker, 0) + 1
        numbered = [replace(report, seq=self._rounds_heard[report.broker]) for report in reports]
        return ReportBatch.of(numbered, self.dimensions), dict(sorted(rejected.items()))

    def _report(self, data: bytes, now_s: float, issued: Mapping[str, int] | None) -> UsageReport:
        info = decode(data, self.max_bytes)
        if self.known_brokers is not None and info.broker not in self.known_brokers:
            raise ReportError(f"unknown broker {info.broker!r}")
        rows = [row for row, owner in enumerate(info.owners) if owner in self.group_ids_by_name]
        counts = info.counts[rows][:, self._columns]
        if np.isnan(counts).any():
            row, column = np.argwhere(np.isnan(counts))[0]
            usage_field = self.dimensions[column].split("_")[0]
            raise ReportError(f"group {info.owners[rows[row]]!r} has no {usage_field} usage")
        group_ids = np.array([self.group_ids_by_name[info.owners[row]] for row in rows], dtype=np.int64)
        order = np.argsort(group_ids)
        return UsageReport(
            broker=info.broker,
            incarnation=0 if issued is None else issued.get(info.broker, 0),
            seq=0,  # numbered once the round's senders are known (`decode`)
            sent_at_ms=int(round(now_s * 1000)),
            interval_ms=int(round(self.interval_s * 1000)),
            dimensions=self.dimensions,
            group_ids=group_ids[order],
            usage=counts[order] / self.interval_s,
        )
