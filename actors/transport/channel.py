"""The lossy pub/sub channel: a stand-in for PIP-82's non-persistent usage topic.

A report is published on a topic: a shard keyed by group id (`broadcast` routing: every broker subscribes
to the shards of its groups) or a broker's inbox (`interest` routing: the publisher sends each group's entry
to the inboxes of the group's other owners). Each published copy is decided per subscriber, independently,
from that subscriber's own random stream (seeded from the run seed and its name, so adding a broker leaves
the others' draws alone): partition, loss (Bernoulli, or Gilbert-Elliott bursts per link), delay with
jitter, an extra `reorder_delay_s` with probability `reorder`, and a duplicate copy with probability
`duplicate`. Times are run seconds in both drivers.

A plain class: the runtime wraps it as a Ray actor, so every method takes and returns picklable values.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from actors.plan import ChannelPlan, component_rng

_DUE_EPS_S = 1e-6  # a copy due at `now_s` plus float noise is delivered at `now_s`
# Uniforms consumed per (publish, subscriber), whatever the spec: burst state, loss, jitter, reorder,
# duplicate, duplicate's jitter, duplicate's reorder. A fixed count keeps a subscriber's stream aligned
# across `configure` changes.
_DRAWS = 7
# Uniforms drawn per numpy call: one call per 64 copies keeps publish cheap, and small blocks spread the
# refills over rounds (subscribers offered the same copies would otherwise all refill in the same round).
_BLOCK = _DRAWS * 64
_IMPLICIT = -1  # partition index of brokers no partition lists


@dataclass
class Counters:
    """One broker's traffic on the topic: as a publisher (`bytes_published`) and as a subscriber."""

    bytes_published: int = 0
    bytes_delivered: int = 0
    deliveries_dropped: int = 0  # copies meant for it lost to `loss` or a partition: the injected faults
    deliveries_lost_transport: int = 0  # copies meant for it a real transport lost (sequence gaps per sender)
    messages_delivered: int = 0

    def minus(self, before: Counters) -> Counters:
        return Counters(**{name: value - getattr(before, name) for name, value in asdict(self).items()})

    def plus(self, other: Counters) -> Counters:
        return Counters(**{name: value + getattr(other, name) for name, value in asdict(self).items()})


@dataclass(frozen=True)
class Exchange:
    """One lockstep round of the topic: what each subscriber received, and the counters of the round."""

    deliveries: dict[str, list[bytes]]
    counters: dict[str, Counters]


class _Stream:
    """One subscriber's uniforms, drawn in blocks from its own generator and handed out `_DRAWS` at a time."""

    __slots__ = ("_rng", "_buf", "_pos")

    def __init__(self, seed: int, name: str) -> None:
        self._rng = component_rng(seed, name)
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
    __slots__ = ("topics", "queue", "stalled_until_s")

    def __init__(self, topics: frozenset[int]) -> None:
        self.topics = topics
        self.queue: list[tuple[float, int, bytes]] = []  # heap of (due_s, sequence, payload)
        self.stalled_until_s = -float("inf")  # its reader reads nothing before then (a `stall` event)


class Channel:
    """A lossy, delaying, duplicating, partitionable set of topics with per-subscriber queues and counters."""

    def __init__(self, plan: ChannelPlan, seed: int) -> None:
        self.seed = seed
        self._plan = plan
        self._partition_of = self._partition_index(plan.partitions)
        self._subscriptions: dict[str, _Subscription] = {}
        self._by_topic: list[tuple[str, ...]] = [() for _ in range(plan.topics)]
        # Streams and link states outlive a subscription: a restarted broker continues its stream.
        self._streams: dict[str, _Stream] = {}
        self._bad_links: dict[tuple[str, str], bool] = {}  # Gilbert-Elliott state per (sender, subscriber)
        self._sequence = 0
        self._totals: dict[str, Counters] = {}  # cumulative, per broker
        self._taken: dict[str, Counters] = {}  # the totals at the last take_counters()

    def __repr__(self) -> str:
        pending = sum(len(sub.queue) for sub in self._subscriptions.values())
        return f"Channel(subscribers={len(self._subscriptions)}, pending={pending}, plan={self._plan})"

    @property
    def plan(self) -> ChannelPlan:
        return self._plan

    # --- membership of the topics ------------------------------------------------------------------------

    def subscribe(self, broker: str, topics: Iterable[int]) -> None:
        """Subscribe `broker` to `topics`. Subscribing again changes the topics and keeps what is already
        queued for it."""
        wanted = frozenset(topics)
        if broker in self._subscriptions:
            self._subscriptions[broker].topics = wanted
        else:
            self._subscriptions[broker] = _Subscription(wanted)
        if broker not in self._streams:
            self._streams[broker] = _Stream(self.seed, broker)
        self._counters(broker)
        self._index_topics()

    def unsubscribe(self, broker: str) -> None:
        """Remove `broker`; copies still queued for it are discarded (not counted as dropped)."""
        if self._subscriptions.pop(broker, None) is not None:
            self._index_topics()

    def subscribers(self) -> list[str]:
        return sorted(self._subscriptions)

    # --- traffic -----------------------------------------------------------------------------------------

    def publish(self, sender: str, topic: int, payload: bytes, now_s: float) -> None:
        """Count `payload` as published by `sender`, and offer it to the subscribers of `topic`."""
        self.count_published(sender, len(payload))
        self.offer(sender, topic, payload, now_s)

    def count_published(self, sender: str, n_bytes: int) -> None:
        """Count bytes `sender` handed to the topic (a real transport counts where it publishes)."""
        self._counters(sender).bytes_published += n_bytes

    def offer(self, sender: str, topic: int, payload: bytes, now_s: float) -> None:
        """Offer one copy of `payload` to every other subscriber of `topic`, each decided independently.

        A real transport (`actors.transport.redis_channel`) calls this on receipt, on a channel holding only the
        receiving host's own brokers: the same faults then apply after the real delivery."""
        plan = self._plan
        burst = plan.burst
        streams, totals, subscriptions = self._streams, self._totals, self._subscriptions
        partition_of, bad_links = self._partition_of, self._bad_links
        sender_part = partition_of.get(sender, _IMPLICIT)
        for name in self._by_topic[topic]:
            if name == sender:
                continue
            # Every copy consumes one block of draws, dropped or not, so a stream's position depends only
            # on how many copies its subscriber was offered.
            u_state, u_loss, u_jitter, u_reorder, u_dup, u_dup_jitter, u_dup_reorder = streams[name].take()
            if partition_of.get(name, _IMPLICIT) != sender_part:
                totals[name].deliveries_dropped += 1
                continue
            if burst is None:
                loss = plan.loss
            else:
                link = (sender, name)
                bad = u_state >= burst.p_exit if bad_links.get(link, False) else u_state < burst.p_enter
                bad_links[link] = bad
                loss = burst.loss_bad if bad else plan.loss
            if u_loss < loss:
                totals[name].deliveries_dropped += 1
                continue
            queue = subscriptions[name].queue
            self._schedule(queue, payload, now_s, u_jitter, u_reorder)
            if u_dup < plan.duplicate:
                self._schedule(queue, payload, now_s, u_dup_jitter, u_dup_reorder)

    def fetch(self, subscriber: str, now_s: float) -> list[bytes]:
        """Pop every copy due at `now_s` for `subscriber`, in due order (publish order on ties).

        A broker that is not subscribed has nothing waiting.
        """
        subscription = self._subscriptions.get(subscriber)
        if subscription is None or now_s < subscription.stalled_until_s:
            return []
        queue = subscription.queue
        limit = now_s + _DUE_EPS_S
        out: list[bytes] = []
        while queue and queue[0][0] <= limit:
            out.append(heapq.heappop(queue)[2])
        if out:
            counters = self._totals[subscriber]
            counters.bytes_delivered += sum(len(payload) for payload in out)
            counters.messages_delivered += len(out)
        return out

    def fetch_all(self, now_s: float) -> dict[str, list[bytes]]:
        """`fetch` for every subscriber, keyed and ordered by name."""
        return {name: self.fetch(name, now_s) for name in sorted(self._subscriptions)}

    def exchange(self, items: Iterable[tuple[str, int, bytes]], now_s: float) -> Exchange:
        """One lockstep round in one call: publish each `(sender, topic, payload)` in order, then fetch_all
        and take the counters: on Ray, one actor call per round rather than per report."""
        self.publish_many(items, now_s)
        return Exchange(self.fetch_all(now_s), self.take_counters())

    def publish_and_fetch(self, subscriber: str, items: Iterable[tuple[str, int, bytes]], now_s: float) -> list[bytes]:
        """A realtime broker's tick in one call: publish its reports, then fetch what is due for it."""
        self.publish_many(items, now_s)
        return self.fetch(subscriber, now_s)

    def publish_many(self, items: Iterable[tuple[str, int, bytes]], now_s: float) -> None:
        """Publish each `(sender, topic, payload)` in order: one call for a broker's whole round."""
        for sender, topic, payload in items:
            self.publish(sender, topic, payload, now_s)

    def lost_in_transport(self, sender: str, topic: int, copies: int) -> None:
        """Count `copies` of `sender`'s reports on `topic` that a real transport lost, for every other subscriber
        of `topic` (each would have been offered them)."""
        for name in self._by_topic[topic]:
            if name != sender:
                self._totals[name].deliveries_lost_transport += copies

    def stall(self, subscribers: Iterable[str], now_s: float, seconds: float) -> None:
        """`subscribers` read nothing for `seconds` (their host stopped reading): copies wait in their queues,
        whose size nothing bounds here (a real transport drops a slow subscriber instead)."""
        for name in subscribers:
            subscription = self._subscriptions.get(name)
            if subscription is not None:
                subscription.stalled_until_s = now_s + seconds

    # --- settings ----------------------------------------------------------------------------------------

    def configure(self, **changes: Any) -> None:
        """Change plan fields during a run (a scenario `channel` event, checked when the scenario loaded).
        Copies already queued keep their due times."""
        plan = replace(self._plan, **changes)
        if plan.burst is None:
            self._bad_links.clear()
        self._plan = plan
        self._partition_of = self._partition_index(plan.partitions)

    # --- accounting --------------------------------------------------------------------------------------

    def take_counters(self) -> dict[str, Counters]:
        """Counters per broker since the last call: every subscriber, and any other broker that published."""
        out: dict[str, Counters] = {}
        for name in sorted(self._totals):
            total = self._totals[name]
            delta = total.minus(self._taken.get(name, Counters()))
            if name in self._subscriptions or delta != Counters():
                out[name] = delta
            self._taken[name] = replace(total)
        return out

    def totals(self) -> dict[str, Counters]:
        """Cumulative counters per broker since the channel was created."""
        return {name: replace(self._totals[name]) for name in sorted(self._totals)}

    # --- internals ---------------------------------------------------------------------------------------

    def _schedule(
        self,
        queue: list[tuple[float, int, bytes]],
        payload: bytes,
        now_s: float,
        u_jitter: float,
        u_reorder: float,
    ) -> None:
        plan = self._plan
        delay_s = max(0.0, plan.delay_s + plan.jitter_s * (2.0 * u_jitter - 1.0))
        if u_reorder < plan.reorder:
            delay_s += plan.reorder_delay_s
        self._sequence += 1
        heapq.heappush(queue, (now_s + delay_s, self._sequence, payload))

    def _counters(self, broker: str) -> Counters:
        return self._totals.setdefault(broker, Counters())

    def _index_topics(self) -> None:
        """Rebuild each topic's sorted subscriber list (subscriptions change rarely, publishes often)."""
        by_topic: list[list[str]] = [[] for _ in range(self._plan.topics)]
        for name in sorted(self._subscriptions):
            for topic in self._subscriptions[name].topics:
                by_topic[topic].append(name)
        self._by_topic = [tuple(names) for names in by_topic]

    @staticmethod
    def _partition_index(partitions: tuple[tuple[str, ...], ...]) -> dict[str, int]:
        return {name: index for index, part in enumerate(partitions) for name in part}
