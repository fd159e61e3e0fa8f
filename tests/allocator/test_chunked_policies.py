"""The chunked, broker-major policies and the sorting-network water-filling give what the plain formulations give,
bit for bit.

The plain formulations are the group-major ones the policies used before: `np.sort` / `np.argsort` along brokers
over all groups at once. Random views: G from 0 (also non-multiples of the chunk size), B from 1 to 9 (the
sorting network up to 8, np.sort beyond), random present masks, unlimited (infinite) quotas, ties.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose, assert_array_equal

from allocator.policies import POLICIES, chunks, step
from allocator.policies.waterfill import max_min_fair, sorting_network

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def plain_max_min_fair(capacity: np.ndarray, wants: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Water-filling with np.sort over [G, B], the first saturated position found with argmax."""
    wants = np.where(present, np.clip(wants, 0.0, None), 0.0)
    n_groups, n_brokers = wants.shape
    ascending = np.sort(wants, axis=1)
    handed_below = np.zeros_like(ascending)  # the sum of the wants below, never taking a huge want back out
    handed_below[:, 1:] = np.cumsum(ascending, axis=1)[:, :-1]
    with np.errstate(invalid="ignore"):
        candidate_level = (capacity[:, None] - handed_below) / (n_brokers - np.arange(n_brokers))
    saturated = ascending >= candidate_level
    level = np.where(saturated.any(axis=1), candidate_level[np.arange(n_groups), np.argmax(saturated, axis=1)], np.inf)
    return np.minimum(wants, np.clip(level, 0.0, None)[:, None])


def plain_partner_usage(usage: np.ndarray, present: np.ndarray) -> np.ndarray:
    """[G, B] the partner's usage by a stable argsort per group: the k-th lowest with the k-th highest."""
    n_groups, n_brokers = usage.shape
    ascending = np.argsort(np.where(present, usage, np.inf), axis=1, kind="stable")
    partner = np.zeros_like(usage)
    for group, order in enumerate(ascending):
        n_present = int(present[group].sum())
        for rank, broker in enumerate(order[:n_present]):
            partner[group, broker] = usage[group, order[n_present - 1 - rank]]
    return partner


rate = st.one_of(st.sampled_from([0.0, 1.0, 10.0]), st.floats(0.0, 1e6))  # ties are common


@st.composite
def views(draw):
    n_groups, n_brokers = draw(st.integers(0, 23)), draw(st.integers(1, 9))
    shape = (n_groups, n_brokers)
    quota = draw(hnp.arrays(np.float64, n_groups, elements=st.one_of(st.floats(0.0, 1e6), st.just(np.inf))))
    usage = draw(hnp.arrays(np.float64, shape, elements=rate))
    limit = draw(hnp.arrays(np.float64, shape, elements=st.one_of(rate, st.just(np.inf))))
    demand = draw(st.one_of(st.none(), hnp.arrays(np.float64, shape, elements=rate)))
    return quota, usage, limit, demand, draw(hnp.arrays(np.bool_, shape))


@pytest.mark.parametrize("n", range(1, 10))
def test_sorting_network_sorts_every_zero_one_input(n: int) -> None:
    """The 0-1 principle: a comparator network that sorts every 0/1 sequence sorts everything."""
    for bits in itertools.product((0, 1), repeat=n):
        values = list(bits)
        for i, j in sorting_network(n):
            values[i], values[j] = min(values[i], values[j]), max(values[i], values[j])
        assert values == sorted(bits)


@settings(max_examples=300, deadline=None)
@given(view=views())
def test_water_filling_is_the_plain_one(view) -> None:
    quota, usage, _, demand, present = view
    wants = usage if demand is None else demand
    assert_array_equal(max_min_fair(quota, wants, present), plain_max_min_fair(quota, wants, present))


@settings(max_examples=300, deadline=None)
@given(view=views(), name=st.sampled_from(sorted(POLICIES)), chunk_entries=st.integers(1, 40))
def test_chunks_give_the_result_of_one_chunk(view, name: str, chunk_entries: int) -> None:
    quota, usage, limit, demand, present = view
    whole = step(name, quota, usage, limit, demand, present)
    original = chunks.CHUNK_ENTRIES
    chunks.CHUNK_ENTRIES = chunk_entries
    try:
        chunked = step(name, quota, usage, limit, demand, present)
    finally:
        chunks.CHUNK_ENTRIES = original
    assert_array_equal(chunked, whole)


@settings(max_examples=300, deadline=None)
@given(view=views(), everyone_present=st.booleans())
def test_steal_pairs_like_a_stable_argsort(view, everyone_present: bool) -> None:
    """pip82-steal with steal_fraction 1 and every broker throttled: a broker below its partner gets at least
    the partner's usage, which pins the partner the plain argsort pairing finds. With everyone present, up to 5
    brokers look their order up in a table, more rank and scatter."""
    quota, usage, _, _, present = view
    if everyone_present:
        present = np.ones_like(present)
    quota = np.full(len(quota), 1e12)  # under quota: the proportional share and the steal, nobody yields
    new_limit = step("pip82-steal", quota, usage, usage, None, present, steal_fraction=1.0)
    partner = plain_partner_usage(usage, present)
    usage = np.where(present, usage, 0.0)
    total = usage.sum(axis=1, keepdims=True)
    proportional = usage / np.where(total > 0, total, 1.0) * quota[:, None]
    stealing = present & (partner > usage)
    expected = np.where(stealing, np.maximum(proportional, partner), new_limit)
    assert_allclose(new_limit, expected, rtol=1e-12)


def plain_step(name: str, quota, usage, limit, demand, present, params: dict) -> np.ndarray:
    """`pip82-proportional`, `pip82-steal`, `fair-share` and `doorman-fair` written out group-major, one formula
    per line in the order of the documented arithmetic (and `finish` after them): what the scratch-array,
    broker-major, chunked code must give bit for bit."""
    knobs = POLICIES[name].bind(params).settings
    n_brokers = usage.shape[1]
    unlimited = quota == np.inf
    quota = np.where(unlimited, 0.0, quota)
    usage = np.where(present, usage, 0.0)
    limited = present & (limit >= 0) & (limit < np.inf)
    own = np.where(limited, limit, 0.0)
    total = np.zeros(len(quota))
    for b in range(n_brokers):
        total += usage[:, b]
    n_present = present.sum(axis=1).astype(np.float64)
    equal_share = quota / np.maximum(n_present, 1.0)
    throttled = limited & (usage >= own * (1.0 - getattr(knobs, "throttle_tolerance", 0.05)))
    if name.startswith("pip82"):
        used = total > 0
        share = usage / np.where(used, total, 1.0)[:, None] * quota[:, None] + np.where(used, 0.0, equal_share)[:, None]
        if name == "pip82-steal":
            gap = plain_partner_usage(usage, present) - usage
            steal = np.where(throttled & (gap > 0), gap * knobs.steal_fraction + usage, 0.0)
            share = np.maximum(share, steal)
            excess = np.maximum(share - usage - (quota - total)[:, None], 0.0)
            share = share - np.where(gap < 0, excess, 0.0)
    else:
        wants = (
            np.where(present, demand, 0.0)
            if demand is not None
            else usage + np.where(throttled, np.maximum(own * (1.0 + knobs.headroom) - usage, 0.0), 0.0)
        )
        share = plain_max_min_fair(quota, wants, present)
    if knobs.smoothing:
        share = np.where(limited, share * (1.0 - knobs.smoothing) + knobs.smoothing * own, share)
    if knobs.max_step is not None:
        largest_change = (knobs.max_step * quota)[:, None]
        share = np.where(limited, np.minimum(share, own + largest_change), share)
        share = np.where(limited, np.maximum(share, own - largest_change), share)
    share = np.maximum(share, knobs.min_share * equal_share[:, None])
    share = np.minimum(np.maximum(share, 0.0), quota[:, None])
    return np.where(present, np.where(unlimited[:, None], np.inf, share), 0.0)


KNOBS = st.sampled_from(
    [{}, {"smoothing": 0.3, "max_step": 0.2, "min_share": 0.1}, {"throttle_tolerance": 0.5, "headroom": 2.0}]
)


@settings(max_examples=200, deadline=None)
@given(
    view=views(),
    name=st.sampled_from(["pip82-proportional", "pip82-steal", "fair-share", "doorman-fair"]),
    params=KNOBS,
    steal_fraction=st.sampled_from([0.5, 1.0, 0.0, 0.3]),
)
def test_the_optimised_policies_are_their_plain_formulation(view, name: str, params: dict, steal_fraction) -> None:
    quota, usage, limit, demand, present = view
    if name == "pip82-steal":
        params = {key: value for key, value in params.items() if key != "headroom"} | {"steal_fraction": steal_fraction}
    elif name == "pip82-proportional":
        params = {key: value for key, value in params.items() if key in ("smoothing", "max_step", "min_share")}
    usage = np.where(present, usage, np.nan)  # absent entries may hold anything
    expected = plain_step(name, quota, usage, limit, demand, present, params)
    assert_array_equal(step(name, quota, usage, limit, demand, present, **params), expected)


@pytest.mark.parametrize("name", ["pip82-steal", "fair-share"])
def test_the_benchmarks_size_gives_the_plain_formulation(name: str) -> None:
    """5,000 groups x 5 brokers, everyone present (the fast paths), usages tied in a third of the groups."""
    rng = np.random.default_rng(5)
    usage = rng.uniform(50.0, 400.0, (5000, 5))
    usage[::3, 1:3] = usage[::3, :1]
    limit = usage * rng.uniform(0.97, 1.3, usage.shape)
    quota = np.full(5000, 1000.0)
    present = np.ones(usage.shape, dtype=bool)
    expected = plain_step(name, quota, usage, limit, None, present, {})
    assert_array_equal(step(name, quota, usage, limit, None, present), expected)
