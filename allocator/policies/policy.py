"""What a policy is: a rule, its own settings, and the broker's hooks around the rule.

The rule is one function with one signature for every policy (Doorman's `algorithm.go`): a broker's view of a
chunk of groups in, every broker's limit out. The hooks (`allocator.policies.hooks.Hooks`) are what a broker
does around the rule: where a limit starts, which groups it reports, how it reads its view, what a quota
change does. The settings are the policy's own frozen knobs and refuse anyone else's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.policies.chunks import RuleChunk, checked_inputs, finish, make_chunk, row_chunks
from allocator.policies.settings import PolicySettings

if TYPE_CHECKING:
    from allocator.policies.hooks import Hooks

Rule = Callable[[RuleChunk, Any], np.ndarray]


@dataclass(frozen=True)
class Policy:
    """A named rule, the settings it takes and the hooks its brokers run; `summary` says what "fair" means."""

    name: str
    summary: str
    rule: Rule
    settings_type: type[PolicySettings]
    hooks: type[Hooks]

    def bind(self, params: Mapping[str, Any] | None = None) -> BoundPolicy:
        """Check `params` once and bind them; ValueError names an unknown parameter or a bad value."""
        if not params:
            return self.default
        return BoundPolicy(self, self.settings_type.from_params(self.name, params))

    # What the runtime must know of a policy, whatever its hooks do: each is a flag of its hooks' class.

    @property
    def needs_pool_size(self) -> bool:
        """Its brokers split by a pool size agreed through a consensus store (numaflow-equal): the runtime runs
        the consensus and gives each broker the agreed size every round (`BrokerNode.set_pool_size`)."""
        return self.hooks.splits_by_agreed_pool_size

    @property
    def claims_estimated_demand(self) -> bool:
        """Its reports carry the demand each broker estimates, whether or not `reporting.report_demand` asks
        (a wire that cannot carry demand cannot serve it)."""
        return self.hooks.claims_estimated_demand

    @property
    def keeps_listed_peers(self) -> bool:
        """A silent peer the membership registry lists as serving a group keeps its entry (the cleanup rules)."""
        return self.hooks.keeps_listed_peers

    @property
    def relays_news(self) -> bool:
        """Its brokers publish again the peers' reports that brought them news (`allocator.node.relay`)."""
        return self.hooks.relays_news

    @cached_property
    def default(self) -> BoundPolicy:
        """The policy with its default settings, checked once (`policies.step` binds on every call)."""
        return BoundPolicy(self, self.settings_type())

    def __call__(
        self,
        quota: np.ndarray,
        usage: np.ndarray,
        limit: np.ndarray,
        demand: np.ndarray | None,
        present: np.ndarray | None,
        settings: PolicySettings,
    ) -> np.ndarray:
        """The rule on every chunk of groups, then `finish` (the shaping knobs and the clamps to [0, quota])."""
        inputs = checked_inputs(quota, usage, limit, demand, present)
        new_limit = np.empty(inputs.usage.shape)
        for rows in row_chunks(*new_limit.shape):
            chunk = make_chunk(inputs, rows)
            finish(self.rule(chunk, settings), chunk, settings.shaping, out=new_limit[rows].T)
        return new_limit


@dataclass(frozen=True)
class BoundPolicy:
    """A policy with its settings checked and bound once: what every broker of a cluster holds for the run."""

    policy: Policy
    settings: PolicySettings

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
