"""What a broker publishes each round: the entries selected, one report per topic, numbered, names sent once.

A round's reports share one sequence number (a receiver checks sequence numbers per entry, so a report split
over topics is still one round's), and a group's name travels with its first report only (PIP-82: ids in
reports, names on change).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.node.node_settings import NodeSettings
from allocator.policies.report_suppressor import Selection
from allocator.wire.codec import encode_split
from allocator.wire.pulsar import usage_info
from allocator.wire.routing import Routes
from allocator.wire.signing import Signer
from allocator.wire.usage_report import UsageReport


@dataclass(frozen=True)
class Outbox:
    payloads: list[tuple[int, bytes]]  # (topic, encoded report): one report per topic, of the entries routed to it
    reported: np.ndarray  # bool[G]: groups whose entry was published (on at least one topic)
    report_bytes: np.ndarray  # [G]: each group's share of all the bytes published for it
    suppressed: int


class ReportSender:
    """Encodes one broker's reports along its `routes` (None: every group on topic 0)."""

    def __init__(
        self,
        name: str,
        group_ids: np.ndarray,
        settings: NodeSettings,
        *,
        routes: Routes | None,
        group_names: dict[int, str] | None,
        signer: Signer | None,
        reports_demand: bool,
    ) -> None:
        self.name = name
        self.group_ids = group_ids
        self.settings = settings
        self.routes = Routes.single(len(group_ids)) if routes is None else routes
        if self.routes.n_groups != len(group_ids):
            raise ValueError(f"routes are for {self.routes.n_groups} groups, the node has {len(group_ids)}")
        if settings.wire == "pulsar" and group_names is None:
            raise ValueError("wire pulsar: reports name their groups, so a broker needs group_names")
        self.group_names = group_names
        self.signer = signer
        self.reports_demand = reports_demand
        self.seq = 0
        self._named = np.zeros(len(group_ids), dtype=bool)  # groups whose name was sent already

    def encode(
        self, selection: Selection, usage: np.ndarray, demand: np.ndarray, incarnation: int, now_s: float
    ) -> Outbox:
        """One report per topic, of the selected groups routed to it; every report is a slice of the (row, topic)
        pairs sorted by topic once (`Routes.by_topic`)."""
        n_groups = len(self.group_ids)
        if not selection.report.any():  # most rounds of a steady cluster
            return Outbox([], np.zeros(n_groups, dtype=bool), np.zeros(n_groups), selection.suppressed)
        pair_rows, topics, bounds = self.routes.by_topic(np.flatnonzero(selection.report))
        reported = np.zeros(n_groups, dtype=bool)
        reported[pair_rows] = True
        if len(pair_rows) == 0:
            return Outbox([], reported, np.zeros(n_groups), selection.suppressed)
        self.seq += 1
        report = UsageReport(
            broker=self.name,
            incarnation=incarnation,
            seq=self.seq,
            sent_at_ms=int(round(now_s * 1000)),
            interval_ms=int(round(self.settings.interval_s * 1000)),
            dimensions=self.settings.dimensions,
            group_ids=self.group_ids,
            usage=usage,
            demand=demand if self.reports_demand else None,
            dictionary=self._dictionary(np.flatnonzero(reported)),
        )
        if self.settings.wire == "pulsar":
            encoded = usage_info.encode_split(report, pair_rows, bounds, self.group_names, self.settings.interval_s)
        else:
            encoded = encode_split(
                report,
                pair_rows,
                bounds,
                key=self.settings.hmac_key,
                signer=self.signer,
                compress=self.settings.compress,
                float32=self.settings.float32_rates,
            )
        entries = np.diff(bounds)
        bytes_per_entry = np.array([len(payload) for payload in encoded]) / entries
        report_bytes = np.bincount(pair_rows, weights=np.repeat(bytes_per_entry, entries), minlength=n_groups)
        return Outbox(list(zip(topics.tolist(), encoded, strict=True)), reported, report_bytes, selection.suppressed)

    def _dictionary(self, rows: np.ndarray) -> dict[int, str] | None:
        """The names of the groups of `rows` not sent yet (None when there are none)."""
        rows = rows[~self._named[rows]]
        if self.group_names is None or len(rows) == 0:
            return None
        self._named[rows] = True
        return {int(group_id): self.group_names[int(group_id)] for group_id in self.group_ids[rows]}
