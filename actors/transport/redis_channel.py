"""The report topics on a real Redis Pub/Sub (`channel.transport: redis`): one endpoint per host.

A host publishes its brokers' reports to Redis channels (`actors.transport.redis_wire.channel_name`: one per shard under
`broadcast` routing, one inbox per broker under `interest`, under a prefix scoped by the run) and one reader
thread per host hands what arrives to its brokers. The scenario's injected faults still apply on receipt: the
endpoint keeps a `Channel` holding only its own brokers as subscribers, and offers it every report Redis
delivers (`Channel.offer`): loss, bursts, delay, duplicates, reorder and partitions are decided there, from the
same per-subscriber streams as on the simulated channel, after the real delivery.

What Redis loses is measured apart: the frames are numbered per sender and channel, and a gap counts as copies
lost by the transport (`Counters.deliveries_lost_transport`) for each of the host's brokers on that channel;
the injected losses stay in `deliveries_dropped`.

Redis gone or slow never stops a tick: a publish that fails drops that round's reports (their numbers are
used, so the receivers count them lost) and the next attempt waits a back-off; the reader reconnects with
back-off and subscribes again. Each loss of the connection and each return is an event for the `events` table
(`take_events`). `stall` makes the reader stop reading for a while: with a small `client-output-buffer-limit
pubsub` Redis then drops the slow subscriber, as PIP-82's topic drops a slow consumer.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from actors.plan import ChannelPlan, Plan
from actors.telemetry.lag_histogram import LagHistogram
from actors.transport.channel import Channel, Counters
from actors.transport.redis_wire import FrameError, SequenceGaps, Sequencer, channel_name, frame, unframe

SOCKET_TIMEOUT_S = 1.0  # a command to a Redis that stopped answering fails after this long (never a hung tick)
READ_POLL_S = 0.05  # the reader wakes at least this often to notice a stop or a stall
SUBSCRIBE_WAIT_S = 1.0  # a broker's start waits at most this long for Redis to confirm its subscriptions
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
# A round's reports in one command: one reply to read, not one a report (a pipeline of PUBLISH cost ~19 us of the
# host's CPU a report, this ~7, measured with 90 reports of 500 bytes: PIP-82's inboxes of one broker).
_PUBLISH_ALL = "for i = 1, #KEYS do redis.call('PUBLISH', KEYS[i], ARGV[i]) end"


@dataclass(frozen=True)
class RedisLink:
    """What a host needs to join a run's topics on Redis (picklable: it travels to Ray actors)."""

    url: str
    prefix: str  # scopes the run's channels: quotalab:<run id>:<nonce>
    plan: ChannelPlan  # the faults to inject on receipt, as they stand when the host starts
    seed: int


def redis_link(plan: Plan, run_id: str) -> RedisLink | None:
    """The run's topics on Redis, its channels under `quotalab:<run id>:<nonce>` (two runs of one id never mix);
    None on the simulated channel."""
    if plan.channel.transport != "redis":
        return None
    assert plan.channel.redis_url is not None, "actors.transport.redis_server.serving fills the URL in"
    return RedisLink(plan.channel.redis_url, f"quotalab:{run_id}:{uuid.uuid4().hex[:8]}", plan.channel, plan.seed)


def latency_summary(latencies: LagHistogram) -> dict[str, float]:
    """The manifest's `transport_latency`: frames received, then their publish-to-deliver mean, p50, p99 and
    max in seconds."""
    if latencies.count == 0:
        return {"messages": 0}
    return {
        "messages": latencies.count,
        "mean_s": latencies.sum_s / latencies.count,
        "p50_s": latencies.percentile_s(50),
        "p99_s": latencies.percentile_s(99),
        "max_s": latencies.max_s,
    }


def client(url: str) -> redis.Redis:
    """A client that fails fast (no retries of its own: the endpoint backs off) and never waits long."""
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S, retry=Retry(NoBackoff(), 0)
    )


class Backoff:
    """Delays between attempts: `first_s`, doubling up to `max_s`; `reset` after a success."""

    def __init__(self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.first_s, self.max_s = first_s, max_s
        self.attempts = 0

    def next_delay_s(self) -> float:
        self.attempts += 1
        return min(self.max_s, self.first_s * 2 ** (self.attempts - 1))

    def reset(self) -> None:
        self.attempts = 0


class _Outage:
    """One side's (publisher or reader) connection state, logged once per loss and once per return."""

    def __init__(self, side: str, log: Callable[[str, dict], None]) -> None:
        self.side, self._log = side, log
        self.down_since: float | None = None

    def failed(self, error: BaseException, now: float) -> None:
        if self.down_since is None:
            self.down_since = now
            self._log("transport_disconnected", {"side": self.side, "error": str(error)[:200]})

    def succeeded(self, now: float, attempts: int) -> None:
        if self.down_since is not None:
            down_s = round(now - self.down_since, 3)
            self._log("transport_reconnected", {"side": self.side, "down_s": down_s, "attempts": attempts})
            self.down_since = None


class RedisEndpoint:
    """One host's side of the topics: publish its brokers' reports, receive theirs, faults applied on receipt.

    Has the methods of `Channel` a realtime host calls (`publish_and_fetch`, `publish_many`, `fetch`,
    `subscribe`, `unsubscribe`, `configure`, `stall`, `take_counters`), so the host's tick is the same code on
    either transport.
    """

    def __init__(self, link: RedisLink, epoch_s: float, clock: Callable[[], float] = time.time) -> None:
        self.link = link
        self.epoch_s = epoch_s  # wall-clock time of run second 0
        self._clock = clock
        self._filter = Channel(link.plan, link.seed)  # the injected faults, on receipt
        self._lock = threading.Lock()  # the filter, the numbers, the subscriptions and the logs
        self._sequencer = Sequencer()
        self._gaps = SequenceGaps()
        self._topics_of: dict[str, tuple[int, ...]] = {}  # broker -> its topics
        self._wanted: dict[bytes, int] = {}  # channel -> topic, for the topics of the brokers subscribed
        self._events: list[tuple[float, str, str, str]] = []  # (t_s, kind, target, detail as JSON)
        self._latencies_s: list[float] = []
        self.frames_rejected = 0
        self._publisher = client(link.url)
        self._publish_all = self._publisher.register_script(_PUBLISH_ALL)  # reloaded by redis-py after a restart
        self._channel_names: dict[int, str] = {}
        self._reader_client = client(link.url)
        self._publish_backoff = Backoff()
        self._publish_retry_at = 0.0
        self._publish_state = _Outage("publisher", self._log)
        # the reader's connection; `_confirmed` holds the channels Redis confirmed on it
        self._pubsub_lock = threading.Lock()
        self._pubsub: redis.client.PubSub | None = None
        self._confirmed: set[bytes] = set()
        self._confirmations = threading.Condition(self._pubsub_lock)
        self._broken = False  # a subscribe from another thread failed: the reader reconnects
        self._read_state = _Outage("subscriber", self._log)
        self._stalled_until = 0.0  # monotonic
        self._stopping = threading.Event()
        # connected from the start: a host's endpoint opens before the run's epoch, so its brokers' subscriptions
        # at round 0 are confirmed at once
        self._reader = threading.Thread(target=self._read, name="quotalab-redis-reader", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"RedisEndpoint({self.link.prefix!r}, brokers={sorted(self._topics_of)}, channels={len(self._wanted)})"

    # -- the brokers of this host ------------------------------------------------------------------------

    def subscribe(self, broker: str, topics: Iterable[int]) -> None:
        """Subscribe `broker` to `topics`; returns once Redis confirmed the new channels (or after
        `SUBSCRIBE_WAIT_S`, when it does not answer: the reader subscribes again when it reconnects)."""
        topics = tuple(topics)
        with self._lock:
            self._filter.subscribe(broker, topics)
            self._topics_of[broker] = topics
            new = self._rewant()
        if new:
            self._subscribe_now(new)

    def unsubscribe(self, broker: str) -> None:
        with self._lock:
            self._filter.unsubscribe(broker)
            self._topics_of.pop(broker, None)
            before = set(self._wanted)
            self._rewant()
            gone = before - set(self._wanted)
            for channel in gone:
                self._gaps.forget(channel.decode())
        if gone:
            with self._pubsub_lock:
                self._confirmed -= gone
                if self._pubsub is not None:
                    try:
                        self._pubsub.unsubscribe(*gone)
                    except (redis.RedisError, OSError):
                        self._broken = True

    def configure(self, **changes: object) -> None:
        with self._lock:
            self._filter.configure(**changes)

    def stall(self, subscribers: Iterable[str], now_s: float, seconds: float) -> None:
        """This host stops reading for `seconds` (all its brokers: it has one reader). Redis buffers what it
        does not read, up to its `client-output-buffer-limit pubsub`, then drops the connection."""
        self._stalled_until = time.monotonic() + seconds

    # -- traffic -------------------------------------------------------------------------------------------

    def publish_many(self, items: Iterable[tuple[str, int, bytes]], now_s: float) -> None:
        """Publish each `(sender, topic, payload)`, in one round trip and one command. While Redis cannot be reached
        (a failed publish and its back-off) the reports are lost; their numbers are used, so receivers count the
        gap."""
        sent_at = self._clock()
        names, frames = [], []
        with self._lock:
            for sender, topic, payload in items:
                self._filter.count_published(sender, len(payload))
                name = self._channel_name(topic)
                seq = self._sequencer.next(sender, name)
                names.append(name)
                frames.append(frame(sender, self._sequencer.publisher_id, seq, sent_at, payload))
        if not frames or sent_at < self._publish_retry_at:
            return
        try:
            self._publish_all(keys=names, args=frames)
        except (redis.RedisError, OSError) as error:
            with self._lock:
                self._publish_state.failed(error, sent_at)
            self._publish_retry_at = sent_at + self._publish_backoff.next_delay_s()
            return
        if self._publish_state.down_since is not None:
            with self._lock:
                self._publish_state.succeeded(sent_at, self._publish_backoff.attempts)
        self._publish_backoff.reset()

    def fetch(self, subscriber: str, now_s: float) -> list[bytes]:
        with self._lock:
            return self._filter.fetch(subscriber, now_s)

    def publish_and_fetch(self, subscriber: str, items: Iterable[tuple[str, int, bytes]], now_s: float) -> list[bytes]:
        self.publish_many(items, now_s)
        return self.fetch(subscriber, now_s)

    # -- accounting ----------------------------------------------------------------------------------------

    def take_counters(self) -> dict[str, Counters]:
        with self._lock:
            return self._filter.take_counters()

    def take_events(self) -> list[tuple[float, str, str, str]]:
        """The connection losses and returns since the last call: (t_s, kind, target brokers, detail)."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def take_latencies_s(self) -> list[float]:
        """Publish-to-deliver times (wall clock, before any injected delay) of the frames received since the
        last call."""
        with self._lock:
            latencies, self._latencies_s = self._latencies_s, []
        return latencies

    def close(self) -> None:
        self._stopping.set()
        self._reader.join(timeout=5.0)
        with self._pubsub_lock:
            if self._pubsub is not None:
                self._pubsub.close()
                self._pubsub = None
        self._publisher.close()
        self._reader_client.close()

    # -- internals -----------------------------------------------------------------------------------------

    def _log(self, kind: str, detail: dict) -> None:
        """An event (called with `_lock` held or from the one thread that owns the state)."""
        target = ",".join(sorted(self._topics_of))
        self._events.append((self._clock() - self.epoch_s, kind, target, json.dumps(detail)))

    def _channel_name(self, topic: int) -> str:
        name = self._channel_names.get(topic)
        if name is None:
            name = self._channel_names[topic] = channel_name(self.link.prefix, self.link.plan.routing, topic)
        return name

    def _rewant(self) -> set[bytes]:
        """Recompute the channels wanted (with `_lock` held); returns the ones new."""
        wanted = {self._channel_name(topic).encode(): topic for topics in self._topics_of.values() for topic in topics}
        new = set(wanted) - set(self._wanted)
        self._wanted = wanted
        return new

    def _subscribe_now(self, channels: set[bytes]) -> None:
        """Subscribe on the reader's connection, or let the reader do it as it connects (it subscribes to every
        wanted channel); either way, wait for Redis to confirm."""
        with self._pubsub_lock:
            if self._pubsub is not None:
                try:
                    self._pubsub.subscribe(*channels)
                except (redis.RedisError, OSError):
                    self._broken = True
                    return
            self._confirmations.wait_for(lambda: channels <= self._confirmed, timeout=SUBSCRIBE_WAIT_S)

    def _read(self) -> None:
        """The reader thread: connect, read until the connection fails, back off, connect again."""
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                pubsub = self._connect()
                with self._lock:
                    self._read_state.succeeded(self._clock(), backoff.attempts)
                backoff.reset()
                self._read_until_failure(pubsub)
            except (redis.RedisError, OSError) as error:
                with self._lock:
                    self._read_state.failed(error, self._clock())
                self._disconnect()
                self._stopping.wait(backoff.next_delay_s())

    def _connect(self) -> redis.client.PubSub:
        pubsub = self._reader_client.pubsub(ignore_subscribe_messages=False)
        with self._pubsub_lock:
            self._confirmed = set()
            self._broken = False
            self._pubsub = pubsub
            with self._lock:
                channels = list(self._wanted)
            if channels:
                pubsub.subscribe(*channels)
            else:
                pubsub.ping()  # connects, so that a Redis that is down shows now
        return pubsub

    def _disconnect(self) -> None:
        with self._pubsub_lock:
            if self._pubsub is not None:
                self._pubsub.close()
                self._pubsub = None

    def _read_until_failure(self, pubsub: redis.client.PubSub) -> None:
        while not self._stopping.is_set():
            stalled_s = self._stalled_until - time.monotonic()
            if stalled_s > 0:
                self._stopping.wait(min(stalled_s, READ_POLL_S))
                continue
            if self._broken:
                raise redis.ConnectionError("a subscribe failed")
            message = pubsub.get_message(timeout=READ_POLL_S)
            if message is None:
                continue
            kind = message["type"]
            if kind == "message":
                self._receive(message["channel"], message["data"])
            elif kind == "subscribe":
                with self._confirmations:
                    self._confirmed.add(message["channel"])
                    self._confirmations.notify_all()

    def _receive(self, channel: bytes, data: bytes) -> None:
        now = self._clock()
        with self._lock:
            topic = self._wanted.get(channel)
            if topic is None:
                return  # still in flight after the unsubscribe
            try:
                received = unframe(data)
            except FrameError:
                self.frames_rejected += 1
                return
            lost = self._gaps.observe(channel.decode(), received.sender, received.publisher_id, received.seq)
            if lost:
                self._filter.lost_in_transport(received.sender, topic, lost)
            self._filter.offer(received.sender, topic, received.payload, now - self.epoch_s)
            self._latencies_s.append(now - received.sent_at_s)
