"""Token buckets for thousands of groups at once: `TokenBucket`'s arithmetic over numpy arrays.

One bucket per group, all sharing one time line. The array stores no clock: every method takes `now_ns`
(the broker node owns time), and brings every bucket up to date at that time before acting, so the array is
strongly consistent (one call serves a whole round, there is no hot path to save). It computes exactly what
a `TokenBucket` with `resolution_ns=0` computes, through the same `refill` and `throttle_duration`.

A rate of `np.inf` is an unlimited group: capacity and balance `inf`, `available` is `inf`, `consume`
never throttles, and no NaN appears anywhere (see `refill` for the one place it could).
"""

from __future__ import annotations

import numpy as np

from allocator.limiter.token_bucket import refill, throttle_duration


def _rates(rate_per_s: np.ndarray) -> np.ndarray:
    rate = np.array(rate_per_s, dtype=np.float64, ndmin=1)
    if rate.ndim != 1:
        raise ValueError(f"rate_per_s must be one rate per group (1-d), got shape {rate.shape}")
    if not np.all(rate > 0):  # also catches NaN
        raise ValueError("every rate must be > 0 tokens/s (np.inf for unlimited)")
    return rate


def _capacities(rate: np.ndarray, capacity: np.ndarray | float | None) -> np.ndarray:
    """Capacity follows the rate (one second's worth) unless given; unlimited groups hold `inf`."""
    if capacity is None:
        return rate.copy()
    cap = np.broadcast_to(np.asarray(capacity, dtype=np.float64), rate.shape)
    if not np.all(cap > 0):
        raise ValueError("every capacity must be > 0 tokens")
    return np.where(np.isinf(rate), np.inf, cap)


class TokenBucketArray:
    """`G` token buckets: `rate_per_s[G]` tokens/s, at most `capacity[G]` tokens, refilled lazily.

    `initial` (default: full) is the balance at the first time the array is told, `now_ns` here or the
    first method call. Settings `rate_per_s` and `capacity` are public arrays; do not write into them,
    use `set_rate`.
    """

    __slots__ = ("rate_per_s", "capacity", "_balance", "_last_ns")

    def __init__(
        self,
        rate_per_s: np.ndarray,
        capacity: np.ndarray | float | None = None,
        initial: np.ndarray | float | None = None,
        now_ns: int | None = None,
    ) -> None:
        self.rate_per_s = _rates(rate_per_s)
        self.capacity = _capacities(self.rate_per_s, capacity)
        if initial is None:
            balance = self.capacity.copy()
        else:
            balance = np.array(np.broadcast_to(np.asarray(initial, dtype=np.float64), self.rate_per_s.shape))
            if not np.all((balance <= self.capacity) & (balance > -np.inf)):  # NaN fails both
                raise ValueError("every initial balance must be a number of tokens <= its capacity")
        self._balance = np.where(np.isinf(self.rate_per_s), np.inf, balance)
        self._last_ns = now_ns  # None: the time line starts at the first call

    def __len__(self) -> int:
        return len(self.rate_per_s)

    def balance(self, now_ns: int) -> np.ndarray:
        """Balance per group at `now_ns` (negative while in debt, `inf` for unlimited groups). A copy."""
        return self._advance(now_ns).copy()

    def available(self, now_ns: int) -> np.ndarray:
        """Tokens each group can spend now without going into debt: the balance clipped at 0 (debt reads 0).

        `inf` for unlimited groups.
        """
        return np.maximum(self._advance(now_ns), 0.0)

    def consume(self, amounts: np.ndarray | float, now_ns: int) -> np.ndarray:
        """Deduct `amounts[G]` (always: accepted work cannot be rejected); True where tokens remain."""
        amounts = np.asarray(amounts, dtype=np.float64)
        if amounts.size and not (amounts.min() >= 0 and amounts.max() < np.inf):  # NaN fails both comparisons
            raise ValueError("amounts must be finite numbers of tokens >= 0")
        balance = self._advance(now_ns)
        np.subtract(balance, amounts, out=balance)
        return balance > 0

    def throttle_duration_s(self, now_ns: int) -> np.ndarray:
        """Seconds per group until the balance reaches `max(1, 1% of capacity)` (0 if there, or unlimited)."""
        return throttle_duration(self._advance(now_ns), self.rate_per_s, self.capacity)

    def set_rate(self, rate_per_s: np.ndarray, now_ns: int, capacity: np.ndarray | float | None = None) -> None:
        """Change every group's rate and capacity, keeping balance and debt.

        Capacity follows the rate (one second's worth) unless given. The time up to `now_ns` is refilled at
        the old rates first. A balance above its new capacity is cut to it; a group switching to unlimited is
        filled (`inf`), one switching back starts full.
        """
        rate = _rates(rate_per_s)
        if rate.shape != self.rate_per_s.shape:
            raise ValueError(f"expected {len(self.rate_per_s)} rates, got {len(rate)}")
        capacity = _capacities(rate, capacity)
        balance = self._advance(now_ns)
        self.rate_per_s = rate
        self.capacity = capacity
        self._balance = np.where(np.isinf(rate), np.inf, refill(balance, rate, capacity, 0))

    def hold_for(self, seconds: float, now_ns: int) -> None:
        """Set every capacity to `seconds` of its rate (`set_rate` with the same rates and `capacity=rate *
        seconds`), keeping balance and debt; `seconds` > 0. The rates were checked when set, so nothing is checked
        again: this runs every round for every group (`GroupLimiter.admit`)."""
        if not seconds > 0:
            raise ValueError(f"seconds must be > 0, got {seconds!r}")
        capacity = self.rate_per_s * seconds  # inf for an unlimited group
        # refill by no time: the cap; an unlimited group's balance is inf and stays inf
        refill(self._advance(now_ns), self.rate_per_s, capacity, 0, out=self._balance)
        self.capacity = capacity

    def _advance(self, now_ns: int) -> np.ndarray:
        """Refill every bucket for the time since the last call; returns the live balance array.

        No time (or a clock going backwards) changes nothing: every method leaves each balance within its capacity,
        so `refill`'s cap would find nothing to cut (and a round calls this several times at the same time)."""
        if self._last_ns is None:
            self._last_ns = now_ns
        elapsed_ns = now_ns - self._last_ns
        if elapsed_ns > 0:
            refill(self._balance, self.rate_per_s, self.capacity, elapsed_ns, out=self._balance)
            self._last_ns = now_ns
        return self._balance

    def __repr__(self) -> str:
        unlimited = np.isinf(self.rate_per_s)
        in_debt = self._balance <= 0
        return (
            f"TokenBucketArray(groups={len(self)}, unlimited={int(unlimited.sum())}, "
            f"without_tokens={int(in_debt.sum())}, debt={float(-self._balance[in_debt].sum()):g}, "
            f"last_ns={self._last_ns})"
        )
