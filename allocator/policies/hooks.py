"""The broker's hooks around a policy's rule, with the reference behaviour (PIP-82's broker).

`BrokerNode` runs its round as a pipeline and asks its policy's hooks at each step; it decides nothing itself:

- `start_limit`: the limit of a broker new to a group (the references: an equal share of the brokers it
  knows; Pulsar: the full quota);
- `claimed_demand` and `watched`: the demand a broker claims (its own entry, and its reports when they carry
  demand) and what the report threshold compares;
- `select_reports`: which groups go in this round's report (the references: PIP-82's threshold and forced
  reports, as `ReportSuppressor` chooses them);
- `allocate`: the new limits from the broker's view (the references: the rule on the view as heard);
- `quota_changed`: what a quota change does to the limits (the references: nothing until the next allocation);
- `keeps_listed_peers`: whether a silent peer the registry lists as serving a group keeps its entry;
- `news_relays`: which peers publish a peer's news again, as they are, and in how many of its reports (the
  references: none; PIP-82's reports go from their author to each receiver only).

Each hook is handed its inputs as arrays (`PeerView`: the usage table as a policy reads it) and keeps whatever
state it needs on the hooks object the node owns; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from allocator.policies.policy import BoundPolicy
from allocator.policies.report_suppressor import ReportSuppressor, Selection
from allocator.policies.rows import row_sum

if TYPE_CHECKING:
    from allocator.policies.decisions import Decisions

OWN = 0  # the slot of the broker that holds the view


@dataclass(frozen=True)
class PeerView:
    """A broker's usage table as its hooks read it: [G, K] slots, slot `OWN` the broker itself.

    `demand` is None unless every present entry carries one (a view a policy can split by demand).
    `listed` says where the membership registry lists the slot's broker as serving the group (all False in a
    run without a registry: `has_roster`), heard or not; `acknowledged` that every live broker has read the
    registry's listing of the groups this broker started serving; `silent` marks present entries of others not
    refreshed for a forced-report cycle (`force_every` intervals) at the last cleanup; `loss` is the share of its
    peers' reports this broker measures as lost (`allocator.node.loss_meter`).
    """

    usage: np.ndarray  # [G, K, D] per second
    demand: np.ndarray | None  # [G, K, D] per second
    present: np.ndarray  # [G, K]
    listed: np.ndarray  # [G, K]
    silent: np.ndarray  # [G, K]
    has_roster: bool
    acknowledged: bool = False
    loss: float = 0.0

    @property
    def others_present(self) -> np.ndarray:
        """[G] how many other brokers are in the view."""
        return row_sum(self.present[:, OWN + 1 :])


@dataclass(frozen=True)
class Traffic:
    """One round of traffic through the buckets; rates per second, [G, D] unless said otherwise."""

    demand: np.ndarray
    usage: np.ndarray
    throttled_s: np.ndarray  # [G]: time within the round the group's producers spent throttled


class Hooks:
    """PIP-82's broker as the literal policies need it; a policy meant to hold the quota overrides these."""

    def __init__(self, bound: BoundPolicy, n_groups: int, n_dimensions: int, force_every: int, report_demand: bool):
        self.bound = bound
        self.n_groups = n_groups
        self.n_dimensions = n_dimensions
        self.force_every = force_every
        self.report_demand = report_demand  # the cluster's reports carry demand (`reporting.report_demand`)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bound.name!r})"

    # The flags `Policy` exposes to the runtime (`Policy.keeps_listed_peers` and the others).
    keeps_listed_peers = False  # PIP-82: a silent peer's entry expires, listed or not
    claims_estimated_demand = False  # its reports carry the demand it estimates (not only with `report_demand`)
    splits_by_agreed_pool_size = False  # numaflow-equal: its host gives it the pool size agreed (`PoolSizeHooks`)
    relays_news = False  # PIP-82's reports go from their author to each receiver only
    decisions: Decisions | None = None  # the broker's record of its allocations, while it keeps one

    def news_relays(self, chance_all_lost: Callable[[int], float]) -> tuple[int, int]:
        """(relayers, copies): a peer's news is published again by the `relayers` brokers after its author in the
        order of their names, each in `copies` of the author's reports from the one that brought it
        (`allocator.node.relay`); `chance_all_lost(copies)` is this broker's loss meter's. The references: none."""
        return 0, 0

    def start_limit(self, pool: np.ndarray, view: PeerView) -> np.ndarray:
        """[g, D] the limit of a broker that starts serving the groups of `view` (rows of the starting groups):
        an equal share of the brokers it knows, itself included."""
        return pool / (view.others_present + 1)[:, None]

    def claimed_demand(self, traffic: Traffic, round_s: float) -> np.ndarray:
        """[G, D] the demand in this broker's own entry and in its reports: the load its producers offered."""
        return traffic.demand

    def watched(self, usage: np.ndarray, demand: np.ndarray) -> np.ndarray:
        """What the report threshold compares with the last report: the usage (PIP-82)."""
        return usage

    def select_reports(
        self,
        suppressor: ReportSuppressor,
        watched: np.ndarray,
        serving: np.ndarray,
        chance_all_lost: Callable[[int], float],
    ) -> Selection:
        """This round's report: PIP-82's threshold and forced reports (`chance_all_lost(copies)`: the chance that
        so many reports of this broker are all lost, from the loss it measures)."""
        return suppressor.select(watched, serving)

    def allocate(self, pool: np.ndarray, view: PeerView, limit: np.ndarray, serving: np.ndarray) -> np.ndarray:
        """[G, D] the rule on the view as heard, this broker's column of it (its own limit from `limit`)."""
        return np.stack(
            [
                self.rule(pool[:, d], limit[:, d], view.usage[:, :, d], self.demand(view, d), view.present)
                for d in range(self.n_dimensions)
            ],
            axis=1,
        )

    def quota_changed(self, old: np.ndarray, new: np.ndarray, limit: np.ndarray, view: PeerView) -> np.ndarray:
        """[G, D] the limits once the quota moved from `old` to `new`: unchanged until the next allocation."""
        return limit

    def heard_newcomers(self, rows: np.ndarray) -> None:
        """A broker new to the view of the groups `rows` was heard or listed (the references do nothing)."""

    def demand(self, view: PeerView, dimension: int) -> np.ndarray | None:
        """[G, K] the demands of one dimension of the view, when the cluster's reports carry them."""
        return view.demand[:, :, dimension] if self.report_demand and view.demand is not None else None

    def rule(
        self,
        pool: np.ndarray,
        own_limit: np.ndarray,
        usage: np.ndarray,
        demand: np.ndarray | None,
        present: np.ndarray,
    ) -> np.ndarray:
        """[G] this broker's column (`OWN`) of the rule on one dimension: `usage`, `demand` and `present` [G, K]."""
        limit_view = np.zeros(present.shape)
        limit_view[:, OWN] = own_limit
        record = None if self.decisions is None else self.decisions.rule(pool, own_limit, usage, demand, present)
        return self.bound(pool, usage, limit_view, demand, present, record)[:, OWN]
