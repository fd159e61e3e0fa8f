"""One service of the embedding example: a plain asyncio process that admits messages through `allocator`'s token
bucket and shares one quota with its peers, each running `allocator`'s `BrokerNode`, the reports on Redis
Pub/Sub in quotalab's frames (`actors/transport/redis_wire.py`: a quotalab run can listen in). No Ray, no quotalab
runtime.

    python examples/embedding/service.py --name b1 --peers b1 b2 b3 --redis-url redis://127.0.0.1:6379/0

Every `--interval-s` it prints one JSON line: the round's offered and admitted messages, its limit, the brokers in
its view and the reports Redis lost (gaps in a peer's numbers). SIGTERM or Ctrl-C: a clean leave (zeros to the
peers, who give its share back at once). See docs/embedding.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from collections import deque

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from actors.transport.redis_wire import FrameError, SequenceGaps, Sequencer, channel_name, frame, unframe
from allocator import policies
from allocator.limiter.token_bucket import TokenBucket
from allocator.node.broker_node import BrokerNode, Traffic
from allocator.node.node_settings import NodeSettings

GROUP = "tenant-a/ns-1"
SLICE_S = 0.01  # producers offer their messages in slices about this long
RATE_WINDOW_S = 2.0  # rates are measured over the rounds of the last 2 s: at a limit of a message a second, a
# single round would often see none, and a round reported with no usage tells the peers the traffic stopped
MSG_BYTES = np.array([1000.0])


class Producers:
    """Messages offered at `rate_per_s` and admitted through `bucket`, as PIP-322's limiter does: an accepted
    message always takes its token (the balance may go negative), and a producer that found the bucket empty
    pauses until it refills; what it offers meanwhile is refused."""

    def __init__(self, rate_per_s: float, bucket: TokenBucket, now: float) -> None:
        self.rate_per_s, self.bucket = rate_per_s, bucket
        self.offered = self.admitted = 0
        self._paused_until = 0.0
        self._last = now
        self._owed = 0.0  # fractional messages carried to the next slice

    def offer(self, now: float) -> None:
        """The messages due since the last call (a slice is never exactly as long as asked)."""
        self._owed += self.rate_per_s * (now - self._last)
        self._last = now
        count, self._owed = int(self._owed), self._owed % 1
        for _ in range(count):
            self.offered += 1
            if now < self._paused_until:
                continue
            self.admitted += 1
            if not self.bucket.consume(1):
                self._paused_until = now + self.bucket.throttle_duration_s()

    def take_counts(self) -> tuple[int, int]:
        counts = (self.offered, self.admitted)
        self.offered = self.admitted = 0
        return counts


class Service:
    def __init__(self, args: argparse.Namespace) -> None:
        self.name, self.interval_s = args.name, args.interval_s
        settings = NodeSettings(
            dimensions=("publish_msgs_per_s",),
            interval_s=args.interval_s,
            policy=policies.bind(policies.RECOMMENDED),
            stale_after_s=10 * args.interval_s,
            max_report_age_s=2 * args.interval_s,
            max_clock_skew_s=2 * args.interval_s,
        )
        quota = np.array([[args.quota]])
        self.node = BrokerNode(
            args.name, np.array([0]), quota, settings, group_names={0: GROUP}, known_brokers=args.peers
        )
        self.channel = channel_name(f"quotalab:{args.run}", "broadcast", 0)  # every report on shard 0
        self.redis = aioredis.Redis.from_url(args.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.sequencer, self.gaps = Sequencer(), SequenceGaps()
        self.inbox: list[bytes] = []
        self.lost_transport = 0
        self.offered_per_s = args.offered
        self.producers: Producers | None = None
        self.window: deque[tuple[float, int, int]] = deque()  # (seconds, offered, admitted) of the last rounds

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self.receive())]
        self.node.admit(np.array([self.offered_per_s]), MSG_BYTES, time.time())  # serves the group: a start limit
        self.producers = Producers(self.offered_per_s, self.bucket(self.node.limit[0, 0]), time.monotonic())
        tasks.append(asyncio.create_task(self.produce()))
        round_index, due = 0, time.monotonic()
        last = time.time()
        while not stop.is_set():
            due += self.interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, due - time.monotonic()))
            if stop.is_set():
                break
            now = time.time()
            await self.round(round_index, now, now - last)
            round_index, last = round_index + 1, now
        for task in tasks:
            task.cancel()
        await self.publish(self.node.leave(time.time()).payloads)  # a clean leave
        await self.redis.aclose()

    async def round(self, round_index: int, now: float, elapsed_s: float) -> None:
        """Report what the bucket admitted, hear the peers, take the new limit."""
        offered, admitted = self.producers.take_counts()
        offered_per_s, admitted_per_s, refused = self.rates(elapsed_s, offered, admitted)
        self.node.admit(np.array([offered_per_s]), MSG_BYTES, now)  # the node's round: who it serves, for how long
        traffic = Traffic(np.array([[offered_per_s]]), np.array([[admitted_per_s]]), np.array([refused * elapsed_s]))
        self.node.claim(traffic)  # the usage it reports: what the bucket really admitted
        await self.publish(self.node.build_reports(traffic, now).payloads)
        payloads, self.inbox = self.inbox, []
        self.node.finish_round(payloads, now)  # the registry's deaths and roster too, where a service has one
        limit = float(self.node.limit[0, 0])
        self.producers.bucket.set_rate(limit, capacity=self.capacity(limit))
        record = {"name": self.name, "round": round_index, "t": now, "elapsed_s": elapsed_s, "offered": offered,
                  "admitted": admitted, "limit": limit, "view": int(self.node.table.view_brokers()[0]),
                  "lost_transport": self.lost_transport}  # fmt: skip
        print(json.dumps(record), flush=True)

    def rates(self, elapsed_s: float, offered: int, admitted: int) -> tuple[float, float, float]:
        """Offered and admitted messages a second, and the share refused, over the last `RATE_WINDOW_S`."""
        self.window.append((elapsed_s, offered, admitted))
        while sum(seconds for seconds, _, _ in self.window) - self.window[0][0] >= RATE_WINDOW_S:
            self.window.popleft()
        seconds, offered, admitted = (sum(column) for column in zip(*self.window, strict=True))
        return offered / seconds, admitted / seconds, (offered - admitted) / offered if offered else 0.0

    async def publish(self, payloads: list[tuple[int, bytes]]) -> None:
        """Each report framed and published; Redis gone costs this round's reports, never the service."""
        with contextlib.suppress(RedisError, OSError):
            for _, payload in payloads:
                seq = self.sequencer.next(self.name, self.channel)
                await self.redis.publish(
                    self.channel, frame(self.name, self.sequencer.publisher_id, seq, time.time(), payload)
                )

    async def receive(self) -> None:
        """The peers' reports into the inbox; reconnects after a second when Redis drops the connection."""
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    async for message in pubsub.listen():
                        if message["type"] == "message":
                            self.take(message["data"])
            except (RedisError, OSError):  # what is published meanwhile shows as the next gap of each peer
                await asyncio.sleep(1.0)

    def take(self, data: bytes) -> None:
        try:
            received = unframe(data)
        except FrameError:
            return
        if received.sender != self.name:
            self.lost_transport += self.gaps.observe(self.channel, received.sender, received.publisher_id, received.seq)
            self.inbox.append(received.payload)

    async def produce(self) -> None:
        while True:
            self.producers.offer(time.monotonic())
            await asyncio.sleep(SLICE_S)

    def bucket(self, rate: float) -> TokenBucket:
        return TokenBucket(rate, capacity=self.capacity(rate), clock=time.monotonic_ns)

    def capacity(self, rate: float) -> float:
        """A round's worth of tokens, and at least one: a bucket that cannot hold a token admits nothing."""
        return max(rate * self.interval_s, 1.0)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="this service's broker name")
    parser.add_argument("--peers", nargs="+", required=True, help="every service's name, this one's included")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--run", default="embedding", help="scopes the Redis channel: quotalab:<run>:shard:0")
    parser.add_argument("--quota", type=float, default=300.0, help="the group's quota, messages a second")
    parser.add_argument("--offered", type=float, default=200.0, help="messages a second this service's producers offer")
    parser.add_argument("--interval-s", type=float, default=0.2, help="seconds between two allocation rounds")
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await Service(parse(argv)).run(stop)


if __name__ == "__main__":
    asyncio.run(main())
