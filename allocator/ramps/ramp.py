"""Ramp-up of a cluster-wide token pool, in the four modes of Numaflow's distributed throttling.

The pool starts at `min_tokens` in the first epoch that has requests and climbs toward `max_tokens` by one
slope, `(max_tokens - min_tokens) / ramp_duration_s` tokens, per step. Epochs are whole seconds; the caller
asks for the next pool only in epochs that have requests and reports how many tokens the last such epoch
used. The mode decides when a step is taken (seed: `numaflow-distributed-throttling.md`, "Throttling Modes"):

- `scheduled`: by the clock. The pool is `min_tokens` plus one slope per second since the first epoch with
  requests, whether the tokens were used or not and whether requests came or not.
- `relaxed`: by traffic. One slope per epoch with requests; a gap pauses the ramp, which then resumes where
  it left off.
- `only-if-used`: by use. One slope after an epoch whose utilisation (`used / pool`) reached
  `usage_threshold_pct`; otherwise, and across gaps, the pool stays where it is.
- `go-back-n`: by use, with penalties. Up one slope as `only-if-used`, but down one slope after an epoch
  below the threshold, and after a gap of n idle epochs, down n slopes more: the step the last epoch with
  requests earned comes first, then one slope off per idle epoch (the seed's chart with gaps: calls up to
  t=17 at a pool of 70, all used, none at t=18 and 19, and 60 at t=20: +10, then -20).

The pool never leaves `[min_tokens, max_tokens]`. `split` hands a pool out to its members in whole tokens.

Where this module deliberately differs from Numaflow's implementation (`rust/numaflow-throttling`):

1. Every mode starts at `min_tokens` on the first epoch with requests, whatever that epoch's number.
   Numaflow's `scheduled` mode counts the seconds since epoch 0, so its first call at a Unix-time epoch
   jumps straight to the maximum; its other modes already add a slope on the first call.
2. `split` gives every member `floor(pool / n)` tokens plus one of the `floor(pool) mod n` left over, so no
   member gets 0 while the pool holds at least one token per member, and the parts add up to the whole
   tokens of the pool. Numaflow's pods each take `floor(pool / pool_size)`: a pool of 1 over 2 pods is 0
   each, and the remainder is never handed out.
3. A pool counts as fully used once all its whole tokens were used: the threshold asks for at most
   `floor(pool)` tokens, so whole-token consumers can take a fractional pool (10.5 tokens, 10 used) past a
   threshold of 100%. Numaflow adds `round(slope / pool * 100)` percentage points to the utilisation for
   the same reason, and rounds the utilisation to a whole percentage; we compare exactly.
4. `go-back-n` has no cool-down period and no ramp-down percentage: a gap of n idle epochs takes exactly n
   slopes off, as the seed describes it.
5. Arithmetic is float64 and the pool is a float (Numaflow: f32, truncated to whole tokens when refilled);
   an epoch that does not increase is an error (Numaflow's `saturating_sub` reads it as no time passed).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable

# A mode: (slopes above min now, epochs since the first epoch with requests, idle epochs since the last
# one, whether the last epoch with requests reached the usage threshold, the top of the ramp in slopes) ->
# slopes above min next. The caller clamps the result to [0, top].
ModeStep = Callable[[float, int, int, bool, float], float]


def _scheduled(slopes: float, elapsed_epochs: int, idle_epochs: int, reached: bool, top: float) -> float:
    """One slope per second since the first epoch with requests, whatever happened since."""
    return elapsed_epochs


def _relaxed(slopes: float, elapsed_epochs: int, idle_epochs: int, reached: bool, top: float) -> float:
    """One slope per epoch with requests; idle epochs count for nothing."""
    return slopes + 1


def _only_if_used(slopes: float, elapsed_epochs: int, idle_epochs: int, reached: bool, top: float) -> float:
    """One slope if the last epoch with requests used enough of its pool, else no change."""
    return slopes + 1 if reached else slopes


def _go_back_n(slopes: float, elapsed_epochs: int, idle_epochs: int, reached: bool, top: float) -> float:
    """Up one slope (at most to the top) if the last epoch with requests used enough, down one if not; then
    back one slope per idle epoch."""
    return (min(slopes + 1, top) if reached else slopes - 1) - idle_epochs


MODES: dict[str, ModeStep] = {
    "scheduled": _scheduled,
    "relaxed": _relaxed,
    "only-if-used": _only_if_used,
    "go-back-n": _go_back_n,
}


def _check_number(name: str, value: float) -> float:
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


class Ramp:
    """A token pool ramping from `min_tokens` to `max_tokens` over `ramp_duration_s`, in one of `MODES`.

    Call `next_pool(epoch, used)` once per epoch that has requests, with epochs increasing; epochs without
    requests are simply not passed in. `used` is None on the first call and, after it, the number of tokens
    used in the previous call's epoch (it may exceed that pool: overshoot counts as full use). Every mode
    takes the same arguments, so a mode can be swapped by name without changing the caller.

    The settings are public to read. The state is how many slopes the pool stands above `min_tokens`: a
    float in `[0, ramp_duration_s]`, where the top (not necessarily a whole number of slopes) is
    `max_tokens` exactly. Counting slopes rather than adding tokens keeps the pool free of accumulated
    rounding: after `ceil(ramp_duration_s)` steps up it is `max_tokens`, not a hair below.
    """

    __slots__ = (
        "mode",
        "max_tokens",
        "min_tokens",
        "ramp_duration_s",
        "usage_threshold_pct",
        "slope_tokens",
        "_mode_step",
        "_threshold_fraction",
        "_first_and_last_epoch",
        "_slopes_above_min",
        "_pool",
    )

    def __init__(
        self,
        mode: str,
        max_tokens: float,
        min_tokens: float,
        ramp_duration_s: float,
        usage_threshold_pct: float = 50,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.max_tokens = _check_number("max_tokens", max_tokens)
        self.min_tokens = _check_number("min_tokens", min_tokens)
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be >= 0 and <= max_tokens {max_tokens!r}, got {min_tokens!r}")
        self.ramp_duration_s = _check_number("ramp_duration_s", ramp_duration_s)
        if not self.ramp_duration_s > 0:
            raise ValueError(f"ramp_duration_s must be > 0 seconds, got {ramp_duration_s!r}")
        self.usage_threshold_pct = _check_number("usage_threshold_pct", usage_threshold_pct)
        if not 0 < self.usage_threshold_pct <= 100:
            raise ValueError(f"usage_threshold_pct must be in (0, 100], got {usage_threshold_pct!r}")
        self.slope_tokens = (self.max_tokens - self.min_tokens) / self.ramp_duration_s  # added per step
        self._mode_step = MODES[mode]
        self._threshold_fraction = self.usage_threshold_pct / 100
        self._first_and_last_epoch: tuple[int, int] | None = None  # epochs with requests; None before any
        self._slopes_above_min = 0.0
        self._pool = self.min_tokens  # the pool of the last epoch with requests (or of the first one to come)

    def next_pool(self, epoch: int, used: float | None) -> float:
        """The pool for `epoch`, given the tokens `used` in the last epoch with requests (None on the first call).

        The last epoch reached the threshold when `used >= min(pool * usage_threshold_pct / 100, floor(pool))`:
        the utilisation `used / pool`, except that no pool asks for more than its whole tokens.
        """
        epoch = operator.index(epoch)
        if self._first_and_last_epoch is None:
            if used is not None:
                raise ValueError(f"used must be None on the first call (no epoch had requests yet), got {used!r}")
            self._first_and_last_epoch = (epoch, epoch)
            return self._pool
        first_epoch, last_epoch = self._first_and_last_epoch
        if epoch <= last_epoch:
            raise ValueError(f"epoch must increase: got {epoch} after {last_epoch}")
        if used is None or _check_number("used", used) < 0:
            raise ValueError(f"used must be a finite number of tokens >= 0 after the first call, got {used!r}")
        reached = used >= min(self._pool * self._threshold_fraction, math.floor(self._pool))
        elapsed, idle = epoch - first_epoch, epoch - last_epoch - 1
        slopes = self._mode_step(self._slopes_above_min, elapsed, idle, reached, self.ramp_duration_s)
        self._slopes_above_min = min(max(slopes, 0.0), self.ramp_duration_s)
        self._first_and_last_epoch = (first_epoch, epoch)
        self._pool = self._pool_at(self._slopes_above_min)
        return self._pool

    def _pool_at(self, slopes_above_min: float) -> float:
        """`min_tokens + slopes * slope_tokens`, and `max_tokens` exactly at the top of the ramp."""
        if slopes_above_min >= self.ramp_duration_s:
            return self.max_tokens
        return min(self.min_tokens + slopes_above_min * self.slope_tokens, self.max_tokens)

    def __repr__(self) -> str:
        return (
            f"Ramp({self.mode!r}, max_tokens={self.max_tokens:g}, min_tokens={self.min_tokens:g}, "
            f"ramp_duration_s={self.ramp_duration_s:g}, usage_threshold_pct={self.usage_threshold_pct:g}; "
            f"pool={self._pool:g}, slopes_above_min={self._slopes_above_min:g}, "
            f"first_and_last_epoch={self._first_and_last_epoch})"
        )


def split(pool: float, pool_size: int, start: int = 0) -> list[float]:
    """The pool's whole tokens shared by `pool_size` members: parts differ by at most 1 and sum to `floor(pool)`.

    Each member gets `floor(pool) // pool_size`, and the `floor(pool) % pool_size` tokens left over go one each
    to the members from index `start` on (wrapping around), so no member gets 0 while `pool >= pool_size`.
    Pass the epoch as `start` to rotate the extra tokens so that no member is favoured over time. The
    fraction of a token below `floor(pool)` is not handed out (the ramp keeps it: the next pool is computed
    from the unrounded one).
    """
    pool_size = operator.index(pool_size)
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1 member, got {pool_size!r}")
    if _check_number("pool", pool) < 0:
        raise ValueError(f"pool must be >= 0 tokens, got {pool!r}")
    share, extra = divmod(math.floor(pool), pool_size)
    first = operator.index(start) % pool_size
    return [float(share + ((i - first) % pool_size < extra)) for i in range(pool_size)]
