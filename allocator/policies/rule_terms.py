"""Each rule's split of one group in its own terms: the numbers the rule combined, and how, in words.

`rule_terms(rule, settings, call)` rebuilds the one-group chunk the rule read (its inputs as the hooks handed them,
`decisions.RuleCall`) and takes each term from the same helpers the rule computes with (the chunk's residual and
equal share, the partner ranking, the wants, the water level): an explanation of what ran, not a second
implementation of it. The value itself is the one the allocation recorded; the tests recompute it from these terms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from allocator.policies.chunks import RuleChunk, broker_sum, checked_inputs, make_chunk
from allocator.policies.fair_share_safe.rule import safe_max_min_fair_share
from allocator.policies.hooks import OWN
from allocator.policies.numaflow import numaflow_equal
from allocator.policies.pulsar import pulsar
from allocator.policies.rules import (
    _partner_usage,
    _wants,
    doorman_proportional,
    max_min_fair_share,
    pip82_equal,
    pip82_proportional,
    pip82_steal,
)
from allocator.policies.waterfill import water_level

Terms = tuple[dict[str, float], str]


def rule_terms(
    rule: Callable[[RuleChunk, Any], np.ndarray],
    settings: Any,
    pool: float,
    own_limit: float,
    usage: np.ndarray,
    demand: np.ndarray | None,
    present: np.ndarray,
) -> Terms:
    """The terms and the words of `rule`'s split of one group (`usage`, `demand`, `present` [K], slot `OWN` the
    broker explained), for a pool of `pool` and the broker's own previous limit `own_limit`."""
    if np.isinf(pool):
        return {"quota": float(pool)}, "the quota is unlimited: so is the limit"
    limit = np.zeros((1, len(usage)))
    limit[0, OWN] = own_limit
    demand_row = None if demand is None else demand[None, :]
    chunk = make_chunk(
        checked_inputs(np.array([pool]), usage[None, :], limit, demand_row, present[None, :]), slice(0, 1)
    )
    return _EXPLAINERS[rule](chunk, settings)


def _pulsar(chunk: RuleChunk, settings: Any) -> Terms:
    whole_quota = float(np.floor(chunk.quota[0] + 0.5))
    mine = float(np.floor(chunk.usage[OWN, 0] + 0.5))
    total = float(broker_sum(np.floor(chunk.usage + 0.5))[0])
    terms = {"quota": whole_quota, "usage": mine, "total_usage": total, "residual": whole_quota - total}
    if total == 0:
        return terms, f"Pulsar's rule: nobody reported any usage, so the whole quota ({shown(whole_quota)})"
    return terms, (
        f"Pulsar's rule in whole numbers: usage + residual x usage / total = {shown(mine)} + "
        f"{shown(whole_quota - total)} x {shown(mine)} / {shown(total)} (residual = quota {shown(whole_quota)} - "
        f"total usage {shown(total)}), computed in float32, truncated, at least 1"
    )


def _pip82_equal(chunk: RuleChunk, settings: Any) -> Terms:
    mine, total, quota = float(chunk.usage[OWN, 0]), float(chunk.total_usage[0]), float(chunk.quota[0])
    terms = {"usage": mine, "total_usage": total, "quota": quota, "residual": quota - total}
    if quota - total >= 0:
        return terms, (
            f"PIP-82 (equal): its usage {shown(mine)} plus the whole residual {shown(quota - total)} (quota "
            f"{shown(quota)} - total usage {shown(total)})"
        )
    return terms, (
        f"PIP-82 (equal), over quota: its usage cut in proportion, {shown(mine)} x {shown(quota)} / {shown(total)}"
    )


def _pip82_proportional(chunk: RuleChunk, settings: Any) -> Terms:
    mine, total, quota = float(chunk.usage[OWN, 0]), float(chunk.total_usage[0]), float(chunk.quota[0])
    brokers = float(chunk.n_present[0])
    terms = {"usage": mine, "total_usage": total, "quota": quota, "brokers": brokers}
    if total > 0:
        return terms, f"proportional: its share of the total usage, {shown(mine)} / {shown(total)} x {shown(quota)}"
    return terms, f"proportional, nobody using anything: the equal share, quota {shown(quota)} / {brokers:g} brokers"


def _pip82_steal(chunk: RuleChunk, settings: Any) -> Terms:
    proportional_terms, proportional_words = _pip82_proportional(chunk, settings)
    share = float(pip82_proportional(chunk, settings)[OWN, 0])
    mine = proportional_terms["usage"]
    partner = float(_partner_usage(chunk)[OWN, 0])
    throttled = bool(chunk.throttled(settings.throttle_tolerance)[OWN, 0])
    room = float(chunk.quota[0] - chunk.total_usage[0] + mine)
    steal = mine + settings.steal_fraction * (partner - mine) if throttled and partner > mine else float("nan")
    terms = {
        **proportional_terms,
        "proportional_share": share,
        "partner_usage": partner,
        "throttled": float(throttled),
        "steal_fraction": settings.steal_fraction,
        "steal": steal,
        "dominant": float(partner < mine),
        "room": room,
    }
    words = [proportional_words, f" = {shown(share)}"]
    if not np.isnan(steal):
        words.append(
            f"; throttled, it steals {settings.steal_fraction:g} of the way to its partner's usage {shown(partner)}: "
            f"{shown(steal)}, if above"
        )
    if partner < mine:
        words.append(f"; dominant over its partner ({shown(partner)}), it yields to the room left ({shown(room)})")
    return terms, "".join(words)


def _doorman_proportional(chunk: RuleChunk, settings: Any) -> Terms:
    wants = np.where(chunk.present, _wants(chunk, settings), 0.0)[:, 0]
    equal = float(chunk.equal_share[0])
    beyond = wants - equal
    extra_capacity = float(-np.minimum(beyond, 0.0).sum())
    extra_need = float(np.maximum(beyond, 0.0).sum())
    ratio = extra_capacity / extra_need if extra_need > extra_capacity else 1.0
    terms = {
        "want": float(wants[OWN]),
        "equal_share": equal,
        "extra_capacity": extra_capacity,
        "extra_need": extra_need,
        "top_up_ratio": ratio,
    }
    return terms, (
        f"Doorman's ProportionalShare: what it wants ({shown(wants[OWN])}), at most the equal share "
        f"{shown(equal)} plus {ratio:.4g} of its want beyond it (the capacity others leave, "
        f"{shown(extra_capacity)}, over the need beyond equal shares, {shown(extra_need)})"
    )


def _max_min(chunk: RuleChunk, settings: Any) -> Terms:
    wants = _wants(chunk, settings)
    level = float(water_level(chunk.quota, wants)[0])
    want = float(wants[OWN, 0])
    terms = {"want": want, "level": level, "quota": float(chunk.quota[0])}
    return terms, (
        f"max-min fair: the least of what it wants ({shown(want)}) and the water level ({shown(level)}) that hands out "
        f"the quota {shown(chunk.quota[0])} over the wants"
    )


def _safe(chunk: RuleChunk, settings: Any) -> Terms:
    terms, words = _max_min(chunk, settings)
    mine, total = float(chunk.usage[OWN, 0]), float(chunk.total_usage[0])
    residual = max(mine + float(chunk.quota[0]) - total, 0.0)
    terms |= {"usage": mine, "total_counted": total, "residual_heard": residual}
    return terms, (
        f"{words}, and at most the residual heard: quota {shown(chunk.quota[0])} - what the peers are counted at "
        f"({shown(total - mine)}) = {shown(residual)}"
    )


def _numaflow(chunk: RuleChunk, settings: Any) -> Terms:
    brokers, quota = float(chunk.n_present[0]), float(chunk.quota[0])
    return {"brokers": brokers, "quota": quota}, f"Numaflow: the quota over the brokers, {shown(quota)} / {brokers:g}"


def shown(value: float) -> str:
    """A number as the explanation writes it: 4 significant digits, whole numbers whole."""
    return f"{float(value):.6g}" if float(value).is_integer() else f"{float(value):.4g}"


_EXPLAINERS: dict[Callable[..., np.ndarray], Callable[[RuleChunk, Any], Terms]] = {
    pulsar: _pulsar,
    pip82_equal: _pip82_equal,
    pip82_proportional: _pip82_proportional,
    pip82_steal: _pip82_steal,
    doorman_proportional: _doorman_proportional,
    max_min_fair_share: _max_min,
    safe_max_min_fair_share: _safe,
    numaflow_equal: _numaflow,
}
