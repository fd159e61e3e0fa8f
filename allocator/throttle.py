"""Who is throttled, and who goes first when tokens come back (PIP-322).

`ThrottleTracker` is Pulsar's `ServerCnxThrottleTracker`: several limiters (broker, group, topic, ...) act on
one producer, each on its own account. The producer is throttled while any of them holds it (the most
stringent wins) and released only when every one has let go, so one limiter can never resume a producer
that another still throttles.

`ReleaseQueue` is one limiter's queue of the producers it throttled. When its bucket has tokens again, it
releases them in the order they were throttled (fairness: nobody is released ahead of an earlier one);
a producer throttled again after its release waits at the back.

Both are plain data structures: no clock, no scheduler. The caller schedules the next `release_ready` after
the bucket's `throttle_duration_s()`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, Protocol, TypeVar

P = TypeVar("P", bound=Hashable)  # a producer
L = TypeVar("L", bound=Hashable)  # a limiter


class HasTokens(Protocol):
    def has_tokens(self) -> bool: ...


class ThrottleTracker(Generic[P, L]):
    """Per producer, the set of limiters throttling it; its size is PIP-322's "throttle count".

    `throttle` and `release` are idempotent per (producer, limiter): a limiter that throttles twice holds
    the producer once, and releasing what it does not hold does nothing. They return True exactly when the
    producer's state changes (0 -> 1 holder: pause it; 1 -> 0: resume it), and call `on_throttle` /
    `on_release` at the same moments.
    """

    def __init__(
        self,
        on_throttle: Callable[[P], None] | None = None,
        on_release: Callable[[P], None] | None = None,
    ) -> None:
        self.on_throttle = on_throttle
        self.on_release = on_release
        self._holders: dict[P, set[L]] = {}

    def throttle(self, producer: P, limiter: L) -> bool:
        """`limiter` throttles `producer`; True if the producer was not throttled before."""
        holders = self._holders.get(producer)
        if holders is None:
            self._holders[producer] = {limiter}
            if self.on_throttle is not None:
                self.on_throttle(producer)
            return True
        holders.add(limiter)
        return False

    def release(self, producer: P, limiter: L) -> bool:
        """`limiter` lets go of `producer`; True if no limiter holds it any more (resume it now)."""
        holders = self._holders.get(producer)
        if holders is None or limiter not in holders:
            return False
        holders.remove(limiter)
        if holders:
            return False
        del self._holders[producer]
        if self.on_release is not None:
            self.on_release(producer)
        return True

    def is_throttled(self, producer: P) -> bool:
        return producer in self._holders

    def throttle_count(self, producer: P) -> int:
        """How many limiters hold `producer` (0 when it runs freely)."""
        return len(self._holders.get(producer, ()))

    def holders(self, producer: P) -> frozenset[L]:
        return frozenset(self._holders.get(producer, ()))

    def __len__(self) -> int:
        """The number of throttled producers."""
        return len(self._holders)

    def __contains__(self, producer: object) -> bool:
        return producer in self._holders

    def __repr__(self) -> str:
        holds = sum(len(h) for h in self._holders.values())
        return f"ThrottleTracker(throttled={len(self._holders)}, holds={holds})"


class ReleaseQueue(Generic[P]):
    """One limiter's throttled producers, released first-in first-out while its bucket has tokens."""

    def __init__(self) -> None:
        self._queue: deque[P] = deque()
        self._queued: set[P] = set()

    def push(self, producer: P) -> bool:
        """Queue a throttled producer at the back; True if added.

        A producer already waiting keeps its place (pushing it again would be unfair to it); one throttled
        again after its release is new, and goes to the back.
        """
        if producer in self._queued:
            return False
        self._queued.add(producer)
        self._queue.append(producer)
        return True

    def release_ready(self, tokens: HasTokens | Callable[[], bool]) -> list[P]:
        """Pop producers from the front while the bucket has tokens; returns them in release order.

        `tokens` is a bucket with `has_tokens()` (a `TokenBucket`) or any callable answering the same
        question (e.g. `lambda: array.available(now)[g] > 0`). It is asked before every release, so a
        bucket that runs dry stops the releases, and the rest wait, in order, for the next round.
        """
        has_tokens = getattr(tokens, "has_tokens", tokens)
        released: list[P] = []
        queue = self._queue
        while queue and has_tokens():
            producer = queue.popleft()
            self._queued.discard(producer)
            released.append(producer)
        return released

    def discard(self, producer: P) -> bool:
        """Forget a producer that went away (closed); True if it was waiting. Linear, but rare."""
        if producer not in self._queued:
            return False
        self._queued.remove(producer)
        self._queue.remove(producer)
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, producer: object) -> bool:
        return producer in self._queued

    def __iter__(self) -> Iterator[P]:
        """The waiting producers, front (next to be released) first."""
        return iter(tuple(self._queue))

    def __repr__(self) -> str:
        head = f", next={self._queue[0]!r}" if self._queue else ""
        return f"ReleaseQueue(waiting={len(self._queue)}{head})"
