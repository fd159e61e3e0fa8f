"""The chunked, broker-major policies and the sorting-network water-filling give what the plain formulations give.

The plain formulations are the group-major ones the policies used before: `np.sort` / `np.argsort` along brokers
over all groups at once. Random views: G from 0 (also non-multiples of the chunk size), B from 1 to 9 (the
sorting network up to 8, np.sort beyond), random present masks, unlimited quotas, ties.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose, assert_array_equal

from allocator.policies import POLICIES, step
from allocator.policies import view as view_module
from allocator.waterfill import max_min_fair, sorting_network

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def plain_max_min_fair(capacity: np.ndarray, wants: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Water-filling with np.sort over [G, B], the first saturated position found with argmax."""
    wants = np.where(present, np.clip(wants, 0.0, None), 0.0)
    n_groups, n_brokers = wants.shape
    ascending = np.sort(wants, axis=1)
    handed_below = np.zeros_like(ascending)  # the sum of the wants below, never taking a huge want back out
    handed_below[:, 1:] = np.cumsum(ascending, axis=1)[:, :-1]
    finite_capacity = np.where(capacity < 0, np.inf, capacity)
    with np.errstate(invalid="ignore"):
        candidate_level = (finite_capacity[:, None] - handed_below) / (n_brokers - np.arange(n_brokers))
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
    quota = draw(hnp.arrays(np.float64, n_groups, elements=st.one_of(st.floats(0.0, 1e6), st.just(-1.0))))
    usage = draw(hnp.arrays(np.float64, shape, elements=rate))
    limit = draw(hnp.arrays(np.float64, shape, elements=st.one_of(rate, st.just(-1.0))))
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
    original = view_module.CHUNK_ENTRIES
    view_module.CHUNK_ENTRIES = chunk_entries
    try:
        chunked = step(name, quota, usage, limit, demand, present)
    finally:
        view_module.CHUNK_ENTRIES = original
    assert_array_equal(chunked, whole)


@settings(max_examples=300, deadline=None)
@given(view=views())
def test_steal_pairs_like_a_stable_argsort(view) -> None:
    """pip82-steal with steal_fraction 1 and every broker throttled: a broker below its partner gets at least
    the partner's usage, which pins the partner the plain argsort pairing finds."""
    quota, usage, _, _, present = view
    quota = np.full(len(quota), 1e12)  # under quota: the proportional share and the steal, nobody yields
    new_limit = step("pip82-steal", quota, usage, usage, None, present, steal_fraction=1.0)
    partner = plain_partner_usage(usage, present)
    usage = np.where(present, usage, 0.0)
    total = usage.sum(axis=1, keepdims=True)
    proportional = usage / np.where(total > 0, total, 1.0) * quota[:, None]
    stealing = present & (partner > usage)
    expected = np.where(stealing, np.maximum(proportional, partner), new_limit)
    assert_allclose(new_limit, expected, rtol=1e-12)
