"""Passing news on: a broker publishes again, as they are, the peers' reports that brought it news.

On broadcast routes (`Routes.broadcast`: a group's topic is the same for every broker) and in the quotalab wire
(each report numbered and signed by its author), a copy of a report from another broker is as good as the
author's: a receiver keeps the first copy it gets and discards the others (`UsageTable.merge_many`), and a
relaying broker cannot change a byte of it. A change one link lost then reaches its receiver the next round by
the other brokers' links, not only by the author's next copy on the same lossy link: a link that loses a change
three rounds in a row (one link in 37 at 30% loss, many more in bursts) no longer holds a group off its share.

News is a report that brought an entry not present before, or a usage or demand that moved (`NEWS_CHANGE`). The
hooks say how many brokers pass an author's news on, the ones after it in the order of their names (a few, however
many brokers hear it), and in how many of the author's reports: the one that brought it and the next ones (the
author's copies); a report with nothing new after them is not passed on.

A copy travels with a one-byte mark (`MARK`) ahead of the author's bytes, so that its receiver can tell it from
the author's own report: the loss meter counts only the author's reports (`LossMeter`). What it measures is the
loss of a link, which a broker's waits and paces are about (a peer's rise reaches it the round it happens only on
the author's link, a copy comes a round later); counting the copies, it read 0 where a tenth of the reports were
lost, and a broker took at once room a peer was rising into (104% of the quota in a test).
"""

from __future__ import annotations

import numpy as np

from allocator.node.usage_table import UsageTable
from allocator.wire.routing import Routes
from allocator.wire.usage_report import ReportBatch

MARK = b"\xc1"  # msgpack's one never-used byte: no report of the quotalab wire starts with it


class Relay:
    """The peers' reports one broker publishes again with its next reports."""

    def __init__(self, routes: Routes, wire: str, policy_relays: bool) -> None:
        """`policy_relays`: the policy passes news on (`Policy.relays_news`); only on broadcast routes and in the
        quotalab wire (Pulsar's format is not numbered: copies would count as the author's)."""
        self.routes = routes
        self.enabled = policy_relays and routes.broadcast and wire == "quotalab"
        self._copies_left: dict[str, int] = {}  # author -> its reports still to pass on
        self._queued: list[tuple[int, bytes]] = []

    def unmark(self, payloads: list[bytes]) -> tuple[list[bytes], np.ndarray]:
        """The payloads received, without the mark of a copy, and bool[n]: which were copies (none where this
        cluster does not pass news on)."""
        copies = np.array([self.enabled and payload[:1] == MARK for payload in payloads], dtype=bool)
        return [payload[1:] if copy else payload for payload, copy in zip(payloads, copies, strict=True)], copies

    def note(
        self,
        batch: ReportBatch,
        accepted: np.ndarray,
        payloads: list[bytes],
        table: UsageTable,
        relayers: int,
        copies: int,
    ) -> None:
        """bool[n] the reports of `batch` the usage `table` accepted (`payloads[n]`, as their authors sent them):
        where this broker is one of the `relayers` brokers after the author in the order of the names it knows,
        news (`table.news`) starts `copies` relays of its author's reports, this one first."""
        if not (relayers and copies):
            return
        ring = {name: place for place, name in enumerate(sorted(table.brokers))}  # every broker heard of
        own = ring[table.own_broker]
        for report in np.flatnonzero(accepted).tolist():
            author, payload = batch.brokers[report], payloads[report]
            if (own - ring[author]) % len(ring) > relayers:  # not one of the `relayers` brokers after the author
                continue
            if table.news[report]:
                self._copies_left[author] = copies
            left = self._copies_left.get(author, 0)
            if left > 0:
                rows, known = table.local_rows(batch.group_ids[batch.offsets[report] : batch.offsets[report + 1]])
                topic = int(self.routes.topics[self.routes.offsets[rows[known][0]]])  # a group it holds: its topic
                self._queued.append((topic, MARK + payload))
                self._copies_left[author] = left - 1

    def take(self) -> list[tuple[int, bytes]]:
        """The (topic, marked payload) pairs to publish this round; none again."""
        queued, self._queued = self._queued, []
        return queued
