"""Numaflow's split (`numaflow-equal`): every broker takes `pool / N`, N the brokers that serve the group.

N is not in the usage table. The brokers agree on a pool size through the consensus store
(`allocator.node.pool_size`, Numaflow's heartbeats), an input a `BrokerNode` gets from its host every round (its
host calls `BrokerNode.set_pool_size`); a group's N is the agreed pool size, at most the brokers the membership registry
lists as serving the group (this one included): a group served by 3 of 4 brokers is split in 3. While no size is
agreed yet a newcomer holds the floor. The rule keeps the registry's signature and reads no store: N is the number
of brokers present in the view it is given, and the hooks give it the pool as its view (N present brokers), so the
common knobs (`min_share`, `smoothing`, `max_step`) work as for every policy. Given the usage view instead (a run
without a pool-size consensus, `policies.step`), N is the brokers in view: the seed's "use pod count to throttle"
without an external store.

The remainder is carried as fractional tokens: a limit is a rate, and the token bucket accrues fractions of a
token and keeps them from one second to the next, so a pool of 1 msg/s on 2 brokers is 0.5 msg/s each (a
message every 2 s) where Numaflow's `floor(pool / N)` gives each 0; 2 on 2 is 1 each. The limits of N
brokers add up to the pool.
"""

from __future__ import annotations

import numpy as np

from allocator.policies.chunks import RuleChunk
from allocator.policies.hooks import OWN, Hooks, PeerView
from allocator.policies.settings import PolicySettings


def pool_share(quota: np.ndarray, pool_size: float | np.ndarray) -> np.ndarray:
    """`quota / pool_size` (the whole quota for a pool size of 0 or 1); an infinite quota stays infinite."""
    return np.asarray(quota, dtype=np.float64) / np.maximum(pool_size, 1.0)


def numaflow_equal(chunk: RuleChunk, settings: PolicySettings) -> np.ndarray:
    """Every present broker's row is `quota / N`, N the brokers present in the chunk."""
    return np.repeat(pool_share(chunk.quota, chunk.n_present)[None, :], chunk.present.shape[0], axis=0)


class PoolSizeHooks(Hooks):
    """A broker that splits by the pool size agreed through the consensus store, once its host gives one."""

    splits_by_agreed_pool_size = True

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.splits_by_pool_size = False  # set_pool_size was called: N comes from the consensus
        self.pool_size: int | None = None

    def set_pool_size(self, pool_size: int | None) -> None:
        """None: a newcomer waiting for the first agreement, which holds its floor. A node never given one runs
        the rule on its usage view (by the brokers in it)."""
        self.splits_by_pool_size, self.pool_size = True, pool_size

    def start_limit(self, pool: np.ndarray, view: PeerView) -> np.ndarray:
        if not self.splits_by_pool_size:
            return super().start_limit(pool, view)
        return self.allocate(pool, view, np.zeros_like(pool), np.ones(len(pool), dtype=bool))

    def allocate(self, pool: np.ndarray, view: PeerView, limit: np.ndarray, serving: np.ndarray) -> np.ndarray:
        """The rule with the group's N as its view (N present brokers, this one first), the common knobs applied
        against the own limit; 0 while waiting for agreement (an unlimited pool stays unlimited)."""
        if not self.splits_by_pool_size:
            return super().allocate(pool, view, limit, serving)
        if self.pool_size is None:
            return np.where(np.isinf(pool), np.inf, 0.0)
        serving_the_group = view.listed[:, OWN + 1 :].sum(axis=1) + 1 if view.has_roster else self.pool_size
        brokers = np.clip(serving_the_group, 1, max(self.pool_size, 1))
        present = np.arange(max(self.pool_size, 1))[None, :] < np.broadcast_to(brokers, len(pool))[:, None]
        usage = np.zeros(present.shape)
        return np.stack([self.rule(pool[:, d], limit[:, d], usage, None, present) for d in range(self.n_dimensions)], 1)
