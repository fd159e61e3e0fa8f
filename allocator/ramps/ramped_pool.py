"""Ramped quotas in a broker: one `allocator.ramps.ramp.Ramp` per ramped group and dimension, fed from the view.

There is no central pool. Every broker keeps its own `Ramp` for each ramped group it may serve and feeds it
what it sees of the whole cluster: the tokens used in an epoch are the usage of every broker in its view (its
own measured, its peers' as reported) times the time each round covered. Epochs are whole seconds of the
clock passed in (the monotonic run clock, the same for every broker whatever its wall-clock skew); an epoch
has requests when a broker in the view serves the group. The ramp moves once per epoch with requests, at the
first allocation of that epoch, on the tokens used in the last epoch with requests.

Brokers that see the same reports keep identical ramps (lockstep without loss: every broker's view holds
every broker's usage of the round when it allocates), so they agree on the pool. Under loss a broker keeps a
peer's last report instead of the missed one; its `used` then differs from a peer's only by that report's
change, and the pools differ only when that moves the utilisation across `usage_threshold_pct`: by one
slope per such epoch (`only-if-used`, `go-back-n`; `relaxed` differs only when one broker sees an epoch
without requests that another does not, and `scheduled` never differs after a common start). A broker that
starts later starts its ramp at `min_tokens`. Each broker splits its own pool with its policy: no limit is
above that broker's pool (so never above the quota), and what the policy promises about the sum of the
limits holds against the largest of the brokers' pools when they disagree.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from allocator.ramps.ramp import Ramp

EPOCH_S = 1.0
_EPS_S = 1e-9  # rounds at multiples of a float interval: a round at 2.9999999999 s belongs to epoch 3


@dataclass(frozen=True)
class GroupRamp:
    """A ramped quota: group `group_id`'s quota in dimension `dimension` (an index into the node's dimensions)
    ramps from `min_tokens` to `max_tokens` (per 1-s epoch, so per second) over `duration_s`."""

    group_id: int
    dimension: int
    mode: str
    min_tokens: float
    max_tokens: float
    duration_s: float
    usage_threshold_pct: float = 50.0


class RampedPools:
    """The ramps of the ramped entries among a broker's groups (`group_ids`, rows of its [G, D] arrays).

    `pool` is what the next round runs on. Limits computed at the end of a round apply to the next one, so when
    the next round starts a new epoch, its pool is the one the ramp will give that epoch if it has requests
    (a copy of the ramp steps on this epoch's use): the pool of an epoch is in force during that epoch, as in
    Numaflow, not one round late. The ramp itself steps only in epochs that do have requests, with the same
    arguments, so it gives the same pool.
    """

    def __init__(self, ramps: Sequence[GroupRamp], group_ids: np.ndarray) -> None:
        row_of = {int(group_id): row for row, group_id in enumerate(np.asarray(group_ids).tolist())}
        mine = [ramp for ramp in ramps if ramp.group_id in row_of]
        self.rows = np.array([row_of[ramp.group_id] for ramp in mine], dtype=np.int64)
        self.dimensions = np.array([ramp.dimension for ramp in mine], dtype=np.int64)
        self.ramps = [
            Ramp(ramp.mode, ramp.max_tokens, ramp.min_tokens, ramp.duration_s, ramp.usage_threshold_pct)
            for ramp in mine
        ]
        n_ramps = len(mine)
        self.pool = np.array([ramp.min_tokens for ramp in mine], dtype=np.float64)  # for the next round
        self._epoch: int | None = None
        self._epoch_pool = self.pool.copy()  # the pool the ramp gave the current epoch (where `_moved`)
        self._started = np.zeros(n_ramps, dtype=bool)  # the ramp had its first epoch with requests
        self._moved = np.zeros(n_ramps, dtype=bool)  # the ramp stepped in the current epoch
        self._used_in_epoch = np.zeros(n_ramps)
        self._requests_in_epoch = np.zeros(n_ramps, dtype=bool)
        self._last_used = np.zeros(n_ramps)  # tokens used in the last epoch with requests before the current one

    def __len__(self) -> int:
        return len(self.ramps)

    def capped(self, quota: np.ndarray) -> np.ndarray:
        """[G, D] what the policy splits: the quota, with each ramped entry's pool where ramped, never above the
        quota (a quota event may cut it below the ramp); without ramps the quota itself (never written through)."""
        if not len(self.ramps):
            return quota
        pool = quota.copy()
        pool[self.rows, self.dimensions] = np.minimum(self.pool, quota[self.rows, self.dimensions])
        return pool

    def step_on_view(self, now_s: float, round_s: float, usage: np.ndarray, present: np.ndarray) -> None:
        """`step` on a broker's view: `usage [G, K, D]` of the entries `present [G, K]`, summed per ramped entry."""
        if len(self.ramps):
            heard = present[self.rows]
            self.step(now_s, round_s, (usage[self.rows, :, self.dimensions] * heard).sum(axis=1), heard.any(axis=1))

    def step(self, now_s: float, round_s: float, usage: np.ndarray, requests: np.ndarray) -> np.ndarray:
        """The pools for the next round, after a round at `now_s` that covered `round_s` seconds (the next one is
        taken to be as long), in which the cluster (as viewed) used `usage[n]` per second and had requests where
        `requests[n]`; one entry per ramped entry."""
        epoch = _epoch(now_s)
        if epoch != self._epoch:
            self._last_used = np.where(self._requests_in_epoch, self._used_in_epoch, self._last_used)
            self._used_in_epoch[:] = 0.0
            self._requests_in_epoch[:] = False
            self._moved[:] = False
            self._epoch = epoch
        for index in np.flatnonzero(requests & ~self._moved).tolist():
            self._epoch_pool[index] = self.ramps[index].next_pool(epoch, self._used(index, self._last_used))
        self._started |= requests
        self._moved |= requests
        self._used_in_epoch += usage * round_s
        self._requests_in_epoch |= requests
        next_epoch = _epoch(now_s + round_s)
        if next_epoch == epoch:
            for index in np.flatnonzero(~self._moved).tolist():
                self.pool[index] = self._peek(index, epoch, self._last_used)
            self.pool[self._moved] = self._epoch_pool[self._moved]
        else:
            used = np.where(self._requests_in_epoch, self._used_in_epoch, self._last_used)
            for index in range(len(self.ramps)):
                self.pool[index] = self._peek(index, next_epoch, used)
        return self.pool

    def _used(self, index: int, used: np.ndarray) -> float | None:
        return float(used[index]) if self._started[index] else None

    def _peek(self, index: int, epoch: int, used: np.ndarray) -> float:
        """The pool ramp `index` would give `epoch` with `used` tokens, without stepping it."""
        return copy.copy(self.ramps[index]).next_pool(epoch, self._used(index, used))


def _epoch(now_s: float) -> int:
    return math.floor(now_s / EPOCH_S + _EPS_S)
