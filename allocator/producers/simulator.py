"""Producers on shared connections, and the two ways a broker throttles them (PIP-385).

A broker's workload is a rate per group; this module models what producers see inside a round. Each client
has one connection per broker (Pulsar's `connectionsPerBroker = 1`) carrying producers for topics of several
groups. A producer creates messages at its rate into a bounded pending queue (`max_pending`; a send that
finds it full fails at once, Pulsar's `blockIfQueueFull = false`), and a message not persisted within the
producer's send timeout fails.

The broker reads a connection at a fine time step (`step_s`) and admits every message through the limiters
of its producer: its topic's bucket, its group's bucket (the local limit from the allocator) and the broker's
bucket. A limiter never lets more through than its tokens (a producer's share of a group's tokens is in
proportion to what it has pending). A limiter that runs dry holds its producers until it refills to
`max(1, 1% of capacity)` (PIP-322's `throttle_duration`). What happens to the connection then is the mode:

- `pause-connection` (Pulsar today): reading the whole connection stops while any producer on it with
  messages to send is held, and within a step the connection is read in its byte order, so a producer whose
  limiter runs dry stops the reading of everything behind it (each producer on the connection gets the same
  fraction of its pending read as the most throttled one: head-of-line blocking);
- `signal` (PIP-385): the broker sends the held producer `ThrottleProducer(reason, pause_for)`, `pause_for`
  the limiter's throttle duration. A client that acknowledges within `receipt_wait_s` pauses only that
  producer and the rest of the connection keeps flowing. A client that acknowledges later (or never: a client
  without PIP-385) falls back to a paused connection after `receipt_wait_s`, while the limiter holds. A
  broker-quota breach is connection-level: the connection is paused in both modes (the client is still told).

Time throttled is counted per producer and reason (the holder that waits longest). A client knows it is
throttled only when told (`signal` mode, a client that supports it): a message that times out after its
producer spent more than 80% of the send timeout knowingly throttled fails as throttled
(`ProducerThrottledException`), any other as a timeout.

**Persistence** (what the two connection-level limits need): a message the broker read is pending on the
broker until it is persisted. Each broker persists at most `persist_bytes_per_s` (its storage's capacity),
shared among the producers in proportion to the bytes each has waiting (every producer gets the same fraction
of its waiting messages persisted in a step, oldest first). A message read in a step is persisted in the same
step when the capacity allows (unlimited, the default: every message is persisted as it is read, nothing is
ever pending on the broker and the two limits below never bind). The client's send timeout runs until its
message is persisted; a message that times out while the broker still holds it stays in the broker's
accounts until persisted (the client has given up; it counts as failed, not as throughput). Two limits act on
what is pending, as Pulsar's `ServerCnx` and `BrokerService` do:

- `max_pending_per_connection` (Pulsar's `maxPendingPublishRequestsPerConnection`, 1000): the broker reads a
  connection until that many of its messages are pending, then stops reading it until they are down to half
  (reason `connection_pending_messages`);
- `publish_buffer_bytes` (Pulsar's `maxMessagePublishBufferSizeInMB`, half the direct memory: 2048 MiB with
  the default 4 GiB): when the pending messages of the whole broker fill it, the broker stops reading every
  connection until they are under half of it (reason `buffer_size`). Pulsar checks the buffer every
  `messagePublishBufferCheckIntervalInMillis` (100 ms); here every step.

Both are connection-level: under `signal` as under `pause-connection` the connections are paused, and under
`signal` the producers cut are told (`ThrottleProducer` with `pause_for` 0, PIP-385), so their clients know.

Quantities of messages are fluid (floats), as in `BrokerNode.admit`. No clock: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from allocator.limiter.bucket_array import TokenBucketArray
from allocator.limiter.token_bucket import NS_PER_S

MODES = ("pause-connection", "signal")
# The holders, in the order of PIP-385's ThrottlingReason
REASONS = ("topic_quota", "resource_group_quota", "connection_pending_messages", "buffer_size", "broker_quota")
TOPIC, GROUP, PENDING, BUFFER, BROKER = range(len(REASONS))
QUOTAS = [TOPIC, GROUP, BROKER]  # token buckets: hold until they refill
CONNECTION_LEVEL = [PENDING, BUFFER, BROKER]  # pause the connection in both modes (PIP-385)
MIB = 1024 * 1024
THROTTLED_FAILURE_FRACTION = 0.8  # PIP-385: a timeout after this much of the send timeout throttled
_NEVER = np.inf
_TINY_RATE = 1e-9  # tokens/s of a limit of 0 (a bucket's rate must be > 0)
_EMPTY = 1e-9  # tokens: a limiter left with less has run dry (reading all its tokens leaves rounding errors)


@dataclass(frozen=True)
class ThrottleSettings:
    mode: str  # one of MODES
    step_s: float = 0.01
    receipt_wait_s: float = 0.1  # Pulsar's throttleProducerReceiptWaitTimeMillis
    broker_msgs_per_s: float = np.inf  # the broker's own publish rate; inf: none
    persist_bytes_per_s: float = np.inf  # the broker's persistence capacity; inf: persisted as read
    max_pending_per_connection: float = 1000.0  # Pulsar's maxPendingPublishRequestsPerConnection; inf: none
    publish_buffer_bytes: float = 2048.0 * MIB  # Pulsar's maxMessagePublishBufferSizeInMB; inf: none


@dataclass(frozen=True)
class ProducerSet:
    """The producers of one broker, [P] arrays; `connection` numbers the (client, broker) connections 0..C-1."""

    group_row: np.ndarray  # int: row of the producer's group in the broker's groups
    connection: np.ndarray  # int
    send_timeout_s: np.ndarray
    max_pending: np.ndarray  # messages
    msg_bytes: np.ndarray
    topic_msgs_per_s: np.ndarray  # the topic's quota; inf: none
    receipt_s: np.ndarray  # how long the client takes to acknowledge a ThrottleProducer; inf: never

    def __len__(self) -> int:
        return len(self.group_row)


@dataclass(frozen=True)
class ProducerRound:
    """What each producer saw over one call of `ProducerSimulator.run`, [P] arrays (messages are fluid)."""

    duration_s: float  # the time stepped: whole steps, the nearest to the duration asked for
    offered_msgs: np.ndarray  # messages the application tried to send
    admitted_msgs: np.ndarray  # messages the broker read and persisted within their send timeout
    latency_p50_s: np.ndarray  # send latency of the messages admitted (NaN if none)
    latency_p99_s: np.ndarray
    throttled_s: np.ndarray  # [P, len(REASONS)]: time its messages waited for its own limiter of that reason
    connection_blocked_s: np.ndarray  # time its messages waited behind its connection (paused or read behind
    # another producer's throttled messages), not counting its own throttling
    signals: np.ndarray  # ThrottleProducer commands received
    fallbacks: np.ndarray  # times the broker fell back to pausing the connection for this producer
    failed_throttled_msgs: np.ndarray  # timed out after > 80% of the send timeout knowingly throttled
    failed_timeout_msgs: np.ndarray  # any other send timeout
    failed_queue_full_msgs: np.ndarray  # sends refused because `max_pending` messages were pending
    pending_msgs: np.ndarray  # at the end: waiting to be read or persisted (the client's pending queue)
    connection_pending_max_msgs: np.ndarray  # the most messages of its connection pending on the broker at once
    buffer_max_bytes: float  # the most bytes pending on the broker at once


class ProducerSimulator:
    """The producers of one broker and the limiters they go through, stepped `step_s` at a time.

    Keeps its state (pending messages, holds, pauses) from one `run` to the next. Group limits are [G, D]
    per second; `bytes_dimension[D]` says which dimensions count bytes (a message costs its size there, 1
    elsewhere).
    """

    def __init__(
        self, producers: ProducerSet, n_groups: int, bytes_dimension: np.ndarray, settings: ThrottleSettings
    ) -> None:
        self.producers = producers
        self.settings = settings
        n, step_s = len(producers), settings.step_s
        self.n_connections = int(producers.connection.max()) + 1 if n else 0
        self.timeout_steps = np.maximum(np.ceil(producers.send_timeout_s / step_s).astype(np.int64), 1)
        self._ages = np.arange(int(self.timeout_steps.max()) + 1 if n else 1)
        self._age_s = (self._ages + 0.5) * step_s  # a message read within the step it was created waits half a step
        self._cost = np.where(np.asarray(bytes_dimension)[None, :], producers.msg_bytes[:, None], 1.0)  # [P, D]
        self._group_buckets = [TokenBucketArray(np.full(n_groups, np.inf)) for _ in bytes_dimension]
        self._topic_bucket = TokenBucketArray(producers.topic_msgs_per_s)
        self._broker_bucket = TokenBucketArray(np.array([settings.broker_msgs_per_s]))
        self._held = np.zeros((n, len(REASONS)), dtype=bool)
        self._wait_s: np.ndarray | None = None  # [P, R] each limiter's throttle wait after the last step
        # pending[p, a]: messages created `a` steps ago; known_s[p, a]: the producer's knowingly throttled time
        # when they were created (the 80% rule compares it with the time at which they fail)
        self._pending = np.zeros((n, len(self._ages)))
        self._in_flight = np.zeros((n, len(self._ages)))  # read, not yet persisted, by age (as `_pending`)
        self._given_up = np.zeros(n)  # read, not yet persisted, past their send timeout (the client failed them)
        self._bytes = producers.msg_bytes
        self._persisted_as_read = not np.isfinite(settings.persist_bytes_per_s)
        self._known_at_creation = np.zeros((n, len(self._ages)))
        self._known_throttled_s = np.zeros(n)
        self._carry = np.zeros(n)  # the fraction of a message not yet created
        self._pause_from = np.full(n, _NEVER)  # signal mode: the producer pauses itself over [from, until)
        self._pause_until = np.full(n, -_NEVER)
        self._fallback_at = np.full(n, _NEVER)  # signal mode: since when the broker falls back to pause-connection
        self._signal_reason = np.zeros(n, dtype=np.int64)  # the reason of the last ThrottleProducer

    def set_group_limits(self, limit_per_s: np.ndarray, now_s: float) -> None:
        """The allocator's local limits [G, D] (per second; inf: unlimited), one second's worth of capacity."""
        now_ns = _ns(now_s)
        for index, bucket in enumerate(self._group_buckets):
            rate = np.maximum(np.asarray(limit_per_s, dtype=np.float64)[:, index], _TINY_RATE)
            bucket.set_rate(rate, now_ns)
        self._wait_s = None  # the waits change with the rates

    def pending_msgs(self) -> np.ndarray:
        """[P] messages waiting to be read by the broker."""
        return self._pending.sum(axis=1)

    def connection_pending_msgs(self) -> np.ndarray:
        """[C] messages of each connection read and not yet persisted (what `max_pending_per_connection`
        bounds)."""
        held = self._in_flight.sum(axis=1) + self._given_up
        return np.bincount(self.producers.connection, weights=held, minlength=self.n_connections)

    def buffer_bytes(self) -> float:
        """Bytes read by the broker and not yet persisted (what `publish_buffer_bytes` bounds)."""
        return float(((self._in_flight.sum(axis=1) + self._given_up) * self._bytes).sum())

    def run(self, rate_msgs_per_s: np.ndarray, start_s: float, duration_s: float) -> ProducerRound:
        """Step the producers over `[start_s, start_s + duration_s)` at their rates (msgs/s, [P])."""
        n = len(self.producers)
        totals = _Totals(n, len(self._ages))
        n_steps = max(1, round(duration_s / self.settings.step_s))
        rate = np.asarray(rate_msgs_per_s, dtype=np.float64)
        for index in range(n_steps):
            self._one_step(rate, start_s + index * self.settings.step_s, totals)
        unacknowledged = self._pending.sum(axis=1) + self._in_flight.sum(axis=1)
        return totals.result(n_steps * self.settings.step_s, self._age_s, unacknowledged)

    # -- one step ----------------------------------------------------------------------------------

    def _one_step(self, rate: np.ndarray, now_s: float, totals: _Totals) -> None:
        step_s, now_ns, p = self.settings.step_s, _ns(now_s), self.producers
        wait_s = self._release_holds(now_ns)
        self._age_and_create(rate, totals)
        has_pending = self._pending.sum(axis=1) > 0
        held = self._held.any(axis=1) & has_pending
        signal_paused = (self._pause_from <= now_s) & (now_s < self._pause_until)
        byte_order = self._byte_order_connections(now_s)
        connection_paused = self._connections_paused(held, byte_order)
        paused = connection_paused[p.connection] | signal_paused
        own_fractions = self._own_fractions(now_ns, paused)  # [P, R]
        own_fraction = np.where(paused, 0.0, own_fractions.min(axis=1))
        per_connection = np.ones(self.n_connections)
        np.minimum.at(per_connection, p.connection, np.where(has_pending, own_fraction, 1.0))
        read_fraction = np.where(byte_order[p.connection], per_connection[p.connection], own_fraction)
        self._read(read_fraction, now_ns)

        # Accounting: a step not read is the producer's own throttling (by reason) or its connection's
        own_held = paused & held
        signalled = signal_paused & ~own_held
        reason = np.where(
            own_held, np.argmax(np.where(self._held, wait_s, -1.0), axis=1), np.argmin(own_fractions, axis=1)
        )
        reason = np.where(signalled, self._signal_reason, reason)
        own_s = np.where(own_held | signalled, step_s, np.where(paused, 0.0, (1.0 - own_fraction) * step_s))
        own_s = np.where(has_pending, own_s, 0.0)
        np.add.at(totals.throttled_s, (np.arange(len(p)), reason), own_s)
        collateral = np.where(paused, ~(own_held | signalled), np.maximum(own_fraction - read_fraction, 0.0))
        totals.connection_blocked_s += np.where(has_pending, collateral * step_s, 0.0)
        if self.settings.mode == "signal":  # only a client that is told knows it is throttled
            self._known_throttled_s += np.where(np.isfinite(p.receipt_s), own_s, 0.0)
        self._hold_dry_limiters(now_ns)
        full_before = self._held[:, [PENDING, BUFFER]].any(axis=1)
        self._hold_full_connections(totals)
        self._persist(totals)
        self._wait_s = self._throttle_wait_s(now_ns)
        if self.settings.mode == "signal":  # those cut this step, and those whose connection is now full
            full_now = self._held[:, [PENDING, BUFFER]].any(axis=1) & ~full_before
            limited = (has_pending & ~paused & (own_fraction < 1.0)) | full_now
            self._signal(now_s, limited, self._wait_s, totals)

    def _release_holds(self, now_ns: int) -> np.ndarray:
        """Let go of the holds whose limiter refilled, and of the connections whose pending messages are down
        to half their limit; returns each holder's remaining wait [P, R] in seconds (a connection-level hold
        on pending messages waits `inf`: until they are persisted).

        Nothing is consumed between the end of a step and the start of the next, so a wait shrinks by the
        step exactly; it is computed afresh after new limits."""
        if self._wait_s is None:
            wait_s = self._throttle_wait_s(now_ns)
        else:
            wait_s = np.maximum(self._wait_s - self.settings.step_s, 0.0)
        self._held[:, QUOTAS] &= wait_s[:, QUOTAS] > 1e-12
        settings = self.settings
        drained = self.connection_pending_msgs() <= settings.max_pending_per_connection / 2
        self._held[drained[self.producers.connection], PENDING] = False
        if self.buffer_bytes() < settings.publish_buffer_bytes / 2:
            self._held[:, BUFFER] = False
        wait_s[:, [PENDING, BUFFER]] = np.where(self._held[:, [PENDING, BUFFER]], np.inf, 0.0)
        return wait_s

    def _age_and_create(self, rate: np.ndarray, totals: _Totals) -> None:
        """Messages one step older (those past the send timeout fail: unread ones are dropped, read ones stay
        on the broker until persisted), then this step's new messages."""
        pending, in_flight, known = self._pending, self._in_flight, self._known_at_creation
        for ages in (pending, in_flight, known):
            ages[:, 1:] = ages[:, :-1].copy()
        pending[:, 0] = in_flight[:, 0] = 0.0
        expired = self._ages[None, :] >= self.timeout_steps[:, None]
        if expired.any():
            throttled_s = self._known_throttled_s[:, None] - known
            as_throttled = fails_as_throttled(throttled_s, self.producers.send_timeout_s[:, None])
            failing = np.where(expired, pending + in_flight, 0.0)
            totals.failed_throttled += np.where(as_throttled, failing, 0.0).sum(axis=1)
            totals.failed_timeout += np.where(as_throttled, 0.0, failing).sum(axis=1)
            self._given_up += np.where(expired, in_flight, 0.0).sum(axis=1)
            pending[expired] = in_flight[expired] = 0.0
        wanted = rate * self.settings.step_s + self._carry
        created = np.floor(wanted)
        self._carry = wanted - created
        room = np.maximum(self.producers.max_pending - pending.sum(axis=1) - in_flight.sum(axis=1), 0.0)
        accepted = np.minimum(created, room)
        totals.offered += created
        totals.failed_queue_full += created - accepted
        pending[:, 0] = accepted
        known[:, 0] = self._known_throttled_s

    def _byte_order_connections(self, now_s: float) -> np.ndarray:
        """bool[C]: connections read in their byte order (every one under pause-connection; under signal, those
        where the broker fell back for a producer that did not acknowledge in time)."""
        if self.settings.mode == "pause-connection":
            return np.ones(self.n_connections, dtype=bool)
        falling_back = np.zeros(self.n_connections, dtype=bool)
        falling_back[self.producers.connection[self._fallback_at <= now_s]] = True
        return falling_back

    def _connections_paused(self, held: np.ndarray, byte_order: np.ndarray) -> np.ndarray:
        """bool[C]: connections the broker does not read this step: one read in byte order while a producer on
        it with messages to send is held, any connection while a connection-level limit holds it."""
        p = self.producers
        pausing = held & (byte_order[p.connection] | self._held[:, CONNECTION_LEVEL].any(axis=1))
        paused = np.zeros(self.n_connections, dtype=bool)
        paused[p.connection[pausing]] = True
        return paused

    def _own_fractions(self, now_ns: int, paused: np.ndarray) -> np.ndarray:
        """[P, R] the fraction of its pending each of a producer's limiters lets through now: a group's (and
        the broker's) tokens shared in proportion to what is pending; then the room left under the pending
        limits (a connection's, the broker's buffer), shared in proportion to what the quotas let through of
        the producers not paused."""
        p, pending, settings = self.producers, self._pending.sum(axis=1), self.settings
        fractions = np.ones((len(p), len(REASONS)))
        fractions[:, TOPIC] = _fraction(self._topic_bucket.available(now_ns), pending)
        for index, bucket in enumerate(self._group_buckets):
            wanted = np.bincount(p.group_row, weights=pending * self._cost[:, index], minlength=len(bucket))
            group = _fraction(bucket.available(now_ns), wanted)[p.group_row]
            fractions[:, GROUP] = np.minimum(fractions[:, GROUP], group)
        fractions[:, BROKER] = _fraction(self._broker_bucket.available(now_ns)[0], pending.sum())
        if self._persisted_as_read:
            return fractions
        # a cap's column is the fraction of the pending it lets through after the quotas (1 where it does not cut)
        quotas = fractions[:, QUOTAS].min(axis=1)
        sending = np.where(paused, 0.0, pending * quotas)
        room = np.maximum(settings.max_pending_per_connection - self.connection_pending_msgs(), 0.0)
        connection_cut = _fraction(room, np.bincount(p.connection, weights=sending, minlength=self.n_connections))
        connection_cut = connection_cut[p.connection]
        buffer_room = max(settings.publish_buffer_bytes - self.buffer_bytes(), 0.0)
        buffer_cut = _fraction(buffer_room, (sending * connection_cut * self._bytes).sum())
        fractions[:, PENDING] = np.where(connection_cut < 1.0, quotas * connection_cut, 1.0)
        fractions[:, BUFFER] = np.where(buffer_cut < 1.0, quotas * connection_cut * buffer_cut, 1.0)
        return fractions

    def _read(self, read_fraction: np.ndarray, now_ns: int) -> None:
        """Read `read_fraction` of each producer's pending messages, oldest first, through the limiters: they
        are now pending on the broker until persisted."""
        take = self._pending.sum(axis=1) * read_fraction
        drained = _oldest_first(self._pending, take)
        self._pending -= drained
        self._in_flight += drained
        p = self.producers
        for index, bucket in enumerate(self._group_buckets):
            bucket.consume(np.bincount(p.group_row, weights=take * self._cost[:, index], minlength=len(bucket)), now_ns)
        self._topic_bucket.consume(take, now_ns)
        self._broker_bucket.consume(np.array([take.sum()]), now_ns)

    def _hold_dry_limiters(self, now_ns: int) -> None:
        """A limiter with no tokens left holds its producers (until it refills, see `_release_holds`)."""
        group_dry = np.min([bucket.available(now_ns) for bucket in self._group_buckets], axis=0) <= _EMPTY
        self._held[:, TOPIC] |= self._topic_bucket.available(now_ns) <= _EMPTY
        self._held[:, GROUP] |= group_dry[self.producers.group_row]
        self._held[:, BROKER] |= self._broker_bucket.available(now_ns)[0] <= _EMPTY

    def _hold_full_connections(self, totals: _Totals) -> None:
        """A connection whose pending messages reached the limit is held (until they are down to half, see
        `_release_holds`); every connection is, when the broker's pending bytes fill its buffer."""
        if self._persisted_as_read:  # nothing waits on the broker
            return
        settings, connection = self.settings, self.producers.connection
        pending = self.connection_pending_msgs()
        buffer_bytes = self.buffer_bytes()
        totals.connection_pending_max = np.maximum(totals.connection_pending_max, pending[connection])
        totals.buffer_max_bytes = max(totals.buffer_max_bytes, buffer_bytes)
        full = pending >= settings.max_pending_per_connection * (1 - 1e-9)
        self._held[full[connection], PENDING] = True
        if buffer_bytes >= settings.publish_buffer_bytes * (1 - 1e-9):
            self._held[:, BUFFER] = True

    def _persist(self, totals: _Totals) -> None:
        """Persist what the broker holds, up to its capacity for a step: every producer the same fraction of
        its waiting messages (capacity shared in proportion to the bytes waiting), given-up ones first, then
        the oldest. A message persisted within its send timeout is acknowledged: throughput, and its latency."""
        in_flight, given_up = self._in_flight, self._given_up
        waiting = in_flight.sum(axis=1) + given_up
        capacity_bytes = self.settings.persist_bytes_per_s * self.settings.step_s
        served = waiting * _fraction(capacity_bytes, (waiting * self._bytes).sum())
        from_given_up = np.minimum(given_up, served)
        self._given_up = given_up - from_given_up
        acknowledged = _oldest_first(in_flight, served - from_given_up)
        in_flight -= acknowledged
        totals.latency_histogram += acknowledged
        totals.admitted += acknowledged.sum(axis=1)

    def _signal(self, now_s: float, limited: np.ndarray, wait_s: np.ndarray, totals: _Totals) -> None:
        """ThrottleProducer to each producer its own limiters cut this step (or whose connection filled up),
        unless a pause is under way.

        A quota breach asks the client to pause for the limiter's wait; a connection-level breach (broker
        quota, pending messages, buffer) pauses the connection anyway and tells the client so (pause_for 0).
        A client that acknowledges within `receipt_wait_s` pauses itself; with a later one (or one without
        PIP-385, never sent the command) the broker falls back to reading the connection as under
        pause-connection, until the producer sends a step without being cut."""
        p, receipt_wait_s = self.producers, self.settings.receipt_wait_s
        self._fallback_at[~limited & (self._pause_until <= now_s)] = _NEVER
        told = limited & (self._pause_until <= now_s) & ~np.isfinite(self._fallback_at)
        supported = np.isfinite(p.receipt_s)
        totals.signals += told & supported
        reason = np.argmax(np.where(self._held, wait_s, -1.0), axis=1)
        quota_breach = (reason == TOPIC) | (reason == GROUP)
        pause_for_s = np.where(quota_breach, np.maximum(wait_s.max(axis=1), self.settings.step_s), 0.0)
        self._signal_reason = np.where(told, reason, self._signal_reason)
        self._pause_from = np.where(told & supported, now_s + p.receipt_s, self._pause_from)
        self._pause_until = np.where(told & supported, now_s + p.receipt_s + pause_for_s, self._pause_until)
        late = told & quota_breach & (p.receipt_s > receipt_wait_s)
        totals.fallbacks += late
        fallback_at = now_s + np.where(supported, receipt_wait_s, 0.0)
        self._fallback_at = np.where(late, fallback_at, self._fallback_at)

    # -- limiter waits -----------------------------------------------------------------------------

    def _throttle_wait_s(self, now_ns: int) -> np.ndarray:
        """[P, R] seconds until each of a producer's limiters refills to its throttle target."""
        wait_s = np.empty((len(self.producers), len(REASONS)))
        wait_s[:, TOPIC] = self._topic_bucket.throttle_duration_s(now_ns)
        group_wait_s = np.max([bucket.throttle_duration_s(now_ns) for bucket in self._group_buckets], axis=0)
        wait_s[:, GROUP] = group_wait_s[self.producers.group_row]
        wait_s[:, BROKER] = self._broker_bucket.throttle_duration_s(now_ns)[0]
        wait_s[:, [PENDING, BUFFER]] = np.where(self._held[:, [PENDING, BUFFER]], np.inf, 0.0)
        return wait_s


class _Totals:
    """The sums `run` collects over its steps."""

    def __init__(self, n: int, n_ages: int) -> None:
        self.offered = np.zeros(n)
        self.admitted = np.zeros(n)
        self.latency_histogram = np.zeros((n, n_ages))  # messages admitted, by age in steps
        self.throttled_s = np.zeros((n, len(REASONS)))
        self.connection_blocked_s = np.zeros(n)
        self.signals = np.zeros(n, dtype=np.int64)
        self.fallbacks = np.zeros(n, dtype=np.int64)
        self.failed_throttled = np.zeros(n)
        self.failed_timeout = np.zeros(n)
        self.failed_queue_full = np.zeros(n)
        self.connection_pending_max = np.zeros(n)
        self.buffer_max_bytes = 0.0

    def result(self, duration_s: float, age_s: np.ndarray, pending: np.ndarray) -> ProducerRound:
        return ProducerRound(
            duration_s=duration_s,
            offered_msgs=self.offered,
            admitted_msgs=self.admitted,
            latency_p50_s=histogram_quantile(self.latency_histogram, age_s, 0.50),
            latency_p99_s=histogram_quantile(self.latency_histogram, age_s, 0.99),
            throttled_s=self.throttled_s,
            connection_blocked_s=self.connection_blocked_s,
            signals=self.signals,
            fallbacks=self.fallbacks,
            failed_throttled_msgs=self.failed_throttled,
            failed_timeout_msgs=self.failed_timeout,
            failed_queue_full_msgs=self.failed_queue_full,
            pending_msgs=pending,
            connection_pending_max_msgs=self.connection_pending_max,
            buffer_max_bytes=self.buffer_max_bytes,
        )


def fails_as_throttled(known_throttled_s: np.ndarray, send_timeout_s: np.ndarray) -> np.ndarray:
    """PIP-385's exception: a send that times out after its producer was knowingly throttled for more than 80%
    of the send timeout fails as throttled (`ProducerThrottledException`), any other as a timeout."""
    return known_throttled_s > THROTTLED_FAILURE_FRACTION * send_timeout_s


def histogram_quantile(counts: np.ndarray, values: np.ndarray, q: float) -> np.ndarray:
    """[P] the `q` quantile of each row's histogram `counts[P, K]` over `values[K]` (NaN for an empty row):
    the first value at which the cumulative count reaches `q` of the row's total."""
    cumulative = np.cumsum(counts, axis=1)
    total = cumulative[:, -1] if counts.shape[1] else np.zeros(len(counts))
    first = np.argmax(cumulative >= (q * total)[:, None] - 1e-12 * total[:, None], axis=1)
    return np.where(total > 0, values[first], np.nan)


def _oldest_first(ages: np.ndarray, take: np.ndarray) -> np.ndarray:
    """[P, A] the messages `take[P]` removes from each row of `ages[P, A]` (by age, oldest last), oldest first."""
    older_or_same = np.cumsum(ages[:, ::-1], axis=1)[:, ::-1]  # messages at this age or older
    return np.clip(take[:, None] - (older_or_same - ages), 0.0, ages)


def _fraction(tokens: np.ndarray | float, wanted: np.ndarray | float) -> np.ndarray:
    """min(1, tokens / wanted), 1 where nothing is wanted (and for unlimited tokens)."""
    wanted = np.asarray(wanted, dtype=np.float64)
    share = np.divide(tokens, wanted, out=np.ones(np.broadcast(tokens, wanted).shape), where=wanted > 0)
    return np.minimum(share, 1.0)


def _ns(t_s: float) -> int:
    return int(round(t_s * NS_PER_S))
