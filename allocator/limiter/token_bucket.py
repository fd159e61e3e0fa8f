"""A token bucket with PIP-322 semantics (Pulsar's `AsyncTokenBucket`), and the arithmetic it shares.

Tokens are added lazily from the elapsed clock time, never by a scheduler. Accepted work cannot be rejected,
so `consume` always deducts and the balance may go negative (debt); the caller throttles the producer
instead, and releases it after `throttle_duration_s()`.

Eventual consistency, as in Pulsar: the balance is brought up to date at most once per `resolution_ns`.
Between two updates `consume` only adds to a pending counter and answers from the last known balance minus
the pending tokens, which is conservative (the refill since the last update is not counted yet). The next
update adds the refill for the whole elapsed time, caps at the capacity, and then subtracts everything that
is pending, so no consumed token is ever lost. `balance()` and `throttle_duration_s()` force an update.

The pure functions `refill` and `throttle_duration` hold the arithmetic. They take floats or numpy arrays,
so `TokenBucket` and `allocator.limiter.bucket_array.TokenBucketArray` compute the same numbers.

A rate of `inf` is an unlimited bucket: its capacity and balance are `inf`, `consume` never throttles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np

NS_PER_S = 1_000_000_000
DEFAULT_RESOLUTION_NS = 16_000_000
_INF = math.inf  # a module global: one lookup less in `consume`

Num = TypeVar("Num", float, np.ndarray)


def refill(balance: Num, rate: Num, capacity: Num, elapsed_ns: float, out: np.ndarray | None = None) -> Num:
    """The balance after `elapsed_ns` of refill at `rate` tokens/s, capped at `capacity`.

    `balance + rate * elapsed / 1 s`, then `min(., capacity)`; debt is repaid first by the same addition.
    Works elementwise on numpy arrays; `elapsed_ns` is one number (all buckets of an array share a clock).
    No time (or a clock going backwards) adds nothing but still applies the cap, which is how a rate change
    trims a balance above the new capacity. Skipping the product when no time passed also keeps an
    unlimited bucket (`rate = inf`) away from `inf * 0 = nan`. `out` (arrays only): the array the result is
    written to, `balance` itself to update it in place (one temporary array, not three).
    """
    if isinstance(balance, np.ndarray):
        if not elapsed_ns > 0:
            return np.minimum(balance, capacity, out=out)
        filled = np.multiply(rate, elapsed_ns)
        np.divide(filled, NS_PER_S, out=filled)
        np.add(balance, filled, out=filled)
        return np.minimum(filled, capacity, out=out)
    filled = balance + rate * elapsed_ns / NS_PER_S if elapsed_ns > 0 else balance
    return filled if filled < capacity else capacity


def throttle_target(capacity: Num) -> Num:
    """The balance a throttled producer waits for: `max(1, 1% of capacity)`, never above the capacity.

    The clamp matters for capacities below one token, whose bucket could never hold one whole token.
    """
    if isinstance(capacity, np.ndarray):
        return np.minimum(np.maximum(1.0, capacity / 100), capacity)
    target = capacity / 100 if capacity > 100 else 1.0
    return target if target < capacity else capacity


def throttle_duration(balance: Num, rate: Num, capacity: Num) -> Num:
    """Seconds until `balance` reaches `throttle_target(capacity)` at `rate`; 0 if it is there already.

    `(target - balance) / rate` where the balance is short of the target. An unlimited bucket is never
    short (its balance is `inf`), so it waits 0 s and no `inf - inf` is ever computed.
    """
    target = throttle_target(capacity)
    if isinstance(balance, np.ndarray):
        short = balance < target
        wait = np.zeros(np.broadcast(balance, rate, target).shape)
        np.subtract(target, balance, out=wait, where=short)
        np.divide(wait, rate, out=wait, where=short)
        return wait
    return (target - balance) / rate if balance < target else 0.0


def _check_rate(rate: float) -> float:
    if not rate > 0:  # also catches NaN
        raise ValueError(f"rate must be > 0 tokens/s (inf for unlimited), got {rate!r}")
    return float(rate)


def _check_capacity(rate: float, capacity: float | None) -> float:
    """Capacity follows the rate (one second's worth) unless given; an unlimited bucket holds `inf`."""
    if rate == math.inf:
        return math.inf
    if capacity is None:
        return rate
    if not capacity > 0:
        raise ValueError(f"capacity must be > 0 tokens, got {capacity!r}")
    return float(capacity)


class TokenBucket:
    """One token bucket: `rate` tokens/s, at most `capacity` tokens, lazily refilled from `clock`.

    `clock` returns integer nanoseconds, monotonic: a service passes `time.monotonic_ns`, a test or a simulation
    its own (the library reads no clock of its own). `resolution_ns = 0` makes the
    bucket strongly consistent (every call updates the balance). The settings `rate`, `capacity` and
    `resolution_ns` are public to read; change the rate through `set_rate`, which settles the past first.
    """

    __slots__ = ("rate", "capacity", "resolution_ns", "_clock", "_tokens", "_pending", "_last_ns", "_next_ns")

    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        initial: float | None = None,
        *,
        clock: Callable[[], int],
        resolution_ns: int = DEFAULT_RESOLUTION_NS,
    ) -> None:
        self.rate = _check_rate(rate)
        self.capacity = _check_capacity(self.rate, capacity)
        if not resolution_ns >= 0:
            raise ValueError(f"resolution_ns must be >= 0, got {resolution_ns!r}")
        self.resolution_ns = resolution_ns
        if initial is None or self.rate == math.inf:
            initial = self.capacity
        elif not -math.inf < initial <= self.capacity:
            raise ValueError(f"initial must be a number of tokens <= capacity {self.capacity}, got {initial!r}")
        self._clock = clock
        self._tokens = float(initial)  # the balance as of the last update
        self._pending = 0.0  # consumed since the last update, not yet subtracted from _tokens
        self._last_ns = clock()
        self._next_ns = self._last_ns + resolution_ns  # no update before this time unless forced

    def consume(self, n: float = 1) -> bool:
        """Deduct `n` tokens (always: accepted work cannot be rejected); True if tokens remain after it.

        The hot path: between updates this is one clock read, one addition and one comparison.
        """
        if not 0 <= n < _INF:
            raise ValueError(f"cannot consume {n!r} tokens: need a finite number >= 0")
        now = self._clock()
        if now < self._next_ns:
            pending = self._pending + n
            self._pending = pending
            return self._tokens > pending  # i.e. tokens - pending > 0
        return self._update(now, n) > 0

    def balance(self) -> float:
        """The exact balance now (negative while in debt), after forcing an update."""
        return self._update(self._clock(), 0)

    def has_tokens(self) -> bool:
        """True if the exact balance is positive (what a `ReleaseQueue` asks before releasing a producer)."""
        return self._update(self._clock(), 0) > 0

    def throttle_duration_s(self) -> float:
        """Seconds until the balance reaches `max(1, 1% of capacity)` at the current rate (0 if it has)."""
        return throttle_duration(self._update(self._clock(), 0), self.rate, self.capacity)

    def set_rate(self, rate: float, capacity: float | None = None) -> None:
        """Change the rate (and the capacity, one second's worth unless given), keeping balance and debt.

        The time elapsed so far is refilled at the old rate first. A balance above the new capacity is cut
        to it; switching to unlimited (`inf`) fills the bucket.
        """
        rate = _check_rate(rate)
        capacity = _check_capacity(rate, capacity)
        self._update(self._clock(), 0)
        self.rate = rate
        self.capacity = capacity
        self._tokens = math.inf if rate == math.inf else refill(self._tokens, rate, capacity, 0)

    def _update(self, now: int, n: float) -> float:
        """Refill for the time since the last update, then subtract the pending tokens and `n`."""
        last_ns = self._last_ns
        tokens = refill(self._tokens, self.rate, self.capacity, now - last_ns)
        tokens -= self._pending + n
        self._tokens = tokens
        self._pending = 0.0
        if now > last_ns:
            self._last_ns = now
        self._next_ns = self._last_ns + self.resolution_ns
        return tokens

    def __repr__(self) -> str:
        # Reads the clock but does not update: a debugger or a log line must not change the bucket.
        now = self._clock()
        live = refill(self._tokens, self.rate, self.capacity, now - self._last_ns) - self._pending
        return (
            f"TokenBucket(rate={self.rate:g}/s, capacity={self.capacity:g}, balance={live:.6g}, "
            f"pending={self._pending:g}, updated {(now - self._last_ns) / 1e6:.3f} ms ago, "
            f"resolution_ns={self.resolution_ns})"
        )
