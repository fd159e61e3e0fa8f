"""Allocation policies: every broker turns its view of the usage table into its new local limits.

One contract for all, vectorised over groups G and brokers B (float64, absent entries masked)::

    step(name, quota[G], usage[G, B], limit[G, B], demand[G, B] | None, present[G, B] | None, **params)
        -> new_limit[G, B]

Column b is what broker b computes from the shared view with `limit[:, b]` its own limit; no policy reads
another broker's limit. Absent entries get 0; a quota < 0 (or +inf) is unlimited and present brokers get
-1; negative or non-finite usage or demand of a present broker raises ValueError.

`POLICIES` maps each name to a `Policy`, callable as
`policy(quota, usage, limit, demand, present, settings)`; `policy.settings(params)` binds and checks the
parameters once (Doorman style), `check_params` does the same for a scenario file before anything runs.
Each policy is a rule from `rules` (or `pulsar`) followed by the post-processing they all share
(`view.finish`: the `min_share`, `smoothing` and `max_step` knobs, then the clamps), run a chunk of groups at a
time on broker-major arrays (`view` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from allocator.policies.numaflow import numaflow_equal, pool_share
from allocator.policies.pulsar import pulsar, pulsar_local_quota
from allocator.policies.rules import (
    doorman_proportional,
    max_min_fair_share,
    pip82_equal,
    pip82_proportional,
    pip82_steal,
    safe_max_min_fair_share,
)
from allocator.policies.settings import Settings
from allocator.policies.view import View, checked_inputs, checked_quota, finish, make_view, row_chunks

__all__ = [
    "POLICIES",
    "RECOMMENDED",
    "BoundPolicy",
    "Policy",
    "Settings",
    "bind",
    "check_params",
    "initial_limit",
    "pool_share",
    "pulsar_local_quota",
    "step",
]

Rule = Callable[[View, Settings], np.ndarray]

_COMMON = frozenset({"min_share", "smoothing", "max_step"})
_WANTS = _COMMON | {"throttle_tolerance", "headroom"}
# The recommended policy's mechanisms, all on: what each buys is measured by switching it off (docs/policies.md).
_SAFE_DEFAULTS: dict[str, object] = {
    "cap_at_residual": True,
    "start_from_residual": True,
    "rescale_on_quota_change": True,
    "stale_after_multiple": 6.0,
    "report_throttled_demand": True,
    "listen_rounds": 1,
    "answer_newcomers": True,
    "listen_while_view_grows": True,
    "lost_change_odds": 0.01,
    "silent_at_fair_share": True,
    "report_while_held": True,
    "count_others_up_to_share": False,  # bounds a liar at once, costs rounds over quota in loss bursts
    "excess_after_rounds": 10,  # bounds a liar once its excess has lasted (broker_node: the counts per peer)
}
_SAFE_PARAMS = frozenset(_SAFE_DEFAULTS)
RECOMMENDED = "fair-share-safe"  # the default of new scenarios and of the demo


@dataclass(frozen=True)
class Policy:
    """A named rule, the parameters it takes, and where a broker's limit starts."""

    name: str
    rule: Rule
    params: frozenset[str]
    starts_at_full_quota: bool = False  # Pulsar; the others start at an equal share
    defaults: Mapping[str, object] = field(default_factory=dict)  # where this policy's defaults differ from Settings'
    # numaflow-equal: a broker splits by the pool size agreed through the consensus store, an input from its host
    # (`BrokerNode.set_pool_size`), and by the brokers in its view only when it has none (`policies.numaflow`)
    agreed_pool_size: bool = False

    def settings(self, params: Mapping[str, object]) -> Settings:
        """Bind the parameters once; ValueError names an unknown parameter or a bad value."""
        if not params:
            return self.default_settings
        unknown = sorted(set(params) - self.params)
        if unknown:
            raise ValueError(
                f"{self.name}: unknown parameter {unknown[0]!r}; it takes {', '.join(sorted(self.params))}"
            )
        return Settings(**{**self.defaults, **params})  # checks every value

    @cached_property
    def default_settings(self) -> Settings:
        """The settings without parameters, checked once (`policies.step` binds on every call)."""
        return Settings(**self.defaults)

    def __call__(
        self,
        quota: np.ndarray,
        usage: np.ndarray,
        limit: np.ndarray,
        demand: np.ndarray | None,
        present: np.ndarray | None,
        settings: Settings,
    ) -> np.ndarray:
        inputs = checked_inputs(quota, usage, limit, demand, present)
        new_limit = np.empty(inputs.usage.shape)
        for rows in row_chunks(*new_limit.shape):
            view = make_view(inputs, rows)
            finish(self.rule(view, settings), view, settings, out=new_limit[rows].T)
        return new_limit


POLICIES: dict[str, Policy] = {
    policy.name: policy
    for policy in (
        Policy("pulsar", pulsar, _COMMON, starts_at_full_quota=True),
        Policy("pip82-equal", pip82_equal, _COMMON),
        Policy("pip82-proportional", pip82_proportional, _COMMON),
        Policy("pip82-steal", pip82_steal, _COMMON | {"steal_fraction", "throttle_tolerance"}),
        Policy("doorman-proportional", doorman_proportional, _WANTS),
        Policy("doorman-fair", max_min_fair_share, _WANTS),
        Policy("fair-share", max_min_fair_share, _WANTS),
        Policy(RECOMMENDED, safe_max_min_fair_share, _WANTS | _SAFE_PARAMS, defaults=_SAFE_DEFAULTS),
        Policy("numaflow-equal", numaflow_equal, _COMMON, agreed_pool_size=True),
    )
}


@dataclass(frozen=True)
class BoundPolicy:
    """A policy with its parameters checked and bound once: what a broker holds for the whole run."""

    policy: Policy
    settings: Settings

    @property
    def name(self) -> str:
        return self.policy.name

    def __call__(
        self,
        quota: np.ndarray,
        usage: np.ndarray,
        limit: np.ndarray,
        demand: np.ndarray | None = None,
        present: np.ndarray | None = None,
    ) -> np.ndarray:
        """One allocation round: the new limits [G, B] (column b is broker b's)."""
        return self.policy(quota, usage, limit, demand, present, self.settings)

    def initial_limit(
        self, quota: np.ndarray, view_brokers: np.ndarray, others_usage: np.ndarray | None = None
    ) -> np.ndarray:
        """[G] the limit a broker starts with when it begins serving a group.

        Pulsar: the full quota; the others: an equal share `quota / max(1, view_brokers)`. With
        `start_from_residual` and `others_usage [G]` (the usage it has heard from the others), the residual it
        heard, `quota - others_usage`, at most that equal share; 0 while it has heard no other broker
        (`view_brokers <= 1`): it listens for a round, at the broker's floor. Unlimited -> -1.
        """
        quota, unlimited = checked_quota(quota)
        brokers = np.maximum(np.asarray(view_brokers, dtype=np.float64), 1.0)
        start = quota if self.policy.starts_at_full_quota else quota / brokers
        if self.settings.start_from_residual and others_usage is not None:
            residual_heard = np.maximum(quota - np.asarray(others_usage, dtype=np.float64), 0.0)
            start = np.where(brokers > 1, np.minimum(start, residual_heard), 0.0)
        return np.where(unlimited, -1.0, start)


def bind(name: str, params: Mapping[str, object] | None = None) -> BoundPolicy:
    """Check `params` for policy `name` and bind them; ValueError names the policy, parameter or value."""
    policy = _policy(name)
    return BoundPolicy(policy, policy.settings(params or {}))


def step(
    name: str,
    quota: np.ndarray,
    usage: np.ndarray,
    limit: np.ndarray,
    demand: np.ndarray | None = None,
    present: np.ndarray | None = None,
    **params: float | None,
) -> np.ndarray:
    """One allocation round of policy `name`: the new limits [G, B] (column b is broker b's). Binds the
    parameters on every call: a broker binds once with `bind`."""
    return bind(name, params)(quota, usage, limit, demand, present)


def check_params(name: str, params: Mapping[str, object]) -> None:
    """Raise ValueError naming an unknown policy, an unknown parameter, or a bad value and the problem."""
    bind(name, params)


def initial_limit(
    name: str, quota: np.ndarray, view_brokers: np.ndarray, others_usage: np.ndarray | None = None
) -> np.ndarray:
    """[G] the limit a broker starts with when it begins serving a group (`BoundPolicy.initial_limit`)."""
    return bind(name).initial_limit(quota, view_brokers, others_usage)


def _policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None
