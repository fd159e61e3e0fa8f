"""The usage map `group -> broker -> entry`, held compactly, with every cleanup rule of PIP-82.

Rows are the groups this broker serves (local indices 0..G-1, looked up from global group ids). A row keeps
only the brokers that report its group, in slots: `slot_broker[g, k]` is the broker in slot k of row g (an
index into `brokers`, or -1 for a free slot), and slot 0 is always this broker. An entry is (usage, demand,
refreshed at, sequence number) per slot. So the arrays are [G, K] with K the most brokers seen for any one
group (5 in PIP-82's sizing), whatever the number of brokers in the cluster (100 there): merging, expiring and
allocating cost the same in a cluster of 10 brokers or 1,000. Reports for groups this broker does not serve
are ignored: a broker only needs the entries of the groups it shares (PIP-82's memory estimate counts those).

A slot stays with its broker while the broker's entry is absent (a zero report or an expiry), keeping its
sequence number so that a late copy cannot bring the entry back; it is freed when the broker's entries are
voided (a restart or a removal by the membership), unless the registry lists the broker as serving the group.

The roster: `listed[g, k]` says the membership registry lists the broker of slot k as serving group g (as a
Pulsar broker finds a bundle's owner in the metadata store), whether or not its reports were heard; a slot is
taken for a listed broker never heard. `update_roster` applies the registry's changes in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from allocator.policies.hooks import OWN, PeerView  # OWN: the slot (and broker index) of the table's holder
from allocator.policies.rows import row_sum
from allocator.wire.usage_report import ReportBatch, UsageReport

FREE = -1  # `slot_broker` of a free slot


class Merge(Enum):
    """What became of one report."""

    ACCEPTED = "accepted"
    TOO_OLD = "too_old"  # published more than max_report_age_s ago (by the publisher's clock)
    TOO_NEW = "too_new"  # published more than max_clock_skew_s ahead of this broker's clock
    SEQ_JUMP = "seq_jump"  # a sequence number further ahead than the sender can have counted since
    OLD_INCARNATION = "old_incarnation"  # from an incarnation older than one already seen
    DUPLICATE = "duplicate"  # none of its entries was newer: a duplicate or a stale reordering
    SUPERSEDED = "superseded"  # newer than the table, but a later report of its sender in the same batch replaced it
    OWN = "own"  # this broker's own report, come back through the channel


_OUTCOMES = (Merge.TOO_OLD, Merge.OWN, Merge.OLD_INCARNATION, Merge.ACCEPTED, Merge.DUPLICATE, Merge.TOO_NEW,
             Merge.SEQ_JUMP, Merge.SUPERSEDED)  # by code  # fmt: skip
NEWS_CHANGE = 0.01  # a rate that moved by less than 1% is no news: the jitter of a steady rate, not a change
SEQ_SLACK = 8  # sequence numbers a report may be ahead of the last accepted one, beyond one per interval since


@dataclass(frozen=True)
class _PeerSummary:
    """Per group, what the present peer entries (slots after `OWN`) say, as of the table's last change to them."""

    count: np.ndarray  # int64[G] peers present
    oldest_refresh_s: np.ndarray  # [G] the oldest of their refresh times (inf: none present)
    mean_refresh_s: np.ndarray  # [G] their mean (NaN: none present)
    oldest_s: float  # the oldest refresh time of any present peer entry (inf: none)


@dataclass(frozen=True)
class _EntrySlots:
    """Where the entries of a batch went, every report live and every group held: `flat` indexes the [G, K] arrays,
    for that layout of the batch (its reports' `senders`, `offsets` and `group_ids`) and the slots as they were
    (`slot_changes`). A forced report of every peer comes round after round in the same layout."""

    senders: np.ndarray
    offsets: np.ndarray
    group_ids: np.ndarray
    slot_changes: int
    flat: np.ndarray


@dataclass(frozen=True)
class CleanupRules:
    """When an entry or a report is no longer believed.

    A report's `sent_at_ms` must be within `max_report_age_s` before and `max_clock_skew_s` after the receiver's
    clock. A broker numbers its reports at most once an interval, so a report of a broker already heard (same
    incarnation) may be at most `SEQ_SLACK` plus one per `interval_s` elapsed ahead of the last one accepted: a
    forged report cannot jump to the end of the range and silence the real one for good.
    """

    stale_after_s: float  # an entry not refreshed for this long expires
    max_report_age_s: float  # a report published longer ago than this is dropped
    max_clock_skew_s: float = np.inf  # a report published further ahead than this is dropped
    interval_s: float | None = None  # the senders' reporting interval; None: sequence numbers are not bounded
    # the entry of a broker the registry lists as serving the group never expires, and one heard only before its
    # listing is forgotten (the rules of a policy that reads the roster)
    keep_listed: bool = False


class UsageTable:
    """One broker's view of every broker's usage for the groups it serves."""

    def __init__(
        self, own_broker: str, group_ids: np.ndarray, n_dimensions: int, rules: CleanupRules, tracks_news: bool = True
    ):
        """`tracks_news`: `merge_many` tells which reports brought news (`news`), as a broker that passes news on
        reads it; without, `news` stays None and a merge compares no entry with the one it replaces."""
        self.own_broker = own_broker
        self.rules = rules
        self.group_ids = np.asarray(group_ids, dtype=np.int64)
        self._order = np.argsort(self.group_ids)
        self._sorted_ids = self.group_ids[self._order]
        self._lookup = _dense_lookup(self.group_ids)
        self.brokers: list[str] = []
        self._index: dict[str, int] = {}
        self._incarnation = np.zeros(0, dtype=np.int64)  # [brokers heard of]
        self._last_seq = np.zeros(0, dtype=np.int64)  # [brokers heard of] the last accepted, -1: none this incarnation
        self._last_seq_s = np.zeros(0)  # [brokers heard of] when it was accepted
        n_groups = len(self.group_ids)
        self.n_slots = 1  # slots in use in some row: every [G, K] array holds at least this many
        self.slot_broker = np.full((n_groups, 1), FREE, dtype=np.int32)
        self.usage = np.zeros((n_groups, 1, n_dimensions))
        self.demand = np.zeros((n_groups, 1, n_dimensions))
        self.present = np.zeros((n_groups, 1), dtype=bool)
        self.listed = np.zeros((n_groups, 1), dtype=bool)
        self.has_roster = False  # the registry's roster was applied at least once
        self.demand_known = np.zeros((n_groups, 1), dtype=bool)
        self._refreshed_s = np.zeros((n_groups, 1))
        self._seq = np.full((n_groups, 1), -1, dtype=np.int64)
        self._silent = np.zeros((n_groups, 1), dtype=bool)  # as of the last `mark_silent`, read if `_any_silent`
        self._any_silent = False  # the last `mark_silent` found a silent entry
        self._received_s = -np.inf  # when the last batch of reports was merged
        self.tracks_news = tracks_news
        # [R] the reports of the last batch that brought news (`merge_many`), if `tracks_news`
        self.news: np.ndarray | None = np.zeros(0, dtype=bool) if tracks_news else None
        # the present peer entries summed up, until they change (`_peers_changed`): most rounds at scale merge no
        # report and expire nothing, and the round reads the summary several times (expiry, silence, the fallback,
        # the telemetry)
        self._peer_summary: _PeerSummary | None = None
        self._slot_changes = 0  # how many times `slot_broker` changed: a slot found before is still the one
        self._entry_slots: _EntrySlots | None = None  # of the last batch merged whole
        self.slot_broker[:, OWN] = self._broker_index(own_broker)

    def __repr__(self) -> str:
        return (
            f"UsageTable(own={self.own_broker!r}, groups={len(self.group_ids)}, brokers={len(self.brokers)}, "
            f"slots={self.n_slots}, entries={int(self.present.sum())})"
        )

    @property
    def n_brokers(self) -> int:
        """Brokers heard of, this one included."""
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

    def entries(self) -> dict[tuple[int, str], np.ndarray]:
        """The present entries as `(group id, broker) -> usage[D]`, for inspection (a loop: not for rounds)."""
        rows, slots = np.nonzero(self.present)
        return {
            (int(self.group_ids[row]), self.brokers[self.slot_broker[row, slot]]): self.usage[row, slot].copy()
            for row, slot in zip(rows, slots, strict=True)
        }

    def set_own(self, usage: np.ndarray, demand: np.ndarray, serving: np.ndarray) -> None:
        """This broker's own entries: measured, never stale (so never refreshed), present while it serves the
        group."""
        self.usage[:, OWN] = usage
        self.demand[:, OWN] = demand
        self.present[:, OWN] = serving
        self.demand_known[:, OWN] = serving

    def merge(self, report: UsageReport, now_s: float) -> Merge:
        """Apply one decoded report (`merge_many` of a batch of one)."""
        return self.merge_many(ReportBatch.of([report], report.dimensions), now_s)[0]

    def merge_many(self, batch: ReportBatch, now_s: float) -> list[Merge]:
        """Apply reports received together: newer entries replace older ones; a row of zeros removes the entry.

        Sequence numbers are checked per entry, not per report, so a broker may split one round's report
        over several topics (all with that round's number) and a late copy never overwrites fresher data.
        The batch acts as if its reports came one after the other, except that a report is counted as
        accepted only if one of its entries is kept: a report whose every entry a newer one of the same batch
        replaces, or that comes from an incarnation older than another report of the batch, is discarded.
        `news` then says which reports brought news (with `tracks_news`): an entry not present before, or a usage or
        demand that moved by more than `NEWS_CHANGE` (a copy of a change already heard, or a forced report of the same
        rates, is none).
        """
        self._received_s = now_s
        if not len(batch):  # a round with no report (most rounds of a steady cluster): nothing to check or write
            self.news = np.zeros(0, dtype=bool) if self.tracks_news else None
            return []
        sent_s = np.array(batch.sent_at_ms, dtype=np.float64) / 1000.0
        too_old = sent_s < now_s - self.rules.max_report_age_s
        too_new = sent_s > now_s + self.rules.max_clock_skew_s
        untimely = too_old | too_new
        senders = np.array(
            [
                OWN if dropped else self._broker_index(broker)
                for broker, dropped in zip(batch.brokers, untimely.tolist(), strict=True)
            ],
            dtype=np.int64,
        )
        own = ~untimely & (senders == OWN)
        from_others = ~untimely & ~own
        incarnation = np.array(batch.incarnation, dtype=np.int64)
        newest_incarnation = self._incarnation.copy()
        np.maximum.at(newest_incarnation, senders[from_others], incarnation[from_others])
        for restarted in np.flatnonzero(newest_incarnation > self._incarnation).tolist():
            self._clear_broker(restarted)  # what its old incarnation said is void
        self._incarnation = newest_incarnation
        old_incarnation = from_others & (incarnation < newest_incarnation[senders])
        seq = np.array(batch.seq, dtype=np.int64)
        seq_jump = from_others & ~old_incarnation & self._seq_jumps(senders, seq, now_s)
        live = from_others & ~old_incarnation & ~seq_jump
        kept, superseded, self.news = self._merge_entries(batch, live, senders, now_s)
        np.maximum.at(self._last_seq, senders[kept], seq[kept])
        self._last_seq_s[senders[kept]] = now_s
        outcomes = np.where(too_old, 0, np.where(own, 1, np.where(old_incarnation, 2, np.where(kept, 3, 4))))
        outcomes = np.where(~kept & superseded, 7, outcomes)
        outcomes = np.where(too_new, 5, np.where(seq_jump, 6, outcomes))
        return [_OUTCOMES[outcome] for outcome in outcomes.tolist()]

    def update_roster(
        self, group_ids: np.ndarray, brokers: np.ndarray, serving: np.ndarray, names: Sequence[str]
    ) -> None:
        """Apply the registry's roster changes, in order: broker `names[brokers[i]]` serves group `group_ids[i]`
        from now on if `serving[i]`, or no longer. Groups this broker does not hold and its own entries are
        skipped; a broker listed but never heard gets a slot. With `keep_listed` (the rule of a policy that reads
        the roster), a broker listed anew that was heard only before this round's reports is old news: its entry
        goes, and it counts as listed but not heard until a report of it comes (a broker back in a group it left,
        whose reports of its stop and of its return were both lost, was counted at what it used before it left,
        and fair-share-safe's incumbents kept their shares while it took its own: 119.5% of the quota)."""
        self.has_roster = True
        if not len(group_ids):
            return
        rows, known = self.local_rows(np.asarray(group_ids, dtype=np.int64))
        # the groups held only, before their brokers are looked up: a broker's roster at the start lists every
        # (group, broker) pair of the cluster, 20 times the pairs of its own groups at PIP-82's size
        rows, serving = rows[known], np.asarray(serving, dtype=bool)[known]
        codes, code_of = np.unique(np.asarray(brokers, dtype=np.int64)[known], return_inverse=True)
        index = np.array([self._broker_index(names[code]) for code in codes.tolist()], dtype=np.int64)[code_of]
        keep = index != OWN
        if not keep.any():
            return
        rows, index, serving = rows[keep], index[keep], serving[keep]
        last = len(rows) - 1 - np.unique((rows * len(self.brokers) + index)[::-1], return_index=True)[1]
        rows, index, serving = rows[last], index[last], serving[last]  # the last change of each pair wins
        changing = serving | self._slot_held(rows, index)  # a removal of a broker without a slot changes nothing
        rows, serving = rows[changing], serving[changing]
        slots = self._slots_of(rows, index[changing])
        if self.rules.keep_listed:
            listed_anew = serving & ~self.listed[rows, slots] & (self._refreshed_s[rows, slots] < self._received_s)
            self.present[rows[listed_anew], slots[listed_anew]] = False
            self._peers_changed()
        self.listed[rows, slots] = serving

    def expire(self, now_s: float) -> int:
        """Remove the entries of other brokers not refreshed within `stale_after_s` (but for those listed as
        serving the group, with `keep_listed`); returns how many."""
        oldest_allowed_s = now_s - self.rules.stale_after_s
        if self._peers().oldest_s >= oldest_allowed_s:  # no peer entry that old: nothing to expire
            return 0
        stale = self.present & (self._refreshed_s < oldest_allowed_s)
        if self.rules.keep_listed:
            stale &= ~self.listed
        stale[:, OWN] = False
        self.present &= ~stale
        self._peers_changed()
        return int(stale.sum())

    def mark_silent(self, now_s: float, after_s: float) -> None:
        """Note the present entries of other brokers not refreshed for more than `after_s`: `view` calls them
        silent until the next mark (a cleanup's finding holds for the round)."""
        if self._peers().oldest_s >= now_s - after_s:  # no peer entry that old: none silent
            self._any_silent = False
            return
        silent = self.present[:, : self.n_slots] & (self._refreshed_s[:, : self.n_slots] < now_s - after_s)
        silent[:, OWN] = False
        self._silent = silent
        self._any_silent = bool(silent.any())

    def view(self, rows: np.ndarray | slice = slice(None), acknowledged: bool = False, loss: float = 0.0) -> PeerView:
        """The table as a policy's hooks read it, for the groups of `rows` (all by default); `acknowledged` and
        `loss` are the broker's to tell (`PeerView`)."""
        n_slots = self.n_slots
        present = self.present[rows, :n_slots]
        demand_known = not (present & ~self.demand_known[rows, :n_slots]).any()  # no gather of the present ones
        silent = np.zeros(present.shape, dtype=bool)
        if self._any_silent:
            width = min(n_slots, self._silent.shape[1])  # slots taken since the last mark are not silent
            silent[:, :width] = self._silent[rows, :width]
            silent &= present
        return PeerView(
            usage=self.usage[rows, :n_slots],
            demand=self.demand[rows, :n_slots] if demand_known else None,
            present=present,
            listed=self.listed[rows, :n_slots],
            silent=silent,
            has_roster=self.has_roster,
            acknowledged=acknowledged,
            loss=loss,
        )

    def remove_broker(self, broker: str, incarnation: int | None = None) -> bool:
        """Drop every entry of a broker the membership registry declared dead (that incarnation or older)."""
        index = self._index.get(broker)
        if index is None or index == OWN:
            return False
        if incarnation is not None and incarnation < self._incarnation[index]:
            return False  # the dead one is an older incarnation; the live one keeps its entries
        self._clear_broker(index, unlist=True)
        # A dead incarnation never comes back (a restart registers a higher one): a late report of it still
        # in the channel must not bring its entries back, so that incarnation and older ones are refused.
        dead = self._incarnation[index] if incarnation is None else max(incarnation, self._incarnation[index])
        self._incarnation[index] = dead + 1
        return True

    def refreshed_s(self) -> np.ndarray:
        """[G, K] when each slot's entry was last refreshed, by this broker's clock (0: never)."""
        return self._refreshed_s[:, : self.n_slots]

    def last_heard_s(self) -> np.ndarray:
        """[G] when a report of another broker last refreshed an entry of each group (-inf: none held). A slot
        column at a time, the slots in use only (those after `n_slots` are free in every row)."""
        last_s = np.full(len(self.group_ids), -np.inf)
        for slot in range(OWN + 1, self.n_slots):
            held = self.slot_broker[:, slot] != FREE
            np.maximum(last_s, np.where(held, self._refreshed_s[:, slot], -np.inf), out=last_s)
        return last_s

    def view_brokers(self) -> np.ndarray:
        """Number of brokers present in this broker's view, per group."""
        return self._peers().count + self.present[:, OWN]

    def peers_in_view(self) -> np.ndarray:
        """int64[G] the number of other brokers present in this broker's view, per group."""
        return self._peers().count.copy()

    def listed_brokers(self) -> np.ndarray:
        """[G] how many brokers the registry lists as serving each group (this one included when it does)."""
        return row_sum(self.listed[:, : self.n_slots])

    def view_usage(self) -> np.ndarray:
        """[G, D] each group's usage as this broker sees it: its own entry and every present peer entry, summed."""
        total = np.zeros((len(self.group_ids), self.usage.shape[2]))
        for slot in range(self.n_slots):  # a column at a time, as in `peer_entry_age_s`
            total += np.where(self.present[:, slot, None], self.usage[:, slot], 0.0)
        return total

    def peer_entry_age_s(self, now_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Per group, how long ago each present peer entry was last refreshed (by this broker's clock): the
        oldest and the mean over the peers in view, NaN for a group with no peer in view."""
        peers = self._peers()
        heard = peers.count > 0
        return np.where(heard, now_s - peers.oldest_refresh_s, np.nan), now_s - peers.mean_refresh_s

    # -- internals -------------------------------------------------------------------------------

    def _peers(self) -> _PeerSummary:
        """The summary of the present peer entries, computed again only after they changed. A loop over the few
        slots, each a whole column (as `allocator.policies.rows` does, for speed)."""
        if self._peer_summary is not None:
            return self._peer_summary
        n_groups = len(self.group_ids)
        oldest_refresh_s, refresh_sum_s, count = np.full(n_groups, np.inf), np.zeros(n_groups), np.zeros(n_groups)
        for slot in range(OWN + 1, self.n_slots):
            peer = self.present[:, slot]
            refreshed_s = self._refreshed_s[:, slot]
            np.minimum(oldest_refresh_s, np.where(peer, refreshed_s, np.inf), out=oldest_refresh_s)
            refresh_sum_s += np.where(peer, refreshed_s, 0.0)
            count += peer
        mean_refresh_s = np.divide(refresh_sum_s, count, out=np.full(n_groups, np.nan), where=count > 0)
        oldest_s = float(oldest_refresh_s.min()) if n_groups else np.inf
        self._peer_summary = _PeerSummary(count.astype(np.int64), oldest_refresh_s, mean_refresh_s, oldest_s)
        return self._peer_summary

    def _peers_changed(self) -> None:
        """Every write to a peer slot's `present` or `_refreshed_s` calls this: the summary is then out of date."""
        self._peer_summary = None

    def _seq_jumps(self, senders: np.ndarray, seq: np.ndarray, now_s: float) -> np.ndarray:
        """bool[R] the reports whose sequence number is further ahead of their sender's last accepted one than
        `SEQ_SLACK` plus one per interval since (a sender not heard in this incarnation sets the baseline)."""
        if self.rules.interval_s is None:
            return np.zeros(len(seq), dtype=bool)
        last, last_s = self._last_seq[senders], self._last_seq_s[senders]
        allowed = last + SEQ_SLACK + np.ceil(np.maximum(now_s - last_s, 0.0) / self.rules.interval_s)
        return (last >= 0) & (seq > allowed)

    def _merge_entries(
        self, batch: ReportBatch, live: np.ndarray, senders: np.ndarray, now_s: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Write the entries of the `live` reports of `batch` that are newer than the table and than every other
        entry of the batch for the same slot; returns three bool[len(batch)]: one of the report's entries was kept,
        one was newer than the table but older than another report of the batch for its slot (superseded), and one
        of the kept entries is news (new, or its usage or demand moved by more than `NEWS_CHANGE`; None unless
        `tracks_news`)."""
        of_report = np.repeat(np.arange(len(batch)), np.diff(batch.offsets))
        last = self._entry_slots
        if (
            last is not None
            and last.slot_changes == self._slot_changes
            and live.all()
            and np.array_equal(last.senders, senders)
            and np.array_equal(last.offsets, batch.offsets)
            and np.array_equal(last.group_ids, batch.group_ids)
        ):  # the layout of the last batch merged whole, into the same slots: no lookup of rows or slots
            entries, flat = np.arange(len(of_report)), last.flat
        else:
            entries = np.flatnonzero(live[of_report])
            rows, known = self.local_rows(batch.group_ids[entries])
            entries, rows = entries[known], rows[known]
            slots = self._slots_of(rows, senders[of_report[entries]])
            flat = rows * self.slot_broker.shape[1] + slots  # index into the [G, K] arrays, all C-contiguous
            if len(entries) == len(of_report):  # every report live, every group held
                layout = (senders.copy(), batch.offsets, batch.group_ids)
                self._entry_slots = _EntrySlots(*layout, self._slot_changes, flat)
        of_report = of_report[entries]
        seq = np.array(batch.seq, dtype=np.int64)[of_report]
        table_seq = self._seq.reshape(-1)
        kept = np.flatnonzero(seq > table_seq[flat])
        superseded = np.zeros(len(batch), dtype=bool)
        if np.bincount(senders[live]).max(initial=0) > 1:
            # Two reports of one sender may hold the same slot: keep the entry with the highest sequence number,
            # the first of equals. (Otherwise a slot appears once: a report holds each group once.)
            newest = table_seq.copy()
            np.maximum.at(newest, flat, seq)
            candidate = np.flatnonzero((seq == newest[flat]) & (seq > table_seq[flat]))
            first = np.full(newest.shape, len(seq))
            np.minimum.at(first, flat[candidate], candidate)
            kept = candidate[first[flat[candidate]] == candidate]
            # entries newer than the table but not than the batch
            older = np.flatnonzero((seq > table_seq[flat]) & (seq < newest[flat]))
            superseded[of_report[older]] = True

        flat, entries, report_of_kept = flat[kept], entries[kept], of_report[kept]
        usage, demand = batch.usage[entries], batch.demand[entries]
        n_dimensions = self.usage.shape[2]
        news = None
        if self.tracks_news:
            news = ~self.present.reshape(-1)[flat] | _moved(self.usage.reshape(-1, n_dimensions)[flat], usage)
            news |= _moved(self.demand.reshape(-1, n_dimensions)[flat], demand)
        self.usage.reshape(-1, n_dimensions)[flat] = usage
        self.demand_known.reshape(-1)[flat] = batch.has_demand[report_of_kept]
        if batch.has_demand.any():  # else nothing reads what `demand` holds: it is not known
            self.demand.reshape(-1, n_dimensions)[flat] = demand
        self.present.reshape(-1)[flat] = usage.any(axis=1)
        self._refreshed_s.reshape(-1)[flat] = now_s
        self._peers_changed()
        table_seq[flat] = seq[kept]
        reports_kept = np.bincount(report_of_kept, minlength=len(batch)) > 0
        if news is not None:
            news = np.bincount(report_of_kept, weights=news, minlength=len(batch)) > 0
        return reports_kept, superseded, news

    def _slot_held(self, rows: np.ndarray, brokers: np.ndarray) -> np.ndarray:
        """bool[n]: whether broker `brokers[i]` holds a slot in row `rows[i]`."""
        return (np.take(self.slot_broker, rows, axis=0) == brokers[:, None]).any(axis=1)

    def _slots_of(self, rows: np.ndarray, brokers: np.ndarray) -> np.ndarray:
        """The slot of each (row, broker) entry, taking free slots for the ones not in the table yet."""
        held = np.take(self.slot_broker, rows, axis=0)  # whole rows: free slots never match
        # the first slot that holds the broker, a column at a time from the last (numpy's argmax along a row of
        # 5 runs its loop once per row: ~2x slower)
        slots = np.zeros(len(rows), dtype=np.intp)
        found = np.zeros(len(rows), dtype=bool)
        for slot in range(held.shape[1] - 1, -1, -1):
            hit = held[:, slot] == brokers
            np.copyto(slots, slot, where=hit)
            found |= hit
        missing = ~found
        if missing.any():
            slots[missing] = self._take_free_slots(rows[missing], brokers[missing])
        return slots

    def _take_free_slots(self, rows: np.ndarray, brokers: np.ndarray) -> np.ndarray:
        """Give each new (row, broker) pair (possibly repeated) the lowest free slot of its row, widening the
        arrays when a row has too few; returns the slot of each pair."""
        pairs, pair_of = np.unique(rows * len(self.brokers) + brokers, return_inverse=True)
        new_rows, new_brokers = pairs // len(self.brokers), pairs % len(self.brokers)
        # rank of each new pair among the new pairs of its row (pairs are sorted by row)
        first_of_row = np.r_[True, new_rows[1:] != new_rows[:-1]]
        rank = np.arange(len(pairs)) - np.maximum.accumulate(np.where(first_of_row, np.arange(len(pairs)), 0))
        occupied = (np.take(self.slot_broker, new_rows, axis=0) != FREE).sum(axis=1)
        self._widen(int((occupied + rank).max()) + 1)
        free = np.take(self.slot_broker, new_rows, axis=0) == FREE
        slots = (np.cumsum(free, axis=1) > rank[:, None]).argmax(axis=1)  # the (rank + 1)-th free slot
        self.slot_broker[new_rows, slots] = new_brokers
        self._slot_changes += 1
        self.n_slots = max(self.n_slots, int(slots.max()) + 1)
        return slots[pair_of]

    def _widen(self, n_slots: int) -> None:
        """Make room for `n_slots` slots per row, exactly: the slots in use are then the whole width, and the [G, K]
        slices a round reads (`view`) are contiguous, which numpy walks in one loop instead of one per row (~10x
        faster at 5 slots a row). A table widens once per slot it ever needs, a handful of times."""
        extra = n_slots - self.slot_broker.shape[1]
        if extra <= 0:
            return

        def widen(array: np.ndarray, fill: float | bool) -> np.ndarray:
            pad_shape = (array.shape[0], extra, *array.shape[2:])
            return np.concatenate([array, np.full(pad_shape, fill, dtype=array.dtype)], axis=1)

        self.slot_broker = widen(self.slot_broker, FREE)
        self.usage = widen(self.usage, 0.0)
        self.demand = widen(self.demand, 0.0)
        self.present = widen(self.present, False)
        self.listed = widen(self.listed, False)
        self.demand_known = widen(self.demand_known, False)
        self._refreshed_s = widen(self._refreshed_s, 0.0)
        self._seq = widen(self._seq, -1)
        self._slot_changes += 1  # the flat indices change with the width
        self._peers_changed()

    def _clear_broker(self, index: int, unlist: bool = False) -> None:
        """Void every entry of broker `index` and free its slots, but for those the registry lists it in (all of
        them with `unlist`: the registry declared it dead)."""
        slots = self.slot_broker == index
        self._last_seq[index] = -1  # a new incarnation numbers its reports from the start
        self.present[slots] = False
        self._peers_changed()
        self.demand_known[slots] = False
        self._seq[slots] = -1
        if unlist:
            self.listed[slots] = False
        self.slot_broker[slots & ~self.listed] = FREE
        self._slot_changes += 1

    def _broker_index(self, broker: str) -> int:
        index = self._index.get(broker)
        if index is None:
            index = self._index[broker] = len(self.brokers)
            self.brokers.append(broker)
            self._incarnation = np.append(self._incarnation, 0)
            self._last_seq = np.append(self._last_seq, -1)
            self._last_seq_s = np.append(self._last_seq_s, 0.0)
        return index


def _moved(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """bool[n]: whether any of the rates of row i [n, D] moved by more than `NEWS_CHANGE` of the larger."""
    return (np.abs(after - before) > NEWS_CHANGE * np.maximum(np.abs(before), np.abs(after))).any(axis=1)


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
