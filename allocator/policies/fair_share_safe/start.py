"""Where fair-share-safe's limit starts, how long it stays there, and how fast it rises: a broker new to a group
takes only the room it knows is free, until the others know it is there; any broker takes freed room at the pace
news of it travels."""

from __future__ import annotations

import math

import numpy as np

from allocator.policies.hooks import PeerView
from allocator.policies.rows import row_sum

LISTEN_ALLOCATIONS = 1  # without a registry, allocations a newcomer keeps its start limit (peers hear it meanwhile)


def start_limit(pool: np.ndarray, view: PeerView) -> np.ndarray:
    """[g, D] the floor (0, raised to `MIN_LIMIT` by the node) wherever the pool is bounded; unlimited stays
    unlimited. A broker new to a group takes no room before its first allocation, because no room is known to
    be free: its peers do not know of it yet, so their limits may add up to the whole pool whatever they last
    reported (a peer may have risen since, into the room this broker freed when it left), and another broker
    may be starting in the same round, counting on the same room. Its first allocation counts every broker the
    registry lists, and its peers make room for it (`listening`). `view` is not read: nothing in it is safe."""
    return np.where(np.isinf(pool), np.inf, 0.0)


def listening(unacknowledged: np.ndarray, rounds_served: np.ndarray, has_roster: bool) -> np.ndarray:
    """bool[G]: the groups whose newcomer keeps its start limit. With a registry, until it says every live broker
    has read that this broker serves the group (each then makes room for it at its next allocation: in lockstep
    the same round, on timers within an interval, later for a broker that lags); without one, for its first
    `LISTEN_ALLOCATIONS` allocations."""
    return unacknowledged if has_roster else rounds_served < LISTEN_ALLOCATIONS


def risers(
    wants: np.ndarray, fair_share: np.ndarray, counted: np.ndarray, present: np.ndarray, tolerance: float
) -> np.ndarray:
    """[G] how many brokers of the view (this one included) are counted below what they may rise to, the least of
    what they want and their fair share: the ones that may rise into room left unclaimed; at least 1."""
    rising = present & ((1.0 + tolerance) * counted < np.minimum(wants, fair_share))
    return np.maximum(row_sum(rising), 1)


def paced(limit: np.ndarray, new_limit: np.ndarray, loss: float, room_left: np.ndarray) -> np.ndarray:
    """[G, D] `new_limit` with each rise above `limit` cut to the share `1 - loss` of it, and, while reports are
    lost (`loss` > 0: the share of its peers' reports this broker measures as lost), to at most `room_left`, this
    broker's part of the room its last allocation left unclaimed (the room over the brokers that may rise into
    it, `risers`: every one of them saw the same room free, and took it at once); a cut applies at once.

    Room freed by a peer is free for every broker whose share grew, but when a report is lost brokers disagree on
    whose share grew: two that each think the room is theirs take it twice. A rise waits a round for room freed
    since the last allocation: by then a peer that rose into the same room has had its news sent twice (a change
    is reported in consecutive rounds), and a broker hears it unless both copies were lost. Room the registry
    freed (a peer whose session ended) is no report's news: every broker reads it from the same store in the same
    round, and the caller adds it to `room_left` at once (`PeerMemory.read_roster`); so does the room a
    newcomer's peers made for it after reading its listing, which every one of them set aside for it alone. It
    is taken at the pace reports arrive, which leaves room for the broker whose news was lost: without loss a
    broker takes its whole rise at once, at 30% loss 70% of it a round (the rest the next rounds)."""
    if loss == 0.0:
        return new_limit
    finite = np.isfinite(limit) & np.isfinite(new_limit)  # to or from unlimited: at once
    rise = np.maximum(np.subtract(new_limit, limit, out=np.zeros_like(new_limit), where=finite), 0.0)
    return new_limit - (rise - (1.0 - loss) * np.minimum(rise, room_left))


def rise_rounds(loss: float, tolerance: float) -> int:
    """The allocations a paced rise takes to come within `tolerance` of its target, as its peers see it (its
    report of the last step arrives a round later): 1 + the rounds until `loss ** rounds <= tolerance`."""
    return 1 if loss <= 0.0 else 1 + max(1, math.ceil(math.log(tolerance) / math.log(min(loss, 0.99))))


def unclaimed(pool: np.ndarray, counted_peers: np.ndarray, new_limit: np.ndarray) -> np.ndarray:
    """[G, D] the room an allocation leaves unclaimed, `pool - counted_peers - new_limit` (at least 0; 0 where the
    pool or the limit is unlimited): room a rise may take at the next allocation, and a peer may have risen into."""
    bounded = np.isfinite(pool) & np.isfinite(new_limit)
    left = np.subtract(pool, counted_peers + new_limit, out=np.zeros_like(new_limit), where=bounded)
    return np.maximum(left, 0.0)
