"""One broker's allocation round, with time passed in: what the Ray actors wrap and a real service embeds.

    traffic -> report -> (channel) -> receive -> clean up -> allocate -> new bucket rates

`admit` and `build_reports` form the first phase, `receive`, `cleanup` and `allocate` the second; a lockstep
driver runs every broker's first phase before any second phase, a realtime broker runs both on its timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from allocator.limiter.bucket_array import TokenBucketArray
from allocator.node.fallback import Fallback
from allocator.node.loss_meter import LossMeter, copies_needed
from allocator.node.node_settings import NodeSettings
from allocator.node.report_reader import ReportReader
from allocator.node.report_sender import Outbox, ReportSender
from allocator.node.reporting import ReportSuppressor, Selection
from allocator.node.usage_table import OWN, CleanupRules, Merge, UsageTable
from allocator.policies.waterfill import max_min_fair
from allocator.ramps.ramped_pool import RampedPools
from allocator.wire.envelope import check_key
from allocator.wire.routing import Routes
from allocator.wire.signing import Signer

BYTES_DIMENSIONS = frozenset({"publish_bytes_per_s", "dispatch_bytes_per_s"})
MIN_LIMIT = 1.0  # Pulsar's floor: a limiter rate of 0 would mean "unlimited", and 0 would starve the broker
HELD_TOLERANCE = 0.05  # `report_while_held`: a limit under 95% of the broker's fair share is held below it
EXCESS_TOLERANCE = 0.05  # `excess_after_rounds`: a peer more than 5% above its fair share is in excess
MIN_ADMITTED_FRACTION = 1e-6  # a demand estimated from throttled time is at most a million times the usage


@dataclass(frozen=True)
class Traffic:
    """One round of traffic through the buckets; rates per second, [G, D] unless said otherwise."""

    demand: np.ndarray
    usage: np.ndarray
    throttled_s: np.ndarray  # [G]: time within the round the group's producers spent throttled


@dataclass
class Inbox:
    """What became of the reports a broker received, counted by outcome."""

    accepted: int = 0
    rejected: int = 0  # failed to decode or validate, or from an incarnation the registry did not issue
    discarded: int = 0  # valid, but too old or new, from an old incarnation, a duplicate, a sequence jump, or own


class BrokerNode:
    """The state one broker keeps for the groups it may serve (`group_ids`, with `quota[G, D]`).

    A quota is a rate >= 0 or `np.inf` (unlimited, whose limit is then +inf too). `routes` says on which topics
    each group's entry is published (None: every group on topic 0). With per-broker keys
    (`settings.public_keys`), `signer` is this broker's own private key.
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
        self.signer = signer
        self.settings = settings
        self.incarnation = incarnation
        self.group_ids = np.asarray(group_ids, dtype=np.int64)
        n_groups = len(self.group_ids)
        self.quota = _checked_quota(quota, (n_groups, len(settings.dimensions)))
        self.known_brokers = set(known_brokers) if known_brokers is not None else None
        self.mechanisms = settings.policy.settings
        rules = CleanupRules(
            stale_after_s=settings.stale_after_s * self.mechanisms.stale_after_multiple,
            max_report_age_s=settings.max_report_age_s,
            max_clock_skew_s=settings.max_clock_skew_s,
            interval_s=settings.interval_s,
        )
        self.table = UsageTable(name, self.group_ids, len(settings.dimensions), rules)
        self._reports_demand = settings.report_demand or self.mechanisms.report_throttled_demand
        watched = len(settings.dimensions) * (2 if self.mechanisms.report_throttled_demand else 1)
        self.suppressor = ReportSuppressor(n_groups, watched, settings.threshold_pct, settings.force_every)
        self.loss_meter = LossMeter(name)
        self.limit = np.zeros((n_groups, len(settings.dimensions)))
        self.serving = np.zeros(n_groups, dtype=bool)
        self._buckets = [
            TokenBucketArray(np.full(n_groups, np.inf), capacity=np.full(n_groups, np.inf)) for _ in settings.dimensions
        ]
        self._last_admit_s: float | None = None  # the first round covers one interval
        self._round_s = settings.interval_s  # the time the last admitted traffic covered
        self._rounds_served = np.zeros(n_groups, dtype=np.int64)  # allocations since the group started being served
        self._newcomer_heard = np.zeros(n_groups, dtype=bool)  # a broker new to the view: answer it next round
        self._view_grew = np.zeros(n_groups, dtype=bool)  # this round brought a broker new to the view
        self._listened = np.zeros(n_groups, dtype=bool)  # the last allocation kept the start limit: still listening
        self.splits_by_pool_size = False  # set_pool_size was called: the policy's N comes from the consensus
        self.pool_size: int | None = None
        self._silent = np.zeros((n_groups, 0), dtype=bool)  # entries silent for force_every rounds, as of cleanup
        self._held = np.zeros(n_groups, dtype=bool)  # the last allocation held the limit below the fair share
        # [G, slots, D] consecutive allocations each entry's usage was in excess of its fair share
        self._rounds_in_excess = np.zeros((n_groups, 0, len(settings.dimensions)), dtype=np.int64)
        self.sender = ReportSender(
            name,
            self.group_ids,
            settings,
            routes=routes,
            group_names=group_names,
            signer=signer,
            reports_demand=self._reports_demand,
        )
        self.reader = ReportReader(settings, group_names=group_names, known_brokers=self.known_brokers)
        self._bytes_dimension = np.array([dim in BYTES_DIMENSIONS for dim in settings.dimensions])
        self.ramps = RampedPools(settings.ramps, self.group_ids)
        self.pool = self._capped_pools()  # [G, D] what the policy splits: the quota, or the ramp's pool where ramped
        self.fallback = Fallback(settings.fallback, n_groups, len(settings.dimensions))
        self._fallback_on = settings.fallback.mode != "none"
        self._heard = np.zeros(n_groups, dtype=bool)  # a report of another broker refreshed the group's view
        self._registry_reachable = True

    def __repr__(self) -> str:
        return (
            f"BrokerNode({self.name!r}, incarnation={self.incarnation}, serving={int(self.serving.sum())}/"
            f"{len(self.group_ids)} groups, seq={self.sender.seq})"
        )

    # -- phase 1: traffic and report -------------------------------------------------------------

    def admit(self, demand_msgs_per_s: np.ndarray, msg_bytes: np.ndarray, now_s: float) -> Traffic:
        """Let the round's offered load through the token buckets (a fluid model of PIP-322's limiter).

        Over the `dt` since the last call the producers offer `demand * dt` messages; a message needs
        tokens in every dimension's bucket (1 per message, or its size in bytes), so the most stringent
        dimension decides what is admitted. A group that starts being served begins at the policy's
        initial limit.
        """
        dt = self.settings.interval_s if self._last_admit_s is None else max(now_s - self._last_admit_s, 1e-9)
        self._last_admit_s, self._round_s = now_s, dt
        self._view_grew[:] = False
        demand_msgs_per_s = np.clip(np.asarray(demand_msgs_per_s, dtype=np.float64), 0.0, None)
        starting = (demand_msgs_per_s > 0) & ~self.serving
        self.serving = demand_msgs_per_s > 0
        if starting.any():
            self._start_serving(starting, now_s)
        cost = np.where(self._bytes_dimension[None, :], np.asarray(msg_bytes, dtype=np.float64)[:, None], 1.0)
        now_ns = int(now_s * 1e9)
        tokens = np.stack([bucket.available(now_ns) for bucket in self._buckets], axis=1)
        admitted_msgs = np.minimum(demand_msgs_per_s * dt, (tokens / cost).min(axis=1))
        for index, bucket in enumerate(self._buckets):
            bucket.consume(admitted_msgs * cost[:, index], now_ns)
        throttled_fraction = np.where(
            demand_msgs_per_s > 0, 1.0 - admitted_msgs / np.maximum(demand_msgs_per_s * dt, 1e-300), 0.0
        )
        traffic = Traffic(
            demand=demand_msgs_per_s[:, None] * cost,
            usage=admitted_msgs[:, None] * cost / dt,
            throttled_s=np.clip(throttled_fraction, 0.0, 1.0) * dt,
        )
        self.claim(traffic)
        return traffic

    def claim(self, traffic: Traffic) -> None:
        """This broker's own entry from `traffic` (`admit` claims what it admitted; a liar claims more): with the
        demand estimated from throttled time, its own entry holds what its peers hear."""
        own_demand = self.throttled_demand(traffic) if self.mechanisms.report_throttled_demand else traffic.demand
        self.table.set_own(traffic.usage, own_demand, self.serving)

    def build_reports(self, traffic: Traffic, now_s: float) -> Outbox:
        """Encode this round's reports (one per topic), leaving out what the threshold suppresses.

        With `report_throttled_demand` the demand reported is the one estimated from throttled time, and a
        group whose usage or demand moved past the threshold is reported."""
        demand = self.throttled_demand(traffic) if self.mechanisms.report_throttled_demand else traffic.demand
        watched = self._watched(traffic.usage, demand)
        self.suppressor.repeats = (
            copies_needed(self.loss_meter.loss, self.mechanisms.lost_change_odds, self.settings.force_every) - 1
        )
        selection = self.suppressor.select(watched, self.serving)
        if self.mechanisms.answer_newcomers:
            selection = self._answering(selection)
        if self.mechanisms.report_while_held:
            claim = self._held & ~selection.report
            selection = replace(
                selection, report=selection.report | claim, suppressed=selection.suppressed - int(claim.sum())
            )
        outbox = self.sender.encode(selection, traffic.usage, demand, self.incarnation, now_s)
        self.suppressor.commit(selection, watched)
        return outbox

    def throttled_demand(self, traffic: Traffic) -> np.ndarray:
        """[G, D] the demand a broker can tell from its own limiter: `usage / (1 - throttled_s / round)`, the
        usage of a round scaled up by the share of it its producers were not held (at most 1 /
        MIN_ADMITTED_FRACTION times the usage)."""
        admitted_fraction = 1.0 - traffic.throttled_s / self._round_s
        return traffic.usage / np.maximum(admitted_fraction, MIN_ADMITTED_FRACTION)[:, None]

    def leave(self, now_s: float) -> Outbox:
        """A clean leave: zeros for every group others hold an entry of, along the same routes."""
        selection = self.suppressor.leave()
        zeros = np.zeros_like(self.limit)
        outbox = self.sender.encode(selection, zeros, zeros, self.incarnation, now_s)
        self.suppressor.commit(selection, self._watched(zeros, zeros))
        return outbox

    # -- phase 2: receive, clean up, allocate ----------------------------------------------------

    def receive(self, payloads: Iterable[bytes], now_s: float, issued: Mapping[str, int] | None = None) -> Inbox:
        """Decode and merge reports, all at once; a bad one (or one in other dimensions) is counted and dropped,
        never raised. With `issued` (broker -> the highest incarnation the membership registry issued it), a
        report of a broker or an incarnation the registry did not issue is rejected too."""
        batch, rejected = self.reader.decode(payloads, now_s, issued)
        n_rejected = len(rejected)
        if issued is not None and len(batch):
            credible = np.array(
                [inc <= issued.get(b, -1) for b, inc in zip(batch.brokers, batch.incarnation, strict=True)], dtype=bool
            )
            if not credible.all():
                n_rejected += int((~credible).sum())
                batch = batch.select(credible)
        self.loss_meter.observe(batch.brokers, batch.incarnation, batch.seq)
        view_before = self.table.view_brokers()
        heard_before = self.table.last_heard_s() if self._fallback_on else None
        accepted = self.table.merge_many(batch, now_s).count(Merge.ACCEPTED)
        if heard_before is not None:
            self._heard |= self.table.last_heard_s() != heard_before
        grew = self.table.view_brokers() > view_before
        self._newcomer_heard |= grew
        self._view_grew |= grew
        return Inbox(accepted=accepted, rejected=n_rejected, discarded=len(batch) - accepted)

    def cleanup(self, now_s: float, dead: Iterable[tuple[str, int]] = ()) -> int:
        """Expire silent entries and drop brokers the membership registry declared dead."""
        removed = sum(self.table.remove_broker(broker, incarnation) for broker, incarnation in dead)
        if removed and self._fallback_on:
            self.fallback.forget(self._brokers_in_view())
        removed += self.table.expire(now_s)
        if self.mechanisms.silent_at_fair_share:
            self._silent = self.table.silent(now_s, self.settings.force_every * self.settings.interval_s)
        return removed

    def allocate(self) -> np.ndarray:
        """Compute this broker's new limits from its view and hand them to the buckets; returns [G, D]."""
        n_slots = self.table.n_slots
        present = self.table.present[:, :n_slots]
        with_demand = self._reports_demand and self.table.demand_known[:, :n_slots][present].all()
        held = np.zeros(len(self.group_ids), dtype=bool)
        self.pool = self._step_ramps()
        limit_before = self.limit.copy() if self._fallback_on else self.limit
        for index in range(len(self.settings.dimensions)):
            if self.splits_by_pool_size:
                new_limit = self._pool_limit(self.pool[:, index], self.limit[:, index])
                self.limit[:, index] = np.where(self.serving, self._floored(new_limit), self.limit[:, index])
                continue
            limit_view = np.zeros(present.shape)
            limit_view[:, OWN] = self.limit[:, index]
            usage = self.table.usage[:, :n_slots, index]
            demand = self.table.demand[:, :n_slots, index] if with_demand else None
            fair_share = self._fair_share(index, usage, demand, present)
            if fair_share is not None and self.mechanisms.silent_at_fair_share:
                usage = np.where(self._silent_slots(n_slots), np.minimum(usage, fair_share), usage)
            if fair_share is not None and self.mechanisms.excess_after_rounds:
                usage = self._lasting_excess_at_fair_share(index, usage, fair_share, present)
            new_limit = self.settings.policy(self.pool[:, index], usage, limit_view, demand, present)[:, OWN]
            listening = self._listened = self._listening()
            if listening.any():  # a newcomer keeps its start limit while it listens
                new_limit = np.where(listening, np.minimum(new_limit, self.limit[:, index]), new_limit)
            if fair_share is not None and self.mechanisms.report_while_held:
                held |= new_limit < (1.0 - HELD_TOLERANCE) * fair_share[:, OWN]
            self.limit[:, index] = np.where(self.serving, self._floored(new_limit), self.limit[:, index])
        self._held = held & self.serving
        if self._fallback_on:
            heard = self._heard & self._registry_reachable
            limit = self.fallback.step(heard, self._brokers_in_view(), limit_before, self.limit, self.pool, MIN_LIMIT)
            self.limit = np.where(self.serving[:, None], self._floored(limit), self.limit)
            self._heard[:] = False
        self._rounds_served = np.where(self.serving, self._rounds_served + 1, 0)
        self._apply_limits()
        return self.limit

    def set_registry_reachable(self, reachable: bool) -> None:
        """Whether the membership registry answers. While it does not, this broker counts as hearing no reports
        (its fallback applies after `fallback.after_rounds`); the round it answers again, reports count again."""
        self._registry_reachable = bool(reachable)

    def remove_broker(self, broker: str, incarnation: int | None = None) -> bool:
        return self.table.remove_broker(broker, incarnation)

    def set_quota(self, quota: np.ndarray) -> None:
        """A changed quota takes effect at the next allocation; with `rescale_on_quota_change` this broker's
        limits also scale by `new / old` at once (a limit under a quota that becomes limited starts at an
        equal share of the brokers in view), so after a cut the limits add up to at most the new quota."""
        new_quota = _checked_quota(quota, self.quota.shape)
        if self.mechanisms.rescale_on_quota_change:
            self.limit = np.where(self.serving[:, None], self._rescaled(self.quota, new_quota), self.limit)
            self._apply_limits()
        self.quota = new_quota
        self.pool = self._capped_pools()

    def view_brokers(self) -> np.ndarray:
        return self.table.view_brokers()

    def set_pool_size(self, pool_size: int | None) -> None:
        """The pool size this broker splits by, from the pool-size consensus (`allocator.node.consensus`), for a
        policy that splits by one (`numaflow-equal`); its host passes it before each allocation. The policy
        then runs on the agreed pool as its view: N present brokers, this one first. None: a newcomer waiting
        for the first agreement, which holds its floor. A node never given one runs its policy on its usage
        view (by the brokers in it)."""
        if not self.settings.policy.policy.agreed_pool_size:
            raise ValueError(f"policy {self.settings.policy.name} splits by no agreed pool size")
        self.splits_by_pool_size, self.pool_size = True, pool_size

    # -- internals -------------------------------------------------------------------------------

    def _start_serving(self, starting: np.ndarray, now_s: float) -> None:
        if self.splits_by_pool_size:  # the agreed pool's share, or the floor while waiting for agreement
            for index in range(len(self.settings.dimensions)):
                start = self._pool_limit(self.pool[starting, index], np.zeros(int(starting.sum())))
                self.limit[starting, index] = self._floored(start)
            self._apply_limits()
            return
        others = self.table.present[starting, 1:]
        view = others.sum(axis=1) + 1  # the others it knows, and itself
        for index in range(len(self.settings.dimensions)):
            others_usage = (self.table.usage[starting, 1:, index] * others).sum(axis=1)
            initial = self.settings.policy.initial_limit(self.pool[starting, index], view, others_usage)
            self.limit[starting, index] = self._floored(initial)
        self._apply_limits()

    def _pool_limit(self, quota: np.ndarray, own_limit: np.ndarray) -> np.ndarray:
        """[G] the policy's limits with the agreed pool as its view (N present brokers, this one first, the
        common knobs applied against `own_limit`); 0 while waiting for agreement (unlimited stays unlimited)."""
        if self.pool_size is None:
            return np.where(np.isinf(quota), np.inf, 0.0)
        pool = np.ones((len(quota), max(self.pool_size, 1)), dtype=bool)
        limit_view = np.zeros(pool.shape)
        limit_view[:, OWN] = own_limit
        return self.settings.policy(quota, np.zeros(pool.shape), limit_view, None, pool)[:, OWN]

    def _step_ramps(self) -> np.ndarray:
        """The pools after this round: each ramp steps on the usage of every broker in the view."""
        if len(self.ramps):
            rows, dims = self.ramps.rows, self.ramps.dimensions
            present = self.table.present[rows, : self.table.n_slots]
            usage = (self.table.usage[rows, : self.table.n_slots, dims] * present).sum(axis=1)
            self.ramps.step(self._last_admit_s or 0.0, self._round_s, usage, present.any(axis=1))
        return self._capped_pools()

    def _capped_pools(self) -> np.ndarray:
        """[G, D] the quota, with each ramped entry's pool where ramped; never above the quota (a quota event may
        cut it below the ramp). Without ramps, the quota itself (never written through `pool`)."""
        if not len(self.ramps):
            return self.quota
        pool = self.quota.copy()
        rows, dims = self.ramps.rows, self.ramps.dimensions
        pool[rows, dims] = np.minimum(self.ramps.pool, self.quota[rows, dims])
        return pool

    def _brokers_in_view(self) -> np.ndarray:
        """[G] the brokers in the view of each group, this one always counted."""
        return self.table.present[:, 1 : self.table.n_slots].sum(axis=1) + 1

    def _rescaled(self, old_quota: np.ndarray, new_quota: np.ndarray) -> np.ndarray:
        """[G, D] the limits scaled by `new / old` quota (kept where the old quota was 0; unlimited where the new
        one is; an equal share of the brokers in view where the old one was unlimited)."""
        scalable = np.isfinite(old_quota) & (old_quota > 0) & np.isfinite(new_quota)
        ratio = np.divide(new_quota, old_quota, out=np.ones_like(new_quota), where=scalable)
        equal_share = new_quota / np.maximum(self.view_brokers(), 1)[:, None]
        rescaled = np.where(np.isfinite(old_quota), self.limit * ratio, equal_share)
        return self._floored(np.where(np.isfinite(new_quota), rescaled, np.inf))

    def _listening(self) -> np.ndarray:
        """bool[G]: groups whose newcomer still listens: its first `listen_rounds` allocations and, with
        `listen_while_view_grows`, any later one of its first `force_every` in which a broker new to its view was
        heard (by `force_every` rounds every live peer has sent a forced report)."""
        listening = self._rounds_served < self.mechanisms.listen_rounds
        if self.mechanisms.listen_while_view_grows:
            listening |= self._view_grew & (self._rounds_served < self.settings.force_every)
        return listening

    def _answering(self, selection: Selection) -> Selection:
        """The selection with the served groups where a newcomer was heard added (it learns this broker at once),
        and the groups this broker still listens on (a peer that missed its first report hears it again)."""
        answer = (self._newcomer_heard | self._listened) & self.serving & ~selection.report
        self._newcomer_heard[:] = False
        return replace(selection, report=selection.report | answer, suppressed=selection.suppressed - int(answer.sum()))

    def _fair_share(
        self, index: int, usage: np.ndarray, demand: np.ndarray | None, present: np.ndarray
    ) -> np.ndarray | None:
        """[G, n_slots] the max-min fair split of the quota of dimension `index` over the view's wants (the
        demands, or the usages without them); None when no mechanism reads it."""
        if not (
            self.mechanisms.silent_at_fair_share
            or self.mechanisms.report_while_held
            or self.mechanisms.excess_after_rounds
        ):
            return None
        quota = np.where(np.isfinite(self.pool[:, index]), self.pool[:, index], -1.0)
        return max_min_fair(quota, usage if demand is None else demand, present)

    def _lasting_excess_at_fair_share(
        self, index: int, usage: np.ndarray, fair_share: np.ndarray, present: np.ndarray
    ) -> np.ndarray:
        """[G, n_slots] `usage` with each peer in excess of its fair share (more than `EXCESS_TOLERANCE` above it)
        for `excess_after_rounds` consecutive allocations, this one included, counted at its fair share.

        A liar stays in excess for good and is held to its max-min share of what it claims; an honest broker is in
        excess only until it hears what moved its share, and steps down. Counting it at its share at once would
        take room it still uses when views differ (loss in bursts), which is what the rounds of grace are for."""
        n_slots = usage.shape[1]
        if self._rounds_in_excess.shape[1] < n_slots:
            grown = np.zeros((len(self.group_ids), n_slots, len(self.settings.dimensions)), dtype=np.int64)
            grown[:, : self._rounds_in_excess.shape[1]] = self._rounds_in_excess
            self._rounds_in_excess = grown
        in_excess = present & (usage > (1.0 + EXCESS_TOLERANCE) * fair_share)
        in_excess[:, OWN] = False
        rounds = self._rounds_in_excess[:, :n_slots, index]
        rounds[...] = np.where(in_excess, rounds + 1, 0)  # a slot freed and taken again starts from 0
        lasting = rounds >= self.mechanisms.excess_after_rounds
        return np.where(lasting, np.minimum(usage, fair_share), usage)

    def _silent_slots(self, n_slots: int) -> np.ndarray:
        """bool[G, n_slots]: the entries silent for more than `force_every` rounds at the last cleanup."""
        silent = np.zeros((len(self.group_ids), n_slots), dtype=bool)
        width = min(n_slots, self._silent.shape[1])
        silent[:, :width] = self._silent[:, :width]
        return silent

    def _watched(self, usage: np.ndarray, demand: np.ndarray) -> np.ndarray:
        """What the suppressor compares with the last report: the usage, and the demand when it is estimated."""
        return np.hstack([usage, demand]) if self.mechanisms.report_throttled_demand else usage

    def _floored(self, limit: np.ndarray) -> np.ndarray:
        """The policies' unlimited marker (-1) becomes an infinite rate; anything else is at least MIN_LIMIT."""
        return np.where(limit < 0, np.inf, np.maximum(limit, MIN_LIMIT))

    def _apply_limits(self) -> None:
        """Buckets hold one interval of tokens: the fluid model admits a round's traffic at once."""
        now_ns = int((self._last_admit_s or 0.0) * 1e9)
        for index, bucket in enumerate(self._buckets):
            rate = np.where(self.serving, self.limit[:, index], np.inf)
            bucket.set_rate(rate, now_ns, capacity=rate * self.settings.interval_s)


def _checked_quota(quota: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """[G, D] quotas as float64: rates >= 0, or `np.inf` for unlimited (the one way to say it)."""
    quota = np.array(quota, dtype=np.float64).reshape(shape)
    if not (quota >= 0).all():  # NaN fails too
        raise ValueError("quota must be >= 0, or np.inf for unlimited")
    return quota
