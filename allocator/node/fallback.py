"""What a broker does with a group's limit when it stops hearing reports for it: the named fallbacks.

A broker that heard no report of another broker for a group (a partition, sustained loss, its membership
registry unreachable) for `after_rounds` allocations stops trusting its view of that group and applies its
fallback until a report comes back; the round one does, the policy's limit applies again. The modes:

- `none`: no fallback; the policy keeps working on whatever view is left (the entries of silent peers stay
  until they expire, after which the broker sees itself alone). quotalab's behaviour before fallbacks.
- `hold`: keep the limit the broker had when the fallback started (what Numaflow effectively does: the last
  agreed pool size stays forever when its store is unreachable).
- `open`: the whole quota (Envoy's global rate limit fails open by default).
- `closed`: the floor (fail closed).
- `share`: the quota over the last known number of brokers of the group, itself included (the last view
  size of a round in which a report was heard).
- `decay`: from the held limit toward `share`, a straight line reached after `decay_rounds` (CockroachDB's
  tenant limiter falls back to its refill rate plus what is left of its burst spread over an hour).

A broker that was alone with a group (last known number of brokers 1) hears nothing by design: that is not
silence, and no fallback applies. Every fallback limit is at most the quota. Pure numpy, vectorised over
groups, no clock: rounds are counted by the caller's calls to `Fallback.step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("none", "hold", "open", "closed", "share", "decay")


@dataclass(frozen=True)
class FallbackSettings:
    mode: str = "none"
    # Allocations without a report before the fallback applies: a peer whose usage does not change reports only
    # every `force_every` rounds, so this must be longer (the scenario checks it).
    after_rounds: int = 10
    decay_rounds: int = 10  # `decay`: allocations from the held limit to the share

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"fallback mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.after_rounds < 1 or self.decay_rounds < 1:
            raise ValueError("after_rounds and decay_rounds must be >= 1")


def fallback_limit(
    mode: str,
    held_limit: np.ndarray,
    quota: np.ndarray,
    known_brokers: np.ndarray,
    rounds_in_fallback: np.ndarray,
    decay_rounds: int,
    floor: float,
) -> np.ndarray:
    """[G, D] the limits of `mode` (not `none`), at most the quota; `known_brokers` and `rounds_in_fallback`
    ([G]: 0 in the fallback's first round) broadcast over the dimensions."""
    quota = np.asarray(quota, dtype=np.float64)
    share = quota / np.maximum(np.asarray(known_brokers, dtype=np.float64), 1.0)[:, None]
    held = np.minimum(held_limit, quota)  # a quota cut during the silence applies
    if mode == "hold":
        limit = held
    elif mode == "open":
        limit = quota
    elif mode == "closed":
        limit = np.full_like(quota, floor)
    elif mode == "share":
        limit = share
    elif mode == "decay":
        progress = np.minimum((np.asarray(rounds_in_fallback, dtype=np.float64) + 1.0) / decay_rounds, 1.0)
        limit = held + (share - held) * progress[:, None]
    else:
        raise ValueError(f"no fallback limit for mode {mode!r}")
    return np.minimum(limit, quota)


class Fallback:
    """The silence of each group as one broker hears it, and the limits its fallback gives.

    Per allocation: `step(heard, view_brokers, limit_before, policy_limit, quota, floor)`. `heard[G]` says a
    report of another broker refreshed the group's view since the last step, `view_brokers[G]` counts the
    brokers in the view with this one (after the round's cleanup).
    """

    def __init__(self, settings: FallbackSettings, n_groups: int, n_dimensions: int) -> None:
        self.settings = settings
        self.silent_rounds = np.zeros(n_groups, dtype=np.int64)
        self.known_brokers = np.ones(n_groups, dtype=np.int64)
        self.held_limit = np.zeros((n_groups, n_dimensions))
        self.active = np.zeros(n_groups, dtype=bool)

    def forget(self, view_brokers: np.ndarray) -> None:
        """Brokers the membership declared dead are known to be gone: the last known number of brokers shrinks
        to the view (never grows: growth is only learnt from reports)."""
        self.known_brokers = np.minimum(self.known_brokers, view_brokers)

    def step(
        self,
        heard: np.ndarray,
        view_brokers: np.ndarray,
        limit_before: np.ndarray,
        policy_limit: np.ndarray,
        quota: np.ndarray,
        floor: float,
    ) -> np.ndarray:
        """[G, D] the limits to apply: the policy's, or the fallback's for the groups silent long enough."""
        heard = np.asarray(heard, dtype=bool)
        self.known_brokers = np.where(heard, np.maximum(view_brokers, 1), self.known_brokers)
        self.silent_rounds = np.where(heard, 0, self.silent_rounds + 1)
        if self.settings.mode == "none":
            return policy_limit
        silent = (self.silent_rounds >= self.settings.after_rounds) & (self.known_brokers > 1)
        starting = silent & ~self.active
        self.held_limit[starting] = limit_before[starting]
        self.active = silent
        if not silent.any():
            return policy_limit
        limit = fallback_limit(
            self.settings.mode,
            self.held_limit,
            quota,
            self.known_brokers,
            self.silent_rounds - self.settings.after_rounds,
            self.settings.decay_rounds,
            floor,
        )
        limited = np.isfinite(quota)  # an unlimited quota stays unlimited
        return np.where(silent[:, None] & limited, limit, policy_limit)
