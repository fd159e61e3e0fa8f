"""A run's own `redis-server`: on 127.0.0.1, a free port, no persistence, stopped with the run.

A realtime run on `channel.transport: redis` (or with `membership.store: redis`) and no URL starts one for
itself (`serving`): every host of the run and the pool-size consensus talk to it, and it is stopped when the
run ends, fails or is interrupted. (Not when the driver is killed outright: Linux's "die with the parent"
would also kill it when the thread that started it ends, which a `redis_outage` restart's thread does.) A
`redis_outage` event stops it and starts it again, empty, on the same port.

A Ray cluster of several machines cannot reach this machine's 127.0.0.1: it needs `channel.redis_url`.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace

from actors.errors import RunFailedError
from actors.plan import Plan

START_TIMEOUT_S = 10.0


class RedisServerError(RuntimeError):
    """redis-server is missing or did not start (one line)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A `redis-server` process on 127.0.0.1. `stop()` kills it (as a crash would), `start()` starts it again on
    the same port, empty; `pubsub_buffer_limit`: `client-output-buffer-limit pubsub` as Redis writes it (`"64kb 0 0"`:
    the hard limit, then the soft limit and its seconds), or None for Redis's default (32mb 8mb 60)."""

    def __init__(self, port: int | None = None, pubsub_buffer_limit: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError("redis-server is not installed (apt-get install -y redis-server)")
        self.binary = binary
        self.port = free_port() if port is None else port
        self.pubsub_buffer_limit = pubsub_buffer_limit
        self.process: subprocess.Popen | None = None
        self.start()

    def __repr__(self) -> str:
        running = self.process is not None and self.process.poll() is None
        return f"RedisServer({self.url!r}, {'running' if running else 'stopped'})"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        command = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        if self.pubsub_buffer_limit is not None:
            command += ["--client-output-buffer-limit", "pubsub", *self.pubsub_buffer_limit.split()]
        return command

    def start(self) -> None:
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisServerError(f"redis-server exited with status {self.process.returncode} on port {self.port}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        self.stop()
        raise RedisServerError(f"redis-server did not listen on 127.0.0.1:{self.port} within {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def needs_own_server(plan: Plan) -> bool:
    """The run uses Redis and was given no URL for it."""
    channel_needs = plan.channel.transport == "redis" and plan.channel.redis_url is None
    consensus_needs = plan.consensus is not None and plan.consensus.store == "redis" and plan.consensus.url is None
    return channel_needs or consensus_needs


@contextlib.contextmanager
def serving(plan: Plan, backend_name: str) -> Iterator[tuple[Plan, RedisServer | None]]:
    """The plan with every Redis URL it lacks pointing at a server of its own, started here and stopped on the
    way out (whatever ends the run); the plan as it is, and no server, when it needs none. A Ray cluster of
    several machines cannot reach this one's 127.0.0.1: `RunFailedError` then."""
    if not needs_own_server(plan):
        yield plan, None
        return
    if backend_name == "ray":
        _refuse_a_cluster()
    with RedisServer(pubsub_buffer_limit=plan.channel.pubsub_buffer_limit) as server:
        yield with_redis_url(plan, server.url), server


def _refuse_a_cluster() -> None:
    import ray

    nodes = sum(1 for node in ray.nodes() if node["Alive"])
    if nodes > 1:
        raise RunFailedError(
            f"channel.redis_url: needed on a Ray cluster of {nodes} nodes (the run's own redis-server listens on "
            "this machine's 127.0.0.1 only)"
        )


def with_redis_url(plan: Plan, url: str) -> Plan:
    """`plan` with `url` wherever a Redis URL is missing (the channel on Redis, the consensus on Redis)."""
    channel = plan.channel
    if channel.transport == "redis" and channel.redis_url is None:
        channel = replace(channel, redis_url=url)
    consensus = plan.consensus
    if consensus is not None and consensus.store == "redis" and consensus.url is None:
        consensus = replace(consensus, url=url)
    return replace(plan, channel=channel, consensus=consensus)
