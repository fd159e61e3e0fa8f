"""The channel's transport: `channel.transport`, `channel.redis_url`, `channel.pubsub_buffer_limit`; Redis URLs;
and the events only a realtime run has, `stall` (a host stops reading) and `redis_outage` (the run's own
Redis server stops, then starts again, empty).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from experiments import checks
from experiments.scenario.spec import ChannelSpec, MembershipSpec

if TYPE_CHECKING:  # sections imports this module (membership's url)
    from experiments.scenario.sections import Context

REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")
MAX_STALL_S = 86_400.0
_SIZE = r"\d+(?:[kmg]b?|b)?"  # Redis's sizes: 100, 64kb, 1mb, 1g ...
_PUBSUB_LIMIT = re.compile(rf"{_SIZE}\s+{_SIZE}\s+\d+", re.IGNORECASE)


def redis_url(url: str, key: str) -> str:
    """A Redis URL a manifest may record: a known scheme, no password."""
    if not url.startswith(REDIS_URL_SCHEMES):
        raise checks.FieldError(key, f"must start with {', '.join(REDIS_URL_SCHEMES)}, got {checks.show(url)}")
    if urlsplit(url).password is not None:
        raise checks.FieldError(key, "must not hold a password: the manifest records the url")
    return url


def check_channel(channel: ChannelSpec, mode: str, key: str) -> None:
    """The transport settings together: Redis needs a realtime run; a URL and a buffer limit need Redis, and the
    limit is set on the run's own server only."""
    if channel.transport == "redis" and mode != "realtime":
        raise checks.FieldError(
            checks.at(key, "transport"), "redis needs mode: realtime (lockstep needs a deterministic delivery)"
        )
    if channel.redis_url is not None:
        if channel.transport != "redis":
            raise checks.FieldError(checks.at(key, "redis_url"), "needs transport: redis")
        redis_url(channel.redis_url, checks.at(key, "redis_url"))
    if channel.pubsub_buffer_limit is not None:
        limit_key = checks.at(key, "pubsub_buffer_limit")
        if channel.transport != "redis" or channel.redis_url is not None:
            raise checks.FieldError(
                limit_key,
                "configures the run's own redis-server: needs transport: redis and no redis_url "
                "(set client-output-buffer-limit on a server of your own)",
            )
        if not _PUBSUB_LIMIT.fullmatch(channel.pubsub_buffer_limit.strip()):
            problem = "expected 'HARD SOFT SECONDS' as Redis writes it, e.g. '64kb 0 0', got"
            raise checks.FieldError(limit_key, f"{problem} {checks.show(channel.pubsub_buffer_limit)}")


def own_server(channel: ChannelSpec, membership: MembershipSpec) -> bool:
    """The run starts a redis-server of its own: it uses Redis and was given no URL for it."""
    channel_needs = channel.transport == "redis" and channel.redis_url is None
    consensus_needs = membership.store == "redis" and membership.url is None and channel.redis_url is None
    return channel_needs or consensus_needs


def stall_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    """`{broker: B, seconds: S}`: B's host reads none of its reports for S seconds (realtime)."""
    if context.mode != "realtime":
        raise checks.FieldError(key, "needs mode: realtime (a host stops reading for real seconds)")
    body = checks.mapping(value, key, ("broker", "seconds"), ("broker", "seconds"))
    broker = checks.known(body["broker"], checks.at(key, "broker"), context.brokers, "broker")
    seconds = checks.number(body["seconds"], checks.at(key, "seconds"), checks.Range(0, low_open=True, cap=MAX_STALL_S))
    return broker, {"seconds": float(seconds)}


def redis_outage_event(value: Any, key: str, context: Context) -> tuple[str, dict[str, Any]]:
    """`{rounds: K}`: the run's own Redis server is killed (its data gone) and started again K rounds later."""
    if not context.own_redis:
        raise checks.FieldError(
            key,
            "needs the run's own Redis server (channel.transport: redis or membership.store: redis, without a URL): "
            "a server given by URL is not the run's to stop",
        )
    body = checks.mapping(value, key, ("rounds",), ("rounds",))
    rounds = checks.number(body["rounds"], checks.at(key, "rounds"), checks.Range(1, cap=context.rounds), integer=True)
    return "", {"rounds": rounds}
