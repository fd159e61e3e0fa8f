"""What Apache Pulsar runs today: ResourceQuotaCalculatorImpl.computeLocalQuota, bit for bit."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from allocator.policies.chunks import RuleChunk, broker_sum
from allocator.policies.hooks import Hooks, PeerView
from allocator.policies.settings import PolicySettings


def pulsar_local_quota(conf: int, my: int, all_usages: Sequence[int]) -> int:
    """Pulsar's local quota for one group: `max(my + residual * my / total, 1)` truncated to an integer.

    `conf < 0` (limit not configured) -> -1; a negative `my` or total -> ValueError; `total == 0` -> `conf`
    (Pulsar's answer to the division by zero during start-up transients). `residual = conf - total`.
    Java computes in `float` (32 bits) and casts to `long`; we do the same, so large values round as
    Pulsar's do (`conf = 2**24 + 1` with a single broker gives 2**24).
    """
    conf, my = operator.index(conf), operator.index(my)
    total = sum(operator.index(usage) for usage in all_usages)
    if conf < 0:
        return -1
    if my < 0 or total < 0:
        raise ValueError(f"local usage ({my}) or total usage ({total}) is negative")
    if total == 0:
        return conf
    return int(_java_float_quota(np.float64(conf), np.float64(my), np.float64(total)))


def pulsar(chunk: RuleChunk, settings: PolicySettings) -> np.ndarray:
    """Pulsar: each broker's share of the quota is its share of the total usage, at least 1.

    "Fair" is proportional to current usage: `quota * my / total` (written as `my + residual * my / total`),
    the whole quota when nobody uses anything. Pulsar works on whole numbers, so the quota and the usages are
    rounded half up first (`my` own usage, `total` over the present brokers). An idle broker gets 1, which
    it needs usage to grow out of; silent brokers never expire here (that is the usage table's business).
    Margin: the limits add up to the rounded quota plus the floor of 1 per broker (`quota + n + 0.5`) and the
    float32 rounding of the residual (a unit in its last place per broker: ~7 when a liar claims 5.7e7), or n
    times the quota when nobody uses anything.
    """
    conf = np.floor(chunk.quota + 0.5)
    my = np.floor(chunk.usage + 0.5)
    total = broker_sum(my)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = _java_float_quota(conf, my, total)
    return np.where(total > 0, share, conf)


def _java_float_quota(conf: np.ndarray, my: np.ndarray, total: np.ndarray) -> np.ndarray:
    """`(long) Float.max(my + residual * ((float) my / total), 1)` on whole numbers held as float64."""
    residual = np.asarray(conf - total).astype(np.float32)
    my32 = np.asarray(my).astype(np.float32)
    my_fraction = my32 / np.asarray(total).astype(np.float32)
    return np.trunc(np.maximum(my32 + residual * my_fraction, np.float32(1.0))).astype(np.float64)


class PulsarHooks(Hooks):
    """Pulsar's broker: a broker that starts serving a group starts at the full quota (its limiter is built with
    the configured rate until the first recompute)."""

    def start_limit(self, pool: np.ndarray, view: PeerView) -> np.ndarray:
        return pool.copy()
