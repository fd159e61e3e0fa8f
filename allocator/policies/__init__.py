"""Allocation policies: every broker turns its view of the usage table into its new local limits.

One contract for every rule, vectorised over groups G and brokers B (float64, absent entries masked)::

    step(name, quota[G], usage[G, B], limit[G, B], demand[G, B] | None, present[G, B] | None, **params)
        -> new_limit[G, B]

Column b is what broker b computes from the shared view with `limit[:, b]` its own limit; no policy reads
another broker's limit. Absent entries get 0; an unlimited quota is `np.inf` and its present brokers get
`np.inf`; a negative quota, or negative or non-finite usage or demand of a present broker, raises ValueError.

`POLICIES` maps each name to a `Policy` (`policy.py`): its rule, its own settings (frozen, refusing others'
keys) and its broker's hooks (`hooks.py`: where a limit starts, what is reported, how the view is read, what a
quota change does). `bind(name, params)` checks the parameters once (Doorman style), `check_params` does the
same for a scenario file before anything runs, `describe(name)` lists a policy's knobs with their reasons.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from allocator.policies import fair_share_safe
from allocator.policies.hooks import Hooks
from allocator.policies.numaflow import PoolSizeHooks, numaflow_equal, pool_share
from allocator.policies.policy import BoundPolicy, Policy
from allocator.policies.pulsar import PulsarHooks, pulsar, pulsar_local_quota
from allocator.policies.rules import (
    doorman_proportional,
    max_min_fair_share,
    pip82_equal,
    pip82_proportional,
    pip82_steal,
)
from allocator.policies.settings import Knob, ShapedSettings, StealSettings, WantsSettings

__all__ = [
    "POLICIES",
    "RECOMMENDED",
    "BoundPolicy",
    "Knob",
    "Policy",
    "bind",
    "check_params",
    "describe",
    "pool_share",
    "pulsar_local_quota",
    "step",
]

RECOMMENDED = fair_share_safe.POLICY.name  # the default of new scenarios and of the demo

POLICIES: dict[str, Policy] = {
    policy.name: policy
    for policy in (
        Policy("pulsar", "Apache Pulsar today: proportional to usage, `quota * my / total`, at least 1", pulsar,
               ShapedSettings, PulsarHooks),
        Policy("pip82-equal", "PIP-82: under quota every broker adds the whole residual", pip82_equal,
               ShapedSettings, Hooks),
        Policy("pip82-proportional", "PIP-82: the residual split in proportion to usage", pip82_proportional,
               ShapedSettings, Hooks),
        Policy("pip82-steal", "PIP-82: proportional, a throttled broker steals towards its dominant partner",
               pip82_steal, StealSettings, Hooks),
        Policy("doorman-proportional", "Doorman's ProportionalShare: wants up to an equal share, then in proportion",
               doorman_proportional, WantsSettings, Hooks),
        Policy("doorman-fair", "Doorman's FairShare: max-min fair over the wants", max_min_fair_share,
               WantsSettings, Hooks),
        Policy("fair-share", "max-min fair water-filling of the quota over the wants", max_min_fair_share,
               WantsSettings, Hooks),
        fair_share_safe.POLICY,
        Policy("numaflow-equal", "Numaflow: `quota / N`, N the agreed pool of brokers serving the group",
               numaflow_equal, ShapedSettings, PoolSizeHooks),
    )
}  # fmt: skip


def bind(name: str, params: Mapping[str, object] | None = None) -> BoundPolicy:
    """Check `params` for policy `name` and bind them; ValueError names the policy, parameter or value."""
    return _policy(name).bind(params)


def step(
    name: str,
    quota: np.ndarray,
    usage: np.ndarray,
    limit: np.ndarray,
    demand: np.ndarray | None = None,
    present: np.ndarray | None = None,
    **params: float | None,
) -> np.ndarray:
    """One allocation round of policy `name`'s rule: the new limits [G, B] (column b is broker b's). Binds the
    parameters on every call: a broker binds once with `bind`."""
    return bind(name, params)(quota, usage, limit, demand, present)


def check_params(name: str, params: Mapping[str, object]) -> None:
    """Raise ValueError naming an unknown policy, an unknown parameter, or a bad value and the problem."""
    bind(name, params)


def describe(name: str) -> list[Knob]:
    """The knobs policy `name` takes: name, default, allowed values and what each answers."""
    return _policy(name).settings_type.describe()


def _policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None
