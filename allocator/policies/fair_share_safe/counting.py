"""How fair-share-safe counts its peers: each at the usage it can be known to hold.

The residual a broker may take is the pool less what its peers are counted at, so a peer counted low is room
taken from it and a peer counted high is room left unused. The principle: a peer counts at its usage as last
heard, except where that is not known, and then at its max-min fair share of this broker's view:

- a peer the membership registry lists as serving the group but never heard counts at its fair share, wanting
  as much as it can get (it may have started this very round: every peer leaves it that room), less what the heard
  peers are counted at above their own fair shares: they read the same listing and step down to their shares at
  their next allocation, and the newcomer takes no room before every live broker has read it (it listens until
  the registry acknowledges it), so their excess is room already set aside for it. Counting both, every
  incumbent made room for the newcomer alone: each cut by its whole share, and the group ran at a fraction of
  its quota for a round (a realtime join starved an incumbent). So does a peer listed anew that was heard only
  before its listing: the usage table forgets what it said then (`UsageTable.update_roster`). While it stays
  unheard its count never falls: the peer may have heard this broker want less and taken the rest, and steps
  down only when it hears the rise (counted at its share of this broker's new want, a broker whose demand rose
  took room its unheard peer held: a random trial went 25% over its quota in bursts);
- a peer silent for a forced-report cycle (at least one of its forced reports was lost) counts at its fair
  share: its last usage is old news either way, since a peer that heard what moved its share has stepped to
  it, down or up (counted at the floor it was last heard at, at its cold start, it left a newcomer room that
  was not free: `hosted-idle-then-busy` at 30% loss in bursts ran at 120% of its quota for a round in 3 of a
  hundred seeds);
- a peer above its fair share counts above it only by as much as it used while it was within its share, or
  at its usage if that fits in what it held plus the room this broker's last allocation left unclaimed: an
  honest peer that has not yet heard what moved its share still holds what it held, and may have risen into
  room it saw free while reports are lost (a peer whose rise this broker heard, when the peer did not: counting
  it at its old usage took the same room twice; without loss every peer heard the same reports, and no room is
  believed), while a liar's claim jumps above anything it held and any room, and counts at its share at once;
  an excess that lasts two forced-report cycles counts at the share alone (by then an honest peer has heard a
  forced report of the change);
- a peer first heard above its fair share (it may have held that room before this broker came, and has not
  stepped down for it yet) counts at its usage for one allocation more: the registry lists a newcomer the round
  it starts, and every peer makes room for a listed newcomer at its next allocation. So does a peer heard above
  its share the allocation a newcomer is first listed (`newly_listed`): it steps down for it as this broker does,
  and a broker that missed its step down would otherwise count it at its old share for two forced-report cycles
  (or until its silence shows) and hold itself below its own share meanwhile;
- for a newcomer, a peer heard above its fair share counts at that share from the allocation the registry says
  every live broker has read its listing (`stepped_down`): each read it in a round it allocated in, and made
  room for the newcomer then (on timers, a peer's report of its step down can come a round after the
  acknowledgement: waiting for it held a realtime newcomer at the floor an allocation longer than in lockstep).
  What the peers were counted at above their shares is the room they made for it (`made_room`);
- a quota change scales what a peer is known to hold by new / old, as every broker scales its own limit the
  round it sees the change (they all read the quota from the same store): a peer last heard before a cut counts
  at its part of the new quota, not at what it held under the old one (on real timers, brokers see a change up
  to a round apart, and a broker that counted its slower peers at their old usage took the floor).
"""

from __future__ import annotations

import numpy as np

from allocator.policies.hooks import OWN
from allocator.policies.rows import row_any, row_sum

EXCESS_TOLERANCE = 0.05  # a usage up to 5% above the fair share is within it (rounding, a round's jitter)


def _newcomer_reservation(
    counted: np.ndarray, fair_share: np.ndarray, heard: np.ndarray, unheard_listed: np.ndarray
) -> np.ndarray:
    """[G, K] what each listed peer never heard is counted at: its fair share, less its part of the excess the
    heard peers are counted at above their fair shares (room they give back as they make room for it)."""
    peers = slice(OWN + 1, None)
    excess = np.maximum(counted[:, peers] - fair_share[:, peers], 0.0) * heard[:, peers]
    reserved = row_sum(fair_share * unheard_listed)
    kept = 1.0 - np.minimum(np.divide(row_sum(excess), reserved, out=np.ones_like(reserved), where=reserved > 0), 1.0)
    return fair_share * kept[:, None]


class PeerMemory:
    """Per group, peer slot and dimension: the usage the peer reached while within its fair share (or when first
    heard), how many consecutive allocations it has been above it since, and what it counted at the last
    allocation; per group and slot, whether the registry listed it then."""

    def __init__(self, n_groups: int, n_dimensions: int) -> None:
        self.counted = np.zeros((n_groups, 1, n_dimensions))
        self.listed = np.zeros((n_groups, 1), dtype=bool)
        self.within_usage = np.zeros((n_groups, 1, n_dimensions))
        self.excess_rounds = np.zeros((n_groups, 1, n_dimensions), dtype=np.int64)
        self.known = np.zeros((n_groups, 1, n_dimensions), dtype=bool)  # heard at the last allocation
        self.never_within = np.zeros((n_groups, 1, n_dimensions), dtype=bool)  # above its share since first heard
        self.reserved = np.zeros((n_groups, 1, n_dimensions))  # a listed peer never heard: its count last time
        # per dimension: `reserved` may hold a count (a listed peer was unheard at the last allocation); an
        # allocation without one need not read the [G, K] array back to find it empty
        self.reserving = np.zeros(n_dimensions, dtype=bool)
        # per dimension: `excess_rounds` may hold a count (a peer was above its share at the last allocation); while
        # none is, an allocation neither clears nor compares the [G, K] counts
        self.exceeding = np.zeros(n_dimensions, dtype=bool)

    def counted_usage(
        self,
        dimension: int,
        usage: np.ndarray,
        fair_share: np.ndarray,
        heard: np.ndarray,
        silent: np.ndarray,
        unheard_listed: np.ndarray,
        excess_for_rounds: int,
        room_left: np.ndarray,
        newly_listed: np.ndarray,
        stepped_down: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """[G, K] what each entry counts at (see the module docstring), and [G] the room the peers made for this
        newcomer where they `stepped_down` (their excess over their shares, 0 elsewhere); `fair_share`, `heard`,
        `silent` and `unheard_listed` are [G, K] too, slot `OWN` counts at its own usage; `room_left` [G] is the
        room a peer may have risen into (0 without loss); `newly_listed` [G] the groups where every peer steps
        down at its next allocation for a newcomer the registry lists (another broker); `stepped_down` [G] the
        groups where the registry says every peer has read this newcomer's listing. Updates the memory of
        `dimension`; the counts returned are the memory's own array, valid until the next call."""
        n_slots = usage.shape[1]
        self._widen(n_slots)
        within_usage = self.within_usage[:, :n_slots, dimension]
        excess_rounds = self.excess_rounds[:, :n_slots, dimension]
        known = self.known[:, :n_slots, dimension]
        never_within = self.never_within[:, :n_slots, dimension]
        within = usage <= (1.0 + EXCESS_TOLERANCE) * fair_share
        beyond = ~within
        first_heard = heard & ~known
        # above its share since first heard: heard first now, or above it at the last allocation (it steps down; so
        # does every peer for a newcomer), and above it now
        never_within |= first_heard
        for_a_newcomer = newly_listed | stepped_down
        if for_a_newcomer.any():
            never_within |= for_a_newcomer[:, None]
        never_within &= beyond
        np.copyto(within_usage, usage, where=within | first_heard)
        unheard = ~heard
        anyone_unheard = unheard.any()  # the usual round hears every slot in use: no masked writes of nothing
        if anyone_unheard:
            np.copyto(within_usage, 0.0, where=unheard)  # freed: forget
        known[...] = heard
        exceeding = heard & beyond
        anyone_exceeding = exceeding.any()
        if anyone_exceeding:
            excess_rounds += 1
            excess_rounds *= exceeding
        elif self.exceeding[dimension]:
            excess_rounds[...] = 0
        # else the usual round: no count was, nor is, above 0, and the [G, K] counts are neither written nor read
        self.exceeding[dimension] = anyone_exceeding
        # only compared with the usage, so adding a room of 0 (no loss) is skipped: same result, one [G, K] pass less
        could_hold = within_usage + room_left[:, None] if room_left.any() else within_usage
        # computed in the memory's own array, step by step (each step overwrites where it applies): what it is
        # believed to hold, what it is known to hold, then no more than its usage
        counted = self.counted[:, :n_slots, dimension]
        np.maximum(fair_share, within_usage, out=counted)
        np.copyto(counted, usage, where=usage <= could_hold)
        if anyone_exceeding:  # else every count is 0, within the bound (at least 1)
            # where no peer was above its share since first heard, one bound for all: no [G, K] array of bounds
            believed_for = np.where(never_within, 1, excess_for_rounds) if never_within.any() else excess_for_rounds
            np.copyto(counted, fair_share, where=excess_rounds > believed_for)
        np.minimum(usage, counted, out=counted)
        if anyone_unheard:
            np.copyto(counted, 0.0, where=unheard)
        if silent.any():
            np.copyto(counted, fair_share, where=silent)
        counted[:, OWN] = usage[:, OWN]
        made_room = np.zeros(len(usage))
        if stepped_down.any():
            room_made = np.maximum(counted - fair_share, 0.0) * (heard & stepped_down[:, None])
            room_made[:, OWN] = 0.0
            counted -= room_made
            made_room = row_sum(room_made)
        reserving = unheard_listed.any()
        if reserving or self.reserving[dimension]:
            reserved = self.reserved[:, :n_slots, dimension]
            reservation = np.maximum(_newcomer_reservation(counted, fair_share, heard, unheard_listed), reserved)
            reserved[...] = np.where(unheard_listed, reservation, 0.0)
            np.copyto(counted, reservation, where=unheard_listed)
        self.reserving[dimension] = reserving
        self.counted[:, n_slots:, dimension] = 0.0
        return counted, made_room

    def read_roster(self, listed: np.ndarray, heard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The registry's changes since the last allocation, from its listing `listed` [G, K]: `newly_listed` [G],
        the groups where it lists a peer it did not list then (a newcomer every peer steps down for at its next
        allocation), and `freed` [G, D], what the peers it stopped listing (and not heard) counted at then: room
        freed by the registry's word, which every broker reads from the same store in the same round, not from a
        report some of them lost. Remembers `listed` for the next allocation."""
        self._widen(listed.shape[1])
        now_listed = np.zeros_like(self.listed)
        now_listed[:, : listed.shape[1]] = listed
        now_listed[:, OWN] = False
        if np.array_equal(now_listed, self.listed):  # the usual allocation: nobody listed anew, nobody gone
            return np.zeros(len(listed), dtype=bool), np.zeros((self.counted.shape[0], self.counted.shape[2]))
        gone = self.listed & ~now_listed
        gone[:, : listed.shape[1]] &= ~heard
        newly_listed = row_any(now_listed & ~self.listed)
        self.listed = now_listed
        if not gone.any():
            return newly_listed, np.zeros((self.counted.shape[0], self.counted.shape[2]))  # [G, D]
        return newly_listed, (self.counted * gone[:, :, None]).sum(axis=1)

    def rescale(self, ratio: np.ndarray) -> None:
        """A quota change, `ratio` [G, D] = new / old quota: what each peer is known to hold scales with it."""
        self.within_usage *= ratio[:, None, :]
        self.counted *= ratio[:, None, :]
        self.reserved *= ratio[:, None, :]

    def _widen(self, n_slots: int) -> None:
        if self.within_usage.shape[1] >= n_slots:
            return
        pad = ((0, 0), (0, n_slots - self.within_usage.shape[1]), (0, 0))
        self.within_usage = np.pad(self.within_usage, pad)
        self.excess_rounds = np.pad(self.excess_rounds, pad)
        self.known = np.pad(self.known, pad)
        self.never_within = np.pad(self.never_within, pad)
        self.counted = np.pad(self.counted, pad)
        self.reserved = np.pad(self.reserved, pad)
        self.listed = np.pad(self.listed, pad[:2])
