"""The PIP-82, Doorman and water-filling rules: one function each, `(view, settings) -> limit[G, B]`.

Every rule computes all brokers' columns at once from the same view; column b uses only the usages (and
demands) of all brokers and broker b's own limit. The shared clamps and knobs are applied afterwards.
"""

from __future__ import annotations

import numpy as np

from allocator.policies.settings import Settings
from allocator.policies.view import View, row_sum
from allocator.waterfill import max_min_fair


def pip82_equal(view: View, settings: Settings) -> np.ndarray:
    """PIP-82, first variant: under quota every broker may take the whole residual.

    "Fair" is equal access to what is left: each broker's limit is its usage plus the whole residual
    `quota - total usage` (10/50/30 under 100 -> 20/60/40; the group overshoots briefly and converges).
    Over quota every broker cuts in proportion, `usage * quota / total`.
    """
    under_quota = view.residual >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(under_quota, 1.0, view.quota / view.total_usage)
    return view.usage * scale[:, None] + np.where(under_quota, view.residual, 0.0)[:, None]


def pip82_proportional(view: View, settings: Settings) -> np.ndarray:
    """PIP-82, second variant: the residual is split in proportion to usage.

    "Fair" is proportional to current usage: `usage + residual * usage / total` (10/50/30 under 100 ->
    11.11/55.56/33.33), which is a proportional cut over quota too. Nobody using anything: the equal share.
    An idle broker gets 0 while others use the quota (`min_share` is the remedy).
    """
    used = view.total_usage > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(used, view.quota / view.total_usage, 0.0)  # usage + residual * usage / total
    return view.usage * scale[:, None] + np.where(used, 0.0, view.equal_share)[:, None]


def pip82_steal(view: View, settings: Settings) -> np.ndarray:
    """PIP-82 proportional split, plus stealing from the paired dominant broker.

    "Fair" is proportional, corrected towards equal where a broker is held back by its own limit.
    The present brokers of a group are ranked by usage and the k-th lowest is paired with the k-th highest
    (the median of an odd count, and brokers tied with their partner, are unpaired).

    - A throttled broker (`usage >= limit * (1 - throttle_tolerance)`) whose partner uses more raises its
      limit `steal_fraction` of the way to the partner's usage (if that beats its proportional share).
    - A dominant broker (its partner uses less) yields to `quota - sum(others' usage)` (if that is below its
      proportional share). A broker cannot see its partner's limit, so it cannot tell whether the partner is
      throttled: it yields whenever its partner uses less. Under quota this never binds (the proportional
      share is already below it); over quota the dominant brokers absorb the overshoot first, which is the
      room their partners' steals need. Several dominant brokers over-correct together (conservative); the
      proportional rise of the next round under quota gives it back.

    PIP-82's example: quota 100, usages and limits 80/20: broker-2 is throttled and goes to
    20 + (80 - 20) / 2 = 50, broker-1 keeps 100 - 20 = 80; when broker-2 then uses 30 broker-1 yields to 70.
    The group overshoots by at most the steals of one round, and the overshoot halves (with the default
    `steal_fraction`) round after round as the dominant brokers yield, so the usage sum converges to the quota.
    """
    share = pip82_proportional(view, settings)
    partner_usage = _partner_usage(view)
    throttled = view.throttled(settings.throttle_tolerance)
    steal = view.usage + settings.steal_fraction * (partner_usage - view.usage)
    share = np.where(throttled & (partner_usage > view.usage), np.maximum(share, steal), share)
    left_by_others = view.quota[:, None] - (view.total_usage[:, None] - view.usage)
    dominant = view.present & (partner_usage < view.usage)
    return np.where(dominant, np.minimum(share, left_by_others), share)


def doorman_proportional(view: View, settings: Settings) -> np.ndarray:
    """Doorman's ProportionalShare (algorithm.go), computed by every broker from the shared view.

    "Fair" is: everyone gets what it wants while the wants fit in the quota; in overload everyone still gets
    what it wants up to its equal share `quota / n_present`, and the brokers wanting more get the equal share
    plus a top-up of the capacity the others leave unclaimed (`extra_capacity`) in proportion to how much
    they want beyond the equal share (`extra_need`). Wants are as in `wants`. Doorman also clamps a grant to
    the capacity not leased to others; the brokers here compute everyone's share at once from one snapshot,
    and the shares add up to at most the quota, so that clamp has nothing left to do.
    """
    wants = _wants(view, settings)
    equal_share = view.equal_share[:, None]
    beyond = wants - equal_share  # absent brokers want 0: below the equal share, and ignored
    extra_capacity = row_sum(np.where(view.present & (beyond < 0), -beyond, 0.0))
    extra_need = row_sum(np.maximum(beyond, 0.0))
    overloaded = row_sum(wants) > view.quota
    with np.errstate(divide="ignore", invalid="ignore"):
        top_up_ratio = np.where(overloaded, extra_capacity / extra_need, 1.0)[:, None]
    return np.minimum(wants, equal_share + np.maximum(beyond, 0.0) * top_up_ratio)


def max_min_fair_share(view: View, settings: Settings) -> np.ndarray:
    """Max-min fair water-filling of the quota over the wants (Doorman's FairShare, this project's fair-share).

    "Fair" is max-min: a broker wanting less than the water level gets all it wants, everyone else gets the
    level, and the level is as high as the quota allows (quota 120, wants 1000/50/10 -> 60/50/10).
    Wants are as in `wants`. Doorman's FairShare and the project's `fair-share` are this same computation;
    Doorman's server approximates the level with two redistribution rounds, we compute it exactly.
    """
    return max_min_fair(view.quota, _wants(view, settings), view.present)


def _wants(view: View, settings: Settings) -> np.ndarray:
    """[G, B] what each broker wants: its reported demand; without demand, its usage, except that a broker
    held at its own limit (throttled per `throttle_tolerance`) wants `limit * (1 + headroom)`, so it can
    grow while its true demand is hidden behind the limit."""
    if view.demand is not None:
        return view.demand
    throttled = view.throttled(settings.throttle_tolerance)
    return np.where(throttled, np.maximum(view.usage, view.limit * (1.0 + settings.headroom)), view.usage)


def _partner_usage(view: View) -> np.ndarray:
    """[G, B] the usage of each present broker's partner: the k-th lowest is paired with the k-th highest.

    Brokers are ranked by usage (ties by column) with the absent ones last; the partner values are the usages
    in descending order, where the absent brokers' zeros sort after every present usage.
    """
    ascending = np.argsort(np.where(view.present, view.usage, np.inf), axis=1, kind="stable")
    descending_usage = np.sort(view.usage, axis=1)[:, ::-1]
    n_groups, n_brokers = ascending.shape
    partner_usage = np.empty(ascending.shape)
    partner_usage.ravel()[ascending + (np.arange(n_groups) * n_brokers)[:, None]] = descending_usage
    return partner_usage
