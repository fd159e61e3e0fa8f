"""`generated:` a synthetic cluster for scenarios too big to write by hand (groups and brokers from a few numbers)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from actors.workload import MAX_RATE, Profile
from experiments import checks
from experiments.scenario import converter, sections
from experiments.scenario.spec import BrokerSpec, GroupSpec, WorkloadSpec

_GENERATED_KEYS = ("groups", "brokers", "brokers_per_group", "quota", "msgs_per_s", "msg_bytes", "seed")
MAX_WORKLOADS = 5_000_000  # (group, broker) entries: 10 times PIP-82's 500,000, which take 3.7 s and 330 MB to load
_RATE = checks.Range(0, cap=MAX_RATE)


def generated(
    raw: Any, key: str, scenario_seed: int
) -> tuple[tuple[GroupSpec, ...], tuple[BrokerSpec, ...], dict[str, Any]]:
    """Expand `generated: {groups, brokers, brokers_per_group, quota, msgs_per_s, [msg_bytes, seed]}`.

    Groups `ns-000001`... and brokers `broker-001`... (1-based, zero-padded). Each group gets the same
    `quota` and is placed on `brokers_per_group` distinct brokers (see `_placement`); when `brokers` divides
    `groups`, every broker hosts exactly `groups * brokers_per_group / brokers` of them. `msgs_per_s` is a
    number or `{uniform: [low, high]}`, drawn once per (group, broker) as a constant rate (2 decimals).
    `seed` defaults to the scenario's seed.
    """
    body = checks.mapping(raw, key, _GENERATED_KEYS, _GENERATED_KEYS[:5])
    n_groups = checks.number(body["groups"], checks.at(key, "groups"), checks.AT_LEAST_ONE, integer=True)
    n_brokers = checks.number(
        body["brokers"], checks.at(key, "brokers"), checks.Range(1, cap=converter.MAX_BROKERS), integer=True
    )
    per_group = checks.number(
        body["brokers_per_group"], checks.at(key, "brokers_per_group"), checks.Range(1, n_brokers), True
    )
    if n_groups * per_group > MAX_WORKLOADS:
        problem = f"groups * brokers_per_group must be <= {MAX_WORKLOADS}, got {n_groups} * {per_group}"
        raise checks.FieldError(checks.at(key, "groups"), problem)
    quota = sections.quota(body["quota"], checks.at(key, "quota"))
    low, high = _uniform(body["msgs_per_s"], checks.at(key, "msgs_per_s"))
    shape = converter.plain_fields(WorkloadSpec, body, key)  # msg_bytes
    seed = checks.number(body.get("seed", scenario_seed), checks.at(key, "seed"), checks.SEED, integer=True)

    rng = np.random.default_rng(seed)
    hosts = _placement(n_groups, n_brokers, per_group, rng)
    rates = rng.uniform(low, high, size=hosts.shape).round(2)

    with _collector_paused():
        groups, brokers = _expand(hosts, rates, n_brokers, quota, shape)
    return groups, brokers, {**body, "seed": seed}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: building a million live objects sets off full collections that
    free nothing and would take most of the time (2.6 of 4.3 s for PIP-82's size)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _expand(
    hosts: np.ndarray, rates: np.ndarray, n_brokers: int, quota: dict[str, float], shape: dict[str, Any]
) -> tuple[tuple[GroupSpec, ...], tuple[BrokerSpec, ...]]:
    """Groups and brokers from `hosts[g, k]` (broker index) and `rates[g, k]` (constant msgs/s)."""
    n_groups, per_group = hosts.shape
    group_names = [f"ns-{index:0{len(str(n_groups))}d}" for index in range(1, n_groups + 1)]
    broker_names = [f"broker-{index:0{len(str(n_brokers))}d}" for index in range(1, n_brokers + 1)]
    order = np.argsort(hosts.ravel(), kind="stable")  # workload entries grouped by broker, groups in order
    group_of = np.repeat(np.arange(n_groups), per_group)[order].tolist()
    rate_of = rates.ravel()[order].tolist()
    ends = np.cumsum(np.bincount(hosts.ravel(), minlength=n_brokers)).tolist()
    brokers, start = [], 0
    for broker, end in zip(broker_names, ends, strict=True):
        entries = zip(group_of[start:end], rate_of[start:end], strict=True)
        work = tuple(WorkloadSpec(group_names[g], Profile("constant", {"rate": r}), **shape) for g, r in entries)
        brokers.append(BrokerSpec(name=broker, workload=work))
        start = end
    groups = tuple(GroupSpec(name=name, quota=dict(quota)) for name in group_names)
    return groups, tuple(brokers)


def _uniform(value: Any, key: str) -> tuple[float, float]:
    """`msgs_per_s` of a generated block: a number, or `{uniform: [low, high]}`."""
    if isinstance(value, dict):
        bounds_key = checks.at(key, "uniform")
        bounds = checks.mapping(value, key, ("uniform",), ("uniform",))["uniform"]
        low, high = (float(bound) for bound in checks.bounds(bounds, bounds_key, _RATE))
        if low > high:
            raise checks.FieldError(bounds_key, f"low must be <= high, got [{low}, {high}]")
        return low, high
    rate = float(checks.number(value, key, _RATE))
    return rate, rate


def _placement(n_groups: int, n_brokers: int, per_group: int, rng: np.random.Generator) -> np.ndarray:
    """Broker indices [G, K]: group g on K consecutive brokers of a shuffled ring, starting at g mod B.

    Each lap of B groups uses its own shuffle, so co-hosted brokers vary while every broker still hosts
    exactly K groups per full lap (even load, as in PIP-82's 5,000 namespaces per broker).
    """
    laps = -(-n_groups // n_brokers)
    rings = np.argsort(rng.random((laps, n_brokers)), axis=1)
    group = np.arange(n_groups)
    return rings[(group // n_brokers)[:, None], (group[:, None] + np.arange(per_group)) % n_brokers]
