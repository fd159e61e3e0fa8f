"""The PIP-82, Doorman and water-filling rules: one function each, `(view, settings) -> limit[G, B]`.

Every rule computes all brokers' columns at once from the same view; column b uses only the usages (and
demands) of all brokers and broker b's own limit. The shared clamps and knobs are applied afterwards.
"""

from __future__ import annotations

import numpy as np

from allocator.policies.settings import Settings
from allocator.policies.view import View
from allocator.waterfill import max_min_fair


def pip82_equal(view: View, settings: Settings) -> np.ndarray:
    """PIP-82, first variant: under quota every broker may take the whole residual.

    "Fair" is equal access to what is left: each broker's limit is its usage plus the whole residual
    `quota - total usage` (10/50/30 under 100 -> 20/60/40; the group overshoots briefly and converges).
    Over quota every broker cuts in proportion, `usage * quota / total`.
    """
    residual = view.residual[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        cut = view.usage * (view.quota / view.total_usage)[:, None]
    return np.where(residual >= 0, view.usage + residual, cut)


def pip82_proportional(view: View, settings: Settings) -> np.ndarray:
    """PIP-82, second variant: the residual is split in proportion to usage.

    "Fair" is proportional to current usage: `usage + residual * usage / total` (10/50/30 under 100 ->
    11.11/55.56/33.33), which is a proportional cut over quota too. Nobody using anything: the equal share.
    An idle broker gets 0 while others use the quota (`min_share` is the remedy).
    """
    total = view.total_usage[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = view.usage + view.residual[:, None] * (view.usage / total)
    return np.where(total > 0, share, view.equal_share[:, None])


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
    below = view.present & (wants < equal_share)
    extra_capacity = np.where(below, equal_share - wants, 0.0).sum(axis=1, keepdims=True)
    extra_need = np.where(view.present & ~below, wants - equal_share, 0.0).sum(axis=1, keepdims=True)
    overloaded = wants.sum(axis=1, keepdims=True) > view.quota[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        top_up = equal_share + (wants - equal_share) * (extra_capacity / extra_need)
    return np.where(overloaded & (wants > equal_share), top_up, wants)


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
    """[G, B] the usage of each present broker's partner: k-th lowest usage paired with k-th highest."""
    order = np.argsort(np.where(view.present, view.usage, np.inf), axis=1, kind="stable")
    n_brokers = order.shape[1]
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(n_brokers), order.shape), axis=1)
    partner_rank = np.clip(view.n_present[:, None] - 1 - rank, 0, n_brokers - 1)
    partner = np.take_along_axis(order, partner_rank, axis=1)
    return np.take_along_axis(view.usage, partner, axis=1)
