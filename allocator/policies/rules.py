"""The PIP-82, Doorman and water-filling rules: one function each, `(view, settings) -> limit[B, g]`.

Every rule computes all brokers' rows of a chunk at once from the same view (broker-major, `[B, g]`); row b
uses only the usages (and demands) of all brokers and broker b's own limit. A rule returns a finite array,
which `finish` then clamps: for `pip82_proportional`, `pip82_steal` and `max_min_fair_share` an
`allocator.policies.scratch` array (named after the rule), valid until that rule runs again in the thread. The time goes
to numpy calls and temporaries, so the arithmetic works in place, in scratch arrays, and selects by multiplying
with masks rather than branching on them.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from allocator.policies.chunks import RuleChunk, broker_sum
from allocator.policies.scratch import scratch
from allocator.policies.settings import StealSettings, WantsSettings
from allocator.policies.waterfill import water_level

# up to here, with everyone present, a group's order is looked up in a table of 2^(B(B - 1)/2) codes (1,024 at 5
# brokers, 32,768 at 6: a table per shape of B such rows of int64); beyond, brokers are ranked and scattered
ORDER_TABLE_MAX_BROKERS = 5


def pip82_equal(chunk: RuleChunk, settings: object) -> np.ndarray:
    """PIP-82, first variant: under quota every broker may take the whole residual.

    "Fair" is equal access to what is left: each broker's limit is its usage plus the whole residual
    `quota - total usage` (10/50/30 under 100 -> 20/60/40; the group overshoots briefly and converges).
    Over quota every broker cuts in proportion, `usage * quota / total`. Margin: the limits add up to at most
    `quota + (n - 1) * residual` (n brokers present), whatever one of them reports.
    """
    under_quota = chunk.residual >= 0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # only used over quota: total > quota
        cut = np.where(under_quota, 1.0, chunk.quota / chunk.total_usage)
    share = chunk.usage * cut
    share += np.where(under_quota, chunk.residual, 0.0)
    return share


def pip82_proportional(chunk: RuleChunk, settings: object) -> np.ndarray:
    """PIP-82, second variant: the residual is split in proportion to usage.

    "Fair" is proportional to current usage: `usage + residual * usage / total` (10/50/30 under 100 ->
    11.11/55.56/33.33), which is a proportional cut over quota too; computed as `usage / total * quota`.
    Nobody using anything: the equal share. An idle broker gets 0 while others use the quota (`min_share`
    is the remedy).
    """
    used = chunk.total_usage > 0
    share = np.divide(
        chunk.usage, np.where(used, chunk.total_usage, 1.0), out=scratch("pip82_proportional", chunk.shape)
    )
    share *= chunk.quota
    if not used.all():
        share += np.where(used, 0.0, chunk.equal_share)
    return share


def pip82_steal(chunk: RuleChunk, settings: StealSettings) -> np.ndarray:
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
    Pairing by rank is PIP-82's heuristic: idle brokers take partner slots, and a throttled median is never
    helped, so with three or more brokers the split can stay short of max-min fair. Margin: computed from one
    chunk, the limits add up to at most the quota plus one steal per pair, each at most the quota (`finish` caps
    every limit there): `quota * (1 + n // 2)`, whatever one broker reports (a liar's usage is what its partner
    steals towards). Across a cluster each broker ranks itself first among equal usages, so every broker tied
    below a dominant one pairs itself with it: up to `n` quotas (adversaries scenario: 323 on a quota of 100).
    """
    share = pip82_proportional(chunk, settings)
    shape = chunk.shape
    gap = _partner_usage(chunk)
    gap -= chunk.usage  # > 0: the partner uses more; < 0: this broker dominates
    dominant = np.less(gap, 0.0, out=scratch("steal.dominant", shape, bool))
    stealing = chunk.throttled(settings.throttle_tolerance)
    stealing &= np.greater(gap, 0.0, out=scratch("steal.gap_above", shape, bool))
    # the gap's array holds the steal, then the excess: one array less to keep in cache
    steal = np.multiply(gap, settings.steal_fraction, out=gap)
    steal += chunk.usage  # steal_fraction of the way to the partner's usage
    steal *= stealing
    np.maximum(share, steal, out=share)  # where not stealing, steal is 0 and the share (>= 0) stays
    excess = np.subtract(share, chunk.usage, out=steal)
    excess -= chunk.residual  # share - (quota - sum(others' usage))
    np.maximum(excess, 0.0, out=excess)
    excess *= dominant  # only a dominant broker yields
    share -= excess
    return share


def doorman_proportional(chunk: RuleChunk, settings: WantsSettings) -> np.ndarray:
    """Doorman's ProportionalShare (algorithm.go), computed by every broker from the shared chunk.

    "Fair" is: everyone gets what it wants while the wants fit in the quota; in overload everyone still gets
    what it wants up to its equal share `quota / n_present`, and the brokers wanting more get the equal share
    plus a top-up of the capacity the others leave unclaimed (`extra_capacity`) in proportion to how much
    they want beyond the equal share (`extra_need`). Wants are as in `_wants`. Doorman also clamps a grant
    to the capacity not leased to others; the brokers here compute everyone's share at once from one
    snapshot, and the shares add up to at most the quota, so that clamp has nothing left to do.
    """
    wants = _wants(chunk, settings)
    equal_share = chunk.equal_share
    beyond = wants - equal_share
    unclaimed = np.minimum(beyond, 0.0)
    unclaimed *= chunk.present
    extra_capacity = -broker_sum(unclaimed)
    need = np.maximum(beyond, 0.0, out=beyond)
    extra_need = broker_sum(need)
    overloaded = extra_need > extra_capacity  # the wants add up to more than the quota
    with np.errstate(divide="ignore", invalid="ignore"):
        top_up_ratio = np.where(overloaded, extra_capacity / extra_need, 1.0)
    gets = np.multiply(need, top_up_ratio, out=need)
    gets += equal_share
    return np.minimum(gets, wants, out=gets)


def max_min_fair_share(chunk: RuleChunk, settings: WantsSettings) -> np.ndarray:
    """Max-min fair water-filling of the quota over the wants (Doorman's FairShare, this project's fair-share).

    "Fair" is max-min: a broker wanting less than the water level gets all it wants, everyone else gets the
    level, and the level is as high as the quota allows (quota 120, wants 1000/50/10 -> 60/50/10).
    Wants are as in `_wants`. Doorman's FairShare and the project's `fair-share` are this same computation;
    Doorman's server approximates the level with two redistribution rounds, we compute it exactly.
    """
    wants = _wants(chunk, settings)
    return np.minimum(wants, water_level(chunk.quota, wants), out=scratch("max_min_fair_share", chunk.shape))


def _wants(chunk: RuleChunk, settings: WantsSettings) -> np.ndarray:
    """[B, g] what each broker wants: its reported demand; without demand, its usage, except that a broker
    held at its own limit (throttled per `throttle_tolerance`) wants `limit * (1 + headroom)`, so it can
    grow while its true demand is hidden behind the limit."""
    if chunk.demand is not None:
        return chunk.demand
    beyond_usage = np.multiply(chunk.limit, 1.0 + settings.headroom, out=scratch("wants", chunk.shape))
    beyond_usage -= chunk.usage
    np.maximum(beyond_usage, 0.0, out=beyond_usage)
    beyond_usage *= chunk.throttled(settings.throttle_tolerance)
    return np.add(chunk.usage, beyond_usage, out=beyond_usage)  # max(usage, limit * (1 + headroom)) if held


def _partner_usage(chunk: RuleChunk) -> np.ndarray:
    """[B, g] the usage of each present broker's partner: the k-th lowest is paired with the k-th highest.

    Brokers are ranked by usage (ties by row) with the absent ones last. An absent broker's partner
    is the lowest present usage; it plays no part (it is never throttled, and its usage 0 is not above it).
    With everyone present and at most `ORDER_TABLE_MAX_BROKERS` brokers, each group's order is looked up
    (`_partner_by_order`). Otherwise the ranks come from comparing every pair of rows at once (a sort runs per
    group, ~8 times slower here); the usages are then scattered group-major, `by_rank [g, B]` (group j's entries
    next to each other, and its flat index `j * B + rank` one addition away from the rank), and each broker's
    partner gathered from it.
    """
    shape = chunk.shape
    if chunk.everyone_present and shape[0] <= ORDER_TABLE_MAX_BROKERS:
        return _partner_by_order(chunk.usage)
    rank = _stable_rank(chunk.usage if chunk.everyone_present else np.where(chunk.present, chunk.usage, np.inf))
    group_start, mirrored = _group_major_starts(*shape)
    at_rank = scratch("partner.at_rank", shape, np.intp)
    np.copyto(at_rank, rank)  # widened first: an addition that casts as it goes costs more
    at_rank += group_start  # flat index of the place of rank r in group j: j * B + r
    by_rank = scratch("partner.by_rank", shape[::-1])
    by_rank.ravel()[at_rank] = chunk.usage  # by_rank[j, k]: the usage of rank k in group j
    if chunk.everyone_present:  # rank B - 1 - r in group j: 2 * j * B + B - 1 - (j * B + r)
        at_partner = np.subtract(mirrored, at_rank, out=at_rank)
    else:
        at_partner = np.subtract(chunk.n_present.astype(np.intp) - 1, rank, out=at_rank, dtype=np.intp)
        np.maximum(at_partner, 0, out=at_partner)  # an absent broker's partner: the lowest present usage
        at_partner += group_start
    # the indices are in range: mode="clip" skips the bounds check that makes np.take buffer its output
    return by_rank.take(at_partner, out=scratch("partner.usage", shape), mode="clip")


@lru_cache(maxsize=8)
def _group_major_starts(n_brokers: int, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """[g] the flat index `j * B` where group j starts in a group-major [g, B] array, and `2 * j * B + B - 1`
    (read-only, made once per shape)."""
    group_start = np.arange(n_groups) * n_brokers
    mirrored = 2 * group_start + (n_brokers - 1)
    group_start.flags.writeable = mirrored.flags.writeable = False
    return group_start, mirrored


def _stable_rank(key: np.ndarray) -> np.ndarray:
    """[B, g] the rank (uint8 up to 255 rows, else intp; `scratch`) of each row's key within its column, ties by
    row: the number of rows before it in (key, row) order, `#{c < b: key_c <= key_b} + #{c > b: key_c < key_b}`.

    Every pair of rows is compared once; each row starts at the count of the pairs it is the lower row of, and
    a comparison `key_c <= key_b` moves one from row c to row b. The pairs `offset` rows apart are compared in
    one call. Counted in bytes while they fit (a bool adds to a uint8 without a conversion).
    """
    n_rows = len(key)
    count_dtype = np.uint8 if n_rows <= 255 else np.intp
    rank = scratch("rank", key.shape, count_dtype)
    rank[...] = np.arange(n_rows - 1, -1, -1, dtype=count_dtype)[:, None]  # every pair counts for its lower row
    lower_first = scratch("rank.lower_first", key.shape, bool)
    for offset in range(1, n_rows):
        first = _lower_first(key, offset, out=lower_first[:-offset])
        moved = first.view(np.uint8) if count_dtype == np.uint8 else first
        rank[offset:] += moved
        rank[:-offset] -= moved
    return rank


def _lower_first(key: np.ndarray, offset: int, out: np.ndarray) -> np.ndarray:
    """[B - offset, g] whether row c comes before row c + offset in (key, row) order: `key_c <= key_(c + offset)`."""
    return np.less_equal(key[:-offset], key[offset:], out=out)


def _partner_by_order(usage: np.ndarray) -> np.ndarray:
    """[B, g] (`scratch`) the partner's usage by rank, as `_partner_usage`, for a few brokers all present.

    The B(B - 1)/2 comparisons of every pair of rows (`_lower_first`) fix a group's order; as the bits of a
    number they name it (`_order_code`), and a table made once per shape (`_partner_rows`) gives, for each code
    and broker, the flat index of the partner's row in `usage`. Next to ranking and scattering (`_stable_rank`
    and `by_rank`), that is a few calls instead of ~40 and no scatter: ~30 us less at 5,000 groups x 5 brokers.
    Numbers compared with `<=` always make an order (no NaN reaches here), so no code without one comes up.
    """
    n_brokers, n_groups = usage.shape
    partner_rows = _partner_rows(n_brokers, n_groups)  # first: made with `_order_code`, whose scratch it shares
    code = _order_code(usage)
    # the codes are in range: mode="clip" only skips the bounds check
    at_partner = partner_rows.take(code, axis=1, out=scratch("partner.at_order", usage.shape, np.intp), mode="clip")
    at_partner += _group_offsets(n_groups)  # the partner's row start plus the group's column
    return usage.take(at_partner, out=scratch("partner.usage", usage.shape), mode="clip")


def _order_code(key: np.ndarray) -> np.ndarray:
    """[g] (`scratch`) a number naming each column's order of rows: comparison k of `_lower_first` (the pairs
    one row apart first) is bit k."""
    n_rows, n_columns = key.shape
    n_pairs = n_rows * (n_rows - 1) // 2
    lower_first = scratch("order.lower_first", (n_pairs, n_columns), bool)
    start = 0
    for offset in range(1, n_rows):
        _lower_first(key, offset, out=lower_first[start : start + n_rows - offset])
        start += n_rows - offset
    bits = np.multiply(lower_first, _bit_values(n_pairs), out=scratch("order.bits", lower_first.shape, np.uint16))
    code = scratch("order.code", (n_columns,), np.intp)
    np.copyto(code, np.bitwise_or.reduce(bits, axis=0, out=scratch("order.code16", (n_columns,), np.uint16)))
    return code


@lru_cache(maxsize=8)
def _bit_values(n_bits: int) -> np.ndarray:
    """[n_bits, 1] the values 2^k of the bits, a column (read-only)."""
    values = (1 << np.arange(n_bits, dtype=np.uint16))[:, None]
    values.flags.writeable = False
    return values


@lru_cache(maxsize=8)
def _partner_rows(n_brokers: int, n_groups: int) -> np.ndarray:
    """[B, 2^(B(B - 1)/2)] for each order code (`_order_code`) and broker b, `c * g`: the start of the row of b's
    partner c in a [B, g] array (read-only, made once per shape from `_partner_brokers`)."""
    rows = _partner_brokers(n_brokers) * n_groups
    rows.flags.writeable = False
    return rows


@lru_cache(maxsize=ORDER_TABLE_MAX_BROKERS + 1)
def _partner_brokers(n_brokers: int) -> np.ndarray:
    """[B, 2^(B(B - 1)/2)] for each order code (`_order_code`) and broker b, its partner c (read-only, made once per
    number of brokers from the B! orders, ~1 ms at 5; codes of no order stay 0)."""
    orders = np.array(list(itertools.permutations(range(n_brokers))), dtype=np.float64).T  # [B, B!]: the ranks
    partners = np.zeros((n_brokers, 1 << (n_brokers * (n_brokers - 1) // 2)), dtype=np.intp)
    for order, code in enumerate(_order_code(orders)):
        rank = orders[:, order].astype(np.intp)
        broker_at_rank = np.argsort(rank)
        partners[:, code] = broker_at_rank[n_brokers - 1 - rank]  # rank r's partner: rank B - 1 - r
    partners.flags.writeable = False
    return partners


@lru_cache(maxsize=8)
def _group_offsets(n_groups: int) -> np.ndarray:
    """[g] 0, 1, ..., g - 1 (read-only, made once per size)."""
    offsets = np.arange(n_groups)
    offsets.flags.writeable = False
    return offsets
