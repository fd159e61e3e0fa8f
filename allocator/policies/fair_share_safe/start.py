"""Where fair-share-safe's limit starts, and how long it stays there: a broker new to a group takes only the
room it knows is free, until the others can know it is there."""

from __future__ import annotations

import numpy as np

from allocator.policies.hooks import OWN, PeerView

LISTEN_ALLOCATIONS = 1  # allocations a newcomer keeps its start limit: the others learn it is there meanwhile


def start_limit(pool: np.ndarray, view: PeerView) -> np.ndarray:
    """[g, D] the start limit for the groups of `view`: the residual heard, `pool - sum(heard peers' usage)`, at
    most an equal share of the brokers it knows (heard or listed, itself included); 0 (the floor) while a broker
    it knows of has not been heard: a peer the registry lists but it never heard (that peer may hold the whole
    pool: it did not know this broker yet), or, without a roster, anyone at all. Unlimited stays unlimited."""
    peers = slice(OWN + 1, None)
    heard, listed = view.present[:, peers], view.listed[:, peers]
    others_usage = (view.usage[:, peers, :] * heard[:, :, None]).sum(axis=1)
    known = (heard | listed).sum(axis=1) + 1
    residual_heard = np.maximum(pool - others_usage, 0.0)
    start = np.minimum(pool / known[:, None], residual_heard)
    unknown_room = (listed & ~heard).any(axis=1) | ~heard.any(axis=1)
    return np.where(np.isinf(pool), np.inf, np.where(unknown_room[:, None], 0.0, start))


def listening(rounds_served: np.ndarray) -> np.ndarray:
    """bool[G]: the groups whose newcomer still listens (its first `LISTEN_ALLOCATIONS` allocations). The
    registry lists a newcomer the round it starts serving, and every peer makes room for a listed peer at its
    next allocation: by then a peer that allocates on its own timer (realtime) has done so once."""
    return rounds_served < LISTEN_ALLOCATIONS
