"""fair-share-safe's broker: the mechanisms of this folder, called where `BrokerNode`'s round asks its hooks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from allocator.policies.decisions import CountedAs
from allocator.policies.fair_share_safe import quota, reporting, rule, start
from allocator.policies.fair_share_safe.counting import EXCESS_TOLERANCE, PeerMemory
from allocator.policies.hooks import OWN, Hooks, PeerView, Traffic
from allocator.policies.report_suppressor import ReportSuppressor, Selection
from allocator.policies.rows import row_any, row_sum
from allocator.policies.waterfill import MaxMinFairMemo, max_min_fair

HELD_TOLERANCE = 0.05  # a limit under 95% of the broker's fair share is held below it; room over 5% is wasted


class SafeHooks(Hooks):
    """The per-group state of one broker: allocations since it started serving each group, the groups it started
    serving that the registry has not yet said every broker knows (a newcomer listens meanwhile), whether a
    newcomer was heard or listed (answer it), whether the last allocation held this broker below its fair share
    and for how many allocations a peer has been (report every round), the room it left unclaimed (per
    dimension), and what each peer is known to hold and where the registry listed it (`PeerMemory`)."""

    keeps_listed_peers = True  # a live peer the registry lists keeps its entry, however long its reports are lost
    claims_estimated_demand = True  # every report carries the demand its limiter tells
    relays_news = True  # a few brokers pass a peer's news on (`news_relays`)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.rounds_served = np.zeros(self.n_groups, dtype=np.int64)
        self.unacknowledged = np.zeros(self.n_groups, dtype=bool)
        self.listening = np.zeros(self.n_groups, dtype=bool)
        self.newcomer = np.zeros(self.n_groups, dtype=bool)
        self.held = np.zeros(self.n_groups, dtype=bool)
        self.peer_held_for = np.zeros(self.n_groups, dtype=np.int64)
        self.room_left = np.zeros((self.n_groups, self.n_dimensions))
        self.memory = PeerMemory(self.n_groups, self.n_dimensions)
        self.fair_share_memos = [MaxMinFairMemo() for _ in range(self.n_dimensions)]  # the last allocation's splits

    def news_relays(self, chance_all_lost: Callable[[int], float]) -> tuple[int, int]:
        """As many relayers as leave a change unheard for a round with odds of at most `lost_change_odds`, each in as
        many of the author's reports as this broker sends copies of its own changes (`reporting.relayers_needed`):
        a peer that lost a change on the author's link hears it from another broker the next round (one link
        losing a change three rounds in a row held a group off its share for five rounds at 30% loss, and for
        thirteen in bursts), and a change costs a few messages more however many brokers hear it."""
        odds = self.bound.settings.lost_change_odds
        copies = reporting.copies_needed(chance_all_lost, odds, self.force_every)
        return reporting.relayers_needed(chance_all_lost(1), odds), copies

    def start_limit(self, pool: np.ndarray, view: PeerView) -> np.ndarray:
        return start.start_limit(pool, view)

    def claimed_demand(self, traffic: Traffic, round_s: float) -> np.ndarray:
        return reporting.throttled_demand(traffic, round_s)

    def watched(self, usage: np.ndarray, demand: np.ndarray) -> np.ndarray:
        """The usage and the demand: a change of either is reason enough to report."""
        return np.hstack([usage, demand])

    def select_reports(
        self,
        suppressor: ReportSuppressor,
        watched: np.ndarray,
        serving: np.ndarray,
        chance_all_lost: Callable[[int], float],
    ) -> Selection:
        copies = reporting.copies_needed(chance_all_lost, self.bound.settings.lost_change_odds, self.force_every)
        every_round = self.newcomer | self.listening | self.held
        self.newcomer[:] = False
        return reporting.select_reports(suppressor, watched, serving, copies, every_round)

    def heard_newcomers(self, rows: np.ndarray) -> None:
        self.newcomer[rows] = True

    def allocate(self, pool: np.ndarray, view: PeerView, limit: np.ndarray, serving: np.ndarray) -> np.ndarray:
        """Per dimension: the fair share of every broker of the view (the listed ones never heard wanting the whole
        pool), each peer counted at what it is known to hold (`counting`), the rule; a rise taken at the pace news
        travels, into its part of the room left unclaimed for a round, of the room the registry freed and of the
        room the peers made for it as a newcomer (`start.paced`); a newcomer keeps its start limit while it
        listens. A limit under its fair share asks for a report every round, and so does a peer held under its
        fair share beside room left unclaimed for longer than a paced rise takes (`rise_rounds`): it is missing
        somebody's report (a broker it never heard counts at a fair share of the whole pool), which only an
        answer brings."""
        unheard = view.listed & ~view.present
        present = view.present | unheard
        newly_listed, freed = self.memory.read_roster(view.listed, view.present)
        unacknowledged = (self.unacknowledged | (self.rounds_served == 0)) & serving
        newly_acknowledged = unacknowledged & view.acknowledged  # every peer read this broker's listing
        new_limit = np.empty_like(limit)
        held = np.zeros(self.n_groups, dtype=bool)
        peer_held = np.zeros(self.n_groups, dtype=bool)
        counted_peers = np.empty_like(limit)
        risers = np.empty_like(limit)
        made_room = np.empty_like(limit)  # by the peers, for this broker as a newcomer
        believed_room = self.room_left if view.loss > 0 else np.zeros_like(self.room_left)
        bounded_pool = np.where(np.isfinite(pool), pool, 0.0)
        for d in range(self.n_dimensions):
            wants, fair_share = fair_shares(pool[:, d], view, d, self.fair_share_memos[d])
            counted, made_room[:, d] = self.memory.counted_usage(
                d,
                view.usage[:, :, d],
                fair_share,
                view.present,
                view.silent,
                unheard,
                2 * self.force_every,
                believed_room[:, d],
                newly_listed,
                newly_acknowledged,
            )
            if self.decisions is not None:
                self.decisions.count(
                    d, counted, counted_as(view, unheard, counted, view.usage[:, :, d], newly_acknowledged)
                )
            counted_peers[:, d] = row_sum(counted[:, OWN + 1 :])
            risers[:, d] = start.risers(wants, fair_share, counted, present, EXCESS_TOLERANCE)
            split, new_limit[:, d] = rule.own_safe_limit(pool[:, d], fair_share, counted, present)
            if self.decisions is not None:
                record = self.decisions.rule(pool[:, d], limit[:, d], counted, wants, present)
                record(slice(None), "rule", split[None])
                record(slice(None), "clamp", new_limit[None, :, d], quota=pool[:, d])
            held_below = (1.0 - HELD_TOLERANCE) * fair_share
            held |= new_limit[:, d] < held_below[:, OWN]
            peer_held_below = view.usage[:, :, d] < held_below  # a peer as it last reported
            peer_held_below &= view.present
            peer_held |= row_any(peer_held_below[:, OWN + 1 :])
        freed += made_room
        room = (self.room_left + freed) / risers
        new_limit = start.paced(limit, new_limit, view.loss, room)
        if self.decisions is not None:
            self.decisions.step("paced", new_limit, previous=limit, loss=view.loss, room=room)
        self.unacknowledged = unacknowledged & (not view.acknowledged)
        self.listening = start.listening(self.unacknowledged, self.rounds_served, view.has_roster) & serving
        new_limit = np.where(self.listening[:, None], np.minimum(new_limit, limit), new_limit)
        if self.decisions is not None:
            self.decisions.step("listening", new_limit, previous=limit)
        self.room_left = start.unclaimed(pool, counted_peers, new_limit)
        wasted = row_any(self.room_left > HELD_TOLERANCE * bounded_pool)
        self.peer_held_for = np.where(peer_held & wasted & serving, self.peer_held_for + 1, 0)
        self.held = (held | (self.peer_held_for > start.rise_rounds(view.loss, HELD_TOLERANCE))) & serving
        self.rounds_served = np.where(serving, self.rounds_served + 1, 0)
        return new_limit

    def quota_changed(self, old: np.ndarray, new: np.ndarray, limit: np.ndarray, view: PeerView) -> np.ndarray:
        """The limits scale with the quota at once (`quota.rescaled`), and none stays above its broker's fair
        share of the new quota: its peers count it at no more (a peer heard above its share steps down at its next
        allocation), so a broker that sees a change a round after them must not keep more than a scaled limit
        from the old quota's split."""
        ratio = quota.ratio(old, new)
        self.memory.rescale(ratio)
        self.room_left *= ratio  # the peers' part and this broker's limit both scale
        own_share = np.stack([fair_shares(new[:, d], view, d)[1][:, OWN] for d in range(self.n_dimensions)], axis=1)
        own_share = np.where(np.isinf(new), np.inf, own_share)
        return np.minimum(quota.rescaled(old, new, limit, view.present.sum(axis=1)), own_share)


def counted_as(
    view: PeerView, unheard: np.ndarray, counted: np.ndarray, usage: np.ndarray, stepped_down: np.ndarray
) -> np.ndarray:
    """[G, K] why each slot counts at what `PeerMemory.counted_usage` counted it at (`CountedAs`, for the record of
    the allocation): below its usage, a peer heard is capped, or stepped down for this newcomer (`stepped_down`)."""
    below = view.present & (counted < usage)
    reason = np.where(below, np.where(stepped_down[:, None], CountedAs.MADE_ROOM, CountedAs.CAPPED), CountedAs.HEARD)
    reason = np.where(view.present, reason, CountedAs.NOT_IN_VIEW)
    reason = np.where(view.silent, CountedAs.SILENT, np.where(unheard, CountedAs.NEWCOMER, reason))
    reason[:, OWN] = CountedAs.ITSELF
    return reason


def fair_shares(
    pool: np.ndarray, view: PeerView, d: int, memo: MaxMinFairMemo | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """([G, K], [G, K]) what each broker of the view wants in dimension `d` (its demand, else its usage; a peer
    the registry lists but this broker never heard, the whole pool) and its max-min fair share of `pool` [G]
    (split again by `memo` only where the pool or the wants changed since its last split, when given)."""
    wants = view.usage[:, :, d] if view.demand is None else view.demand[:, :, d]
    if not view.present.all():  # else every slot in use is present (the usual view at scale): its rates, as is
        wants = np.where(view.present, wants, 0.0)
        unheard = view.listed & ~view.present
        if unheard.any():
            np.copyto(wants, np.where(np.isfinite(pool), pool, 0.0)[:, None], where=unheard)
    # 0 for a broker neither heard nor listed: no mask to apply
    return wants, max_min_fair(pool, wants) if memo is None else memo.split(pool, wants)
