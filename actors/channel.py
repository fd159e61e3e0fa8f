"""The lossy pub/sub channel: a stand-in for PIP-82's non-persistent usage topic.

Each published copy is decided per subscriber, independently, from that subscriber's own random stream
(seeded from the run seed and a stable hash of its name, so adding a broker leaves the others' draws alone):
partition, loss (Bernoulli, or Gilbert-Elliott bursts per link), delay with jitter, an extra round of delay
with probability `reorder`, and a duplicate copy with probability `duplicate`.

Time is whatever unit the caller uses: rounds in lockstep (`time_per_round=1.0`), seconds in realtime
(`time_per_round=interval_s`). Spec delays are in rounds and are scaled by `time_per_round`.

A plain class: the runtime wraps it as a Ray actor, so every method takes and returns picklable values.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from typing import Any

import numpy as np

from actors.config import BurstSpec, ChannelSpec

COUNTERS = ("bytes_published", "bytes_delivered", "deliveries_dropped", "messages_delivered")
CONFIGURABLE = frozenset({"loss", "burst", "delay_rounds", "jitter_rounds", "duplicate", "reorder", "partitions"})

_DUE_EPS = 1e-9  # a copy due at `now` plus float noise is delivered at `now`
# Uniforms consumed per (publish, subscriber), whatever the spec: burst state, loss, jitter, reorder,
# duplicate, duplicate's jitter, duplicate's reorder. A fixed count keeps a subscriber's stream aligned
# across `configure` changes.
_DRAWS = 7
# Uniforms drawn per numpy call: one call per 64 copies keeps publish cheap, and small blocks spread the
# refills over rounds (subscribers offered the same copies would otherwise all refill in the same round).
_BLOCK = _DRAWS * 64
_IMPLICIT = -1  # partition index of brokers no partition lists


def shard_of(group_id: int, shards: int) -> int:
    """The shard (topic) that carries a group's usage."""
    return group_id % shards


def stable_hash(name: str) -> int:
    """A hash of a broker name that is the same in every process (Python's `hash` is salted)."""
    return zlib.crc32(name.encode("utf-8"))


class _Stream:
    """One subscriber's uniforms, drawn in blocks from its own generator and handed out `_DRAWS` at a time."""

    __slots__ = ("_rng", "_buf", "_pos")

    def __init__(self, seed: int, name: str) -> None:
        self._rng = np.random.default_rng([seed, stable_hash(name)])
        self._buf: list[float] = []
        self._pos = 0

    def take(self) -> list[float]:
        if self._pos >= len(self._buf):
            self._buf = self._rng.random(_BLOCK).tolist()
            self._pos = 0
        pos = self._pos
        self._pos = pos + _DRAWS
        return self._buf[pos : pos + _DRAWS]


class _Subscription:
    __slots__ = ("shards", "queue")

    def __init__(self, shards: frozenset[int] | None) -> None:
        self.shards = shards  # None: every shard
        self.queue: list[tuple[float, int, bytes]] = []  # heap of (due, sequence, payload)


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"channel {name} must be a probability in [0, 1], got {value!r}")


def _normalised(spec: ChannelSpec) -> ChannelSpec:
    """Validate a spec; accept `burst` as a mapping and `partitions` as nested lists (as scenario events write
    them) and return the canonical dataclass form."""
    burst = spec.burst
    if isinstance(burst, Mapping):
        burst = BurstSpec(**burst)
    partitions = tuple(tuple(str(name) for name in part) for part in spec.partitions)
    spec = replace(spec, burst=burst, partitions=partitions)
    for name in ("loss", "duplicate", "reorder"):
        _check_probability(name, getattr(spec, name))
    for name in ("delay_rounds", "jitter_rounds"):
        value = getattr(spec, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"channel {name} must be finite and >= 0, got {value!r}")
    if burst is not None:
        for name in ("p_enter", "p_exit", "loss_bad"):
            _check_probability(f"burst.{name}", getattr(burst, name))
    if spec.shards < 1:
        raise ValueError(f"channel shards must be >= 1, got {spec.shards!r}")
    listed = [name for part in partitions for name in part]
    twice = sorted({name for name in listed if listed.count(name) > 1})
    if twice:
        raise ValueError(f"channel partitions list brokers in more than one partition: {twice}")
    return spec


class Channel:
    """A lossy, delaying, duplicating, partitionable topic with per-subscriber queues and byte counters."""

    def __init__(self, spec: ChannelSpec, seed: int, time_per_round: float = 1.0) -> None:
        if not (math.isfinite(time_per_round) and time_per_round > 0):
            raise ValueError(f"time_per_round must be finite and > 0, got {time_per_round!r}")
        self.seed = seed
        self.time_per_round = time_per_round
        self._spec = _normalised(spec)
        self._partition_of = self._partition_index(self._spec.partitions)
        self._subscriptions: dict[str, _Subscription] = {}
        self._by_shard: list[tuple[str, ...]] = [() for _ in range(self._spec.shards)]
        # Streams and link states outlive a subscription: a restarted broker continues its stream.
        self._streams: dict[str, _Stream] = {}
        self._bad_links: dict[tuple[str, str], bool] = {}  # Gilbert-Elliott state per (sender, subscriber)
        self._sequence = 0
        self._totals: dict[str, list[int]] = {}  # broker -> values in COUNTERS order, cumulative
        self._taken: dict[str, list[int]] = {}  # the totals at the last take_counters()

    def __repr__(self) -> str:
        pending = sum(len(sub.queue) for sub in self._subscriptions.values())
        return (
            f"Channel(subscribers={len(self._subscriptions)}, pending={pending}, "
            f"time_per_round={self.time_per_round}, spec={self._spec})"
        )

    @property
    def spec(self) -> ChannelSpec:
        return self._spec

    # --- membership of the topic -------------------------------------------------------------------------

    def subscribe(self, broker: str, shards: Iterable[int] | None = None) -> None:
        """Subscribe `broker` to `shards` (None: all). Subscribing again changes the shards and keeps what is
        already queued for it."""
        wanted = None if shards is None else frozenset(shards)
        for shard in wanted or ():
            self._check_shard(shard)
        if broker in self._subscriptions:
            self._subscriptions[broker].shards = wanted
        else:
            self._subscriptions[broker] = _Subscription(wanted)
        if broker not in self._streams:
            self._streams[broker] = _Stream(self.seed, broker)
        self._counters(broker)
        self._index_shards()

    def unsubscribe(self, broker: str) -> None:
        """Remove `broker`; copies still queued for it are discarded (not counted as dropped)."""
        if self._subscriptions.pop(broker, None) is not None:
            self._index_shards()

    def subscribers(self) -> list[str]:
        return sorted(self._subscriptions)

    # --- traffic -----------------------------------------------------------------------------------------

    def publish(self, sender: str, shard: int, payload: bytes, now: float) -> None:
        """Offer one copy of `payload` to every other subscriber of `shard`, each decided independently."""
        self._check_shard(shard)
        self._counters(sender)[0] += len(payload)
        spec = self._spec
        burst = spec.burst
        streams, totals, subscriptions = self._streams, self._totals, self._subscriptions
        partition_of, bad_links = self._partition_of, self._bad_links
        sender_part = partition_of.get(sender, _IMPLICIT)
        for name in self._by_shard[shard]:
            if name == sender:
                continue
            # Every copy consumes one block of draws, dropped or not, so a stream's position depends only
            # on how many copies its subscriber was offered.
            u_state, u_loss, u_jitter, u_reorder, u_dup, u_dup_jitter, u_dup_reorder = streams[name].take()
            if partition_of.get(name, _IMPLICIT) != sender_part:
                totals[name][2] += 1
                continue
            if burst is None:
                loss = spec.loss
            else:
                link = (sender, name)
                bad = u_state >= burst.p_exit if bad_links.get(link, False) else u_state < burst.p_enter
                bad_links[link] = bad
                loss = burst.loss_bad if bad else spec.loss
            if u_loss < loss:
                totals[name][2] += 1
                continue
            queue = subscriptions[name].queue
            self._schedule(queue, payload, now, u_jitter, u_reorder)
            if u_dup < spec.duplicate:
                self._schedule(queue, payload, now, u_dup_jitter, u_dup_reorder)

    def fetch(self, subscriber: str, now: float) -> list[bytes]:
        """Pop every copy due at `now` for `subscriber`, in due order (publish order on ties).

        A broker that is not subscribed has nothing waiting.
        """
        subscription = self._subscriptions.get(subscriber)
        if subscription is None:
            return []
        queue = subscription.queue
        limit = now + _DUE_EPS
        out: list[bytes] = []
        while queue and queue[0][0] <= limit:
            out.append(heapq.heappop(queue)[2])
        if out:
            counters = self._totals[subscriber]
            counters[1] += sum(len(payload) for payload in out)
            counters[3] += len(out)
        return out

    def fetch_all(self, now: float) -> dict[str, list[bytes]]:
        """`fetch` for every subscriber, keyed and ordered by name."""
        return {name: self.fetch(name, now) for name in sorted(self._subscriptions)}

    def exchange(
        self, items: Iterable[tuple[str, int, bytes]], now: float
    ) -> tuple[dict[str, list[bytes]], dict[str, dict[str, int]]]:
        """One lockstep round in one call: publish each `(sender, shard, payload)` in order, then fetch_all.

        Returns `(fetch_all(now), take_counters())`: on Ray, one actor call per round rather than per report.
        """
        self.publish_many(items, now)
        return self.fetch_all(now), self.take_counters()

    def publish_and_fetch(self, subscriber: str, items: Iterable[tuple[str, int, bytes]], now: float) -> list[bytes]:
        """A realtime broker's tick in one call: publish its reports, then fetch what is due for it."""
        self.publish_many(items, now)
        return self.fetch(subscriber, now)

    def publish_many(self, items: Iterable[tuple[str, int, bytes]], now: float) -> None:
        """Publish each `(sender, shard, payload)` in order: one call for a broker's whole round."""
        for sender, shard, payload in items:
            self.publish(sender, shard, payload, now)

    # --- settings ----------------------------------------------------------------------------------------

    def configure(self, **changes: Any) -> None:
        """Change spec fields during a run (a scenario `channel` event). Copies already queued keep their due
        times. All changes are validated before any takes effect."""
        known = {f.name for f in fields(ChannelSpec)}
        for key in sorted(changes):
            if key not in known:
                raise ValueError(f"unknown channel setting {key!r}; known: {sorted(CONFIGURABLE)}")
            if key not in CONFIGURABLE:
                raise ValueError(f"channel setting {key!r} cannot change during a run")
        spec = _normalised(replace(self._spec, **changes))
        if spec.burst is None:
            self._bad_links.clear()
        self._spec = spec
        self._partition_of = self._partition_index(spec.partitions)

    # --- accounting --------------------------------------------------------------------------------------

    def take_counters(self) -> dict[str, dict[str, int]]:
        """Counters per broker since the last call: every subscriber, and any other broker that published.

        `deliveries_dropped` counts copies meant for that broker lost to `loss` or a partition.
        """
        out: dict[str, dict[str, int]] = {}
        for name in sorted(self._totals):
            total = self._totals[name]
            before = self._taken.get(name, [0] * len(COUNTERS))
            delta = [now - then for now, then in zip(total, before, strict=True)]
            if name in self._subscriptions or any(delta):
                out[name] = dict(zip(COUNTERS, delta, strict=True))
            self._taken[name] = list(total)
        return out

    def totals(self) -> dict[str, dict[str, int]]:
        """Cumulative counters per broker since the channel was created."""
        return {name: dict(zip(COUNTERS, self._totals[name], strict=True)) for name in sorted(self._totals)}

    # --- internals ---------------------------------------------------------------------------------------

    def _schedule(
        self,
        queue: list[tuple[float, int, bytes]],
        payload: bytes,
        now: float,
        u_jitter: float,
        u_reorder: float,
    ) -> None:
        spec = self._spec
        delay = max(0.0, spec.delay_rounds + spec.jitter_rounds * (2.0 * u_jitter - 1.0))
        if u_reorder < spec.reorder:
            delay += 1.0
        self._sequence += 1
        heapq.heappush(queue, (now + delay * self.time_per_round, self._sequence, payload))

    def _counters(self, broker: str) -> list[int]:
        return self._totals.setdefault(broker, [0] * len(COUNTERS))

    def _check_shard(self, shard: int) -> None:
        if not 0 <= shard < self._spec.shards:
            raise ValueError(f"shard {shard!r} out of range: the channel has {self._spec.shards} shard(s)")

    def _index_shards(self) -> None:
        """Rebuild each shard's sorted subscriber list (subscriptions change rarely, publishes often)."""
        self._by_shard = [
            tuple(
                name
                for name in sorted(self._subscriptions)
                if self._subscriptions[name].shards is None or shard in self._subscriptions[name].shards
            )
            for shard in range(self._spec.shards)
        ]

    @staticmethod
    def _partition_index(partitions: tuple[tuple[str, ...], ...]) -> dict[str, int]:
        return {name: index for index, part in enumerate(partitions) for name in part}
