"""One broker's allocation round, with time passed in: what the Ray actors wrap and a real service embeds.

    admit -> build_reports -> (channel) -> finish_round: receive -> deaths -> roster -> allocate -> new bucket rates

`admit` and `build_reports` form the first phase, `finish_round` the second, in the one order every caller runs (the
runtime's hosts, the one-group harness of the property tests, the benchmarks, the embedding example); a lockstep
driver runs every broker's first phase before any second phase, a realtime broker runs both on its timer.
The node decides nothing about the policy: at each step it asks the policy's hooks (`allocator.policies.hooks`), and
keeps only what every policy shares: buckets, usage table, report threshold, loss meter, ramps, fallback. What the
runtime must know of the policy is a property of `Policy` (`needs_pool_size`, ...), never read off the hooks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from allocator.limiter.group_limiter import GroupLimiter
from allocator.node.explanation import explanation, open_record
from allocator.node.fallback import Fallback
from allocator.node.loss_meter import LossMeter
from allocator.node.node_settings import NodeSettings
from allocator.node.relay import Relay
from allocator.node.report_reader import Inbox, ReportReader
from allocator.node.report_sender import Outbox, ReportSender
from allocator.node.usage_table import Merge, UsageTable
from allocator.policies.decisions import Decisions
from allocator.policies.hooks import PeerView, Traffic
from allocator.policies.report_suppressor import ReportSuppressor
from allocator.ramps.ramped_pool import RampedPools
from allocator.wire.envelope import check_key
from allocator.wire.routing import Routes
from allocator.wire.signing import Signer

__all__ = ["BYTES_DIMENSIONS", "MIN_LIMIT", "BrokerNode", "Inbox", "RosterUpdate", "Traffic"]

BYTES_DIMENSIONS = frozenset({"publish_bytes_per_s", "dispatch_bytes_per_s"})
MIN_LIMIT = 1.0  # Pulsar's floor: a limiter rate of 0 would mean "unlimited", and 0 would starve the broker


@dataclass(frozen=True)
class RosterUpdate:
    """The membership registry's changes to who serves which group, in order: broker `names[brokers[i]]` serves
    group `group_ids[i]` from then on if `serving[i]`, or no longer; `acknowledged`: every live broker has read
    this broker's own latest change (the groups it started serving)."""

    group_ids: np.ndarray  # int64
    brokers: np.ndarray  # indices into `names`
    serving: np.ndarray  # bool
    names: Sequence[str]
    acknowledged: bool = True


class BrokerNode:
    """The state one broker keeps for the groups it may serve (`group_ids`, with `quota[G, D]`).

    A quota is a rate >= 0 or `np.inf` (unlimited, and so is its limit). `routes`: the topics each group's entry
    is published on (None: all on topic 0). With per-broker keys (`settings.public_keys`), `signer` is its own.
    """

    def __init__(
        self,
        name: str,
        group_ids: np.ndarray,
        quota: np.ndarray,
        settings: NodeSettings,
        *,
        routes: Routes | None = None,
        incarnation: int = 0,
        group_names: dict[int, str] | None = None,
        known_brokers: Iterable[str] | None = None,
        signer: Signer | None = None,
    ):
        if (signer is None) != (settings.public_keys is None):
            raise TypeError("a broker signs with its own key (signer) exactly when the cluster has per-broker keys")
        check_key(None, signer)
        self.name = name
        self.settings = settings
        self.incarnation = incarnation
        self.group_ids = np.asarray(group_ids, dtype=np.int64)
        n_groups, n_dimensions = len(self.group_ids), len(settings.dimensions)
        self.quota = _checked_quota(quota, (n_groups, n_dimensions))
        self.known_brokers = set(known_brokers) if known_brokers is not None else None
        policy = settings.policy
        self._hooks = policy.policy.hooks(policy, n_groups, n_dimensions, settings.force_every, settings.report_demand)
        watched = self._hooks.watched(np.zeros((n_groups, n_dimensions)), np.zeros((n_groups, n_dimensions)))
        self.suppressor = ReportSuppressor(n_groups, watched.shape[1], settings.threshold_pct, settings.force_every)
        self.loss_meter = LossMeter(name)
        self.limit = np.zeros((n_groups, n_dimensions))
        self.serving = np.zeros(n_groups, dtype=bool)
        self.limiter = GroupLimiter(n_groups, [dim in BYTES_DIMENSIONS for dim in settings.dimensions])
        self._last_admit_s: float | None = None  # the first round covers one interval
        self._round_s = settings.interval_s  # the time the last admitted traffic covered
        self._claimed: tuple[Traffic, np.ndarray] | None = None  # the last traffic claimed, and its claimed demand
        self.sender = ReportSender(
            name,
            self.group_ids,
            settings,
            routes=routes,
            group_names=group_names,
            signer=signer,
            reports_demand=settings.report_demand or policy.policy.claims_estimated_demand,
        )
        self.relay = Relay(self.sender.routes, settings.wire, policy.policy.relays_news)
        rules = settings.cleanup_rules(policy.policy.keeps_listed_peers)
        self.table = UsageTable(name, self.group_ids, n_dimensions, rules, tracks_news=self.relay.enabled)
        self.reader = ReportReader(settings, group_names=group_names, known_brokers=self.known_brokers)
        self.ramps = RampedPools(settings.ramps, self.group_ids)
        self.pool = self.ramps.capped(self.quota)  # [G, D] what the policy splits
        self.fallback = Fallback(settings.fallback, n_groups, n_dimensions)
        self._heard = np.zeros(n_groups, dtype=bool)  # a report of another broker refreshed the group's view
        self.roster_acknowledged = False  # every live broker has read the groups this one started serving
        self._registry_reachable = True
        self._decisions: Decisions | None = None  # the record of the last allocation (`record_decisions`)
        self._now_s = 0.0  # the time of the last cleanup: the peers' entries' ages are told from it

    def __repr__(self) -> str:
        serving = f"serving={int(self.serving.sum())}/{len(self.group_ids)} groups"
        return f"BrokerNode({self.name!r}, incarnation={self.incarnation}, {serving}, seq={self.sender.seq})"

    # -- phase 1: traffic and report -------------------------------------------------------------

    def admit(self, demand_msgs_per_s: np.ndarray, msg_bytes: np.ndarray, now_s: float) -> Traffic:
        """Let the round's offered load through the token buckets (`GroupLimiter`, PIP-322's limiter as a fluid)
        over the time since the last call; a group that starts being served begins at its hooks' start limit."""
        dt = self.settings.interval_s if self._last_admit_s is None else max(now_s - self._last_admit_s, 1e-9)
        self._last_admit_s, self._round_s = now_s, dt
        demand_msgs_per_s = np.maximum(np.asarray(demand_msgs_per_s, dtype=np.float64), 0.0)
        serving = demand_msgs_per_s > 0
        starting = serving & ~self.serving
        self.serving = serving
        if starting.any():
            start_limit = self.limit.copy()
            start_limit[starting] = self._hooks.start_limit(self.pool[starting], self._view(starting))
            self._set_limits(start_limit)
            if self._decisions is not None:
                self._decisions.note("start", starting)
        admitted = self.limiter.admit(demand_msgs_per_s, msg_bytes, dt, now_s)
        traffic = Traffic(demand=admitted.offered, usage=admitted.admitted, throttled_s=admitted.throttled_s)
        self.claim(traffic)
        return traffic

    def claim(self, traffic: Traffic) -> None:
        """This broker's own entry from `traffic` (`admit` claims what it admitted; a liar claims more), with the
        demand its hooks claim: its own entry holds what its peers hear."""
        demand = self._hooks.claimed_demand(traffic, self._round_s)
        self._claimed = (traffic, demand)
        self.table.set_own(traffic.usage, demand, self.serving)

    def build_reports(self, traffic: Traffic, now_s: float) -> Outbox:
        """Encode this round's reports (one per topic) of the groups the hooks select."""
        if self._claimed is not None and self._claimed[0] is traffic:  # the traffic just claimed: its demand, as is
            demand = self._claimed[1]
        else:
            demand = self._hooks.claimed_demand(traffic, self._round_s)
        watched = self._hooks.watched(traffic.usage, demand)
        selection = self._hooks.select_reports(self.suppressor, watched, self.serving, self.loss_meter.chance_all_lost)
        outbox = self.sender.encode(selection, traffic.usage, demand, self.incarnation, now_s)
        self.suppressor.commit(selection, watched)
        relayed = self.relay.take()
        return replace(outbox, payloads=outbox.payloads + relayed) if relayed else outbox

    def leave(self, now_s: float) -> Outbox:
        """A clean leave: zeros for every group others hold an entry of, along the same routes."""
        selection = self.suppressor.leave()
        zeros = np.zeros_like(self.limit)
        outbox = self.sender.encode(selection, zeros, zeros, self.incarnation, now_s)
        self.suppressor.commit(selection, self._hooks.watched(zeros, zeros))
        return outbox

    # -- phase 2: receive, deaths, roster, allocate ----------------------------------------------

    def finish_round(
        self,
        payloads: Iterable[bytes],
        now_s: float,
        *,
        issued: Mapping[str, int] | None = None,
        dead: Iterable[tuple[str, int]] = (),
        roster: RosterUpdate | None = None,
    ) -> Inbox:
        """The round's second half, in the one order every caller runs; the new limits are in `limit`.

        1. `receive` the peers' reports (`issued`: the incarnations the registry issued, when there is one);
        2. `cleanup`: drop the brokers the registry declared `dead` ((broker, incarnation) pairs), expire silent
           entries;
        3. `update_roster` with the registry's changes, when it answered (`roster`). After the deaths: the roster
           goes on from them (the registry appended each death's end of its listings, then any restart's new
           ones), so an incarnation that restarted since stays listed;
        4. `allocate`, and the new limits go to the buckets.
        """
        inbox = self.receive(payloads, now_s, issued)
        self.cleanup(now_s, dead)
        if roster is not None:
            self.update_roster(roster.group_ids, roster.brokers, roster.serving, roster.names, roster.acknowledged)
        self.allocate()
        return inbox

    def receive(self, payloads: Iterable[bytes], now_s: float, issued: Mapping[str, int] | None = None) -> Inbox:
        """Decode and merge reports, all at once. A bad one, one in other dimensions, or (with `issued`: broker ->
        the highest incarnation the registry issued it) one of a broker or incarnation not issued is counted and
        dropped, never raised (`ReportReader`). The loss meter counts the author's reports accepted or superseded
        by a later one in the batch (on timers, two rounds' reports of a peer often arrive together)."""
        payloads, copies = self.relay.unmark(list(payloads))
        batch, n_rejected, positions = self.reader.decode(payloads, now_s, issued)
        merging = len(batch) > 0  # an empty batch changes no entry: nothing heard, nobody new (most rounds at scale)
        view_before = self.table.view_brokers() if merging else None
        heard_before = self.table.last_heard_s() if merging else None
        outcomes = self.table.merge_many(batch, now_s)
        accepted = np.array([outcome is Merge.ACCEPTED for outcome in outcomes], bool)
        received = np.array([outcome in (Merge.ACCEPTED, Merge.SUPERSEDED) for outcome in outcomes], bool)
        received = batch.select(received & ~copies[positions])  # a copy says nothing of the author's link
        self.loss_meter.observe(received.brokers, received.incarnation, received.seq)
        if self.relay.enabled:
            relayers, relays = self._hooks.news_relays(self.loss_meter.chance_all_lost)
            self.relay.note(batch, accepted, [payloads[p] for p in positions], self.table, relayers, relays)
        if merging:
            self._heard |= self.table.last_heard_s() != heard_before
            self._hooks.heard_newcomers(np.flatnonzero(self.table.view_brokers() > view_before))
        return Inbox(accepted=int(accepted.sum()), rejected=n_rejected, discarded=len(batch) - int(accepted.sum()))

    def update_roster(
        self,
        group_ids: np.ndarray,
        brokers: np.ndarray,
        serving: np.ndarray,
        names: Sequence[str],
        acknowledged: bool = True,
    ) -> None:
        """The membership registry's changes to who serves which group, in order (`UsageTable.update_roster`:
        broker `names[brokers[i]]` serves group `group_ids[i]` if `serving[i]`); `acknowledged`: every live broker
        has read this broker's own latest change (the groups it started serving)."""
        self.roster_acknowledged = acknowledged
        changes = len(group_ids) > 0  # none: nobody listed anew (most rounds of a steady cluster)
        listed_before = self.table.listed_brokers() if changes else None
        self.table.update_roster(group_ids, brokers, serving, names)
        if changes:
            self._hooks.heard_newcomers(np.flatnonzero(self.table.listed_brokers() > listed_before))

    def cleanup(self, now_s: float, dead: Iterable[tuple[str, int]] = ()) -> int:
        """Drop the brokers the registry declared dead, expire silent entries, mark those silent for a forced-report
        cycle (the hooks may count them differently)."""
        self._now_s = now_s
        removed = sum(self.table.remove_broker(broker, incarnation) for broker, incarnation in dead)
        if removed:
            self.fallback.forget(self._brokers_in_view())
        removed += self.table.expire(now_s)
        self.table.mark_silent(now_s, self.settings.force_every * self.settings.interval_s)
        return removed

    def allocate(self) -> np.ndarray:
        """Compute this broker's new limits from its view (the hooks), then the fallback of the groups silent too
        long, and hand them to the buckets; returns [G, D]."""
        n_slots = self.table.n_slots
        self.ramps.step_on_view(
            self._last_admit_s or 0.0, self._round_s, self.table.usage[:, :n_slots], self.table.present[:, :n_slots]
        )
        self.pool = self.ramps.capped(self.quota)
        limit_before = self.limit.copy()
        view = self._view()
        decisions = self._decisions
        if decisions is not None:
            open_record(decisions, self, view, self._now_s)
        self._set_limits(self._hooks.allocate(self.pool, view, self.limit, self.serving), apply=False)
        if decisions is not None:
            decisions.step("floor", self.limit, floor=MIN_LIMIT)
        self.roster_acknowledged = False  # news of this round only: a registry that stops answering acknowledges none
        heard = self._heard & self._registry_reachable
        limit = self.fallback.step(heard, self._brokers_in_view(), limit_before, self.limit, self.pool, MIN_LIMIT)
        self._set_limits(limit)
        if decisions is not None:
            silence = {"silent_rounds": self.fallback.silent_rounds, "known_brokers": self.fallback.known_brokers}
            decisions.step("fallback", limit, **silence)
            decisions.step("floor", self.limit, floor=MIN_LIMIT)
            decisions.close()
        self._heard[:] = False
        return self.limit

    def record_decisions(self, on: bool = True) -> None:
        """Keep a record of each allocation from now on (`explain`), or stop. Off by default: then an allocation
        pays a `None` check; on, a few copies of its [G, D] limits and of the view ([G, K, D])."""
        self._decisions = Decisions(*self.limit.shape) if on else None
        self._hooks.decisions = self._decisions

    @property
    def records_decisions(self) -> bool:
        return self._decisions is not None

    def explain(self, group: int, dimension: int | str = 0) -> dict[str, Any]:
        """Why the limit of group `group` (its global id) in `dimension` (an index or a name) is what it is after
        the last allocation: the quota, the loss measured, each peer as counted and why, and the steps from the
        rule's split to the limit (`allocator.node.explanation`). Needs `record_decisions()` before it."""
        if self._decisions is None or not self._decisions.steps:
            raise ValueError(f"{self.name}: no allocation recorded yet (call record_decisions() before allocate)")
        settings = self.settings
        return explanation(self._decisions, group, dimension, settings.policy, settings.fallback, MIN_LIMIT)

    def set_pool_size(self, pool_size: int | None) -> None:
        """The pool size agreed through the consensus store this round, for a policy that splits by one
        (`Policy.needs_pool_size`); None: none agreed yet (a newcomer waits, at its floor)."""
        if not self.settings.policy.policy.needs_pool_size:
            raise ValueError(f"policy {self.settings.policy.name} splits by no agreed pool size")
        self._hooks.set_pool_size(pool_size)

    @property
    def agreed_pool_size(self) -> int:
        """The pool size this broker split by: -1 when it splits by none (no consensus, or a policy that takes
        none), 0 while it waits for the first agreement."""
        if not getattr(self._hooks, "splits_by_pool_size", False):
            return -1
        return self._hooks.pool_size or 0

    def set_registry_reachable(self, reachable: bool) -> None:
        """Whether the membership registry answers. While it does not, this broker counts as hearing no reports
        (its fallback applies after `fallback.after_rounds`); the round it answers again, reports count again."""
        self._registry_reachable = bool(reachable)

    def set_quota(self, quota: np.ndarray) -> None:
        """A changed quota: the hooks say what it does to the limits now (the references wait for the next round)."""
        new_quota = _checked_quota(quota, self.quota.shape)
        limit = self._hooks.quota_changed(self.quota, new_quota, self.limit, self._view())
        if limit is not self.limit:
            self._set_limits(limit)
        if self._decisions is not None:
            self._decisions.note("quota", (new_quota != self.quota).any(axis=1))
        self.quota = new_quota
        self.pool = self.ramps.capped(self.quota)

    # -- internals -------------------------------------------------------------------------------

    def _view(self, rows: np.ndarray | slice = slice(None)) -> PeerView:
        return self.table.view(rows, self.roster_acknowledged, self.loss_meter.loss)

    def _brokers_in_view(self) -> np.ndarray:
        """[G] the brokers in the view of each group, this one always counted."""
        return self.table.peers_in_view() + 1

    def _set_limits(self, limit: np.ndarray, apply: bool = True) -> None:
        """The limits of the groups served, each >= MIN_LIMIT (`np.inf` stays); to the buckets if `apply`. The
        limits already set (the usual fallback's answer: the policy's limits, as they are) are set as they are."""
        if limit is not self.limit:
            self.limit = np.where(self.serving[:, None], np.maximum(limit, MIN_LIMIT), self.limit)
        if apply:  # a group not served is not limited
            rates = np.where(self.serving[:, None], self.limit, np.inf)
            self.limiter.set_limits(rates, self._last_admit_s or 0.0, self.settings.interval_s)


def _checked_quota(quota: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """[G, D] quotas as float64: rates >= 0, or `np.inf` for unlimited (the one way to say it)."""
    quota = np.array(quota, dtype=np.float64).reshape(shape)
    if not (quota >= 0).all():  # NaN fails too
        raise ValueError("quota must be >= 0, or np.inf for unlimited")
    return quota
