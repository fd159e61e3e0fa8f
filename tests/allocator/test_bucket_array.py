"""TokenBucketArray: the same numbers as TokenBucket, per group, with time passed in."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.limiter.bucket_array import TokenBucketArray
from allocator.limiter.token_bucket import TokenBucket

MS = 1_000_000
T0 = 10**12


def test_refill_cap_and_debt_per_group():
    arr = TokenBucketArray(np.array([100.0, 1000.0, 10.0]), initial=0.0, now_ns=T0)
    np.testing.assert_array_equal(arr.balance(T0 + 250 * MS), [25.0, 250.0, 2.5])
    np.testing.assert_array_equal(arr.balance(T0 + 5000 * MS), [100.0, 1000.0, 10.0])  # capped
    ok = arr.consume(np.array([150.0, 999.0, 10.0]), T0 + 5000 * MS)
    np.testing.assert_array_equal(ok, [False, True, False])
    np.testing.assert_array_equal(arr.balance(T0 + 5000 * MS), [-50.0, 1.0, 0.0])
    np.testing.assert_array_equal(arr.available(T0 + 5000 * MS), [0.0, 1.0, 0.0])  # debt reads 0
    np.testing.assert_allclose(arr.throttle_duration_s(T0 + 5000 * MS), [0.51, 0.009, 0.1])


def test_time_line_starts_at_the_first_call_and_clock_going_back_adds_nothing():
    arr = TokenBucketArray(np.array([100.0]), initial=0.0)
    assert arr.balance(5 * 10**9)[0] == 0.0
    assert arr.balance(5 * 10**9 + 100 * MS)[0] == 10.0
    assert arr.balance(5 * 10**9)[0] == 10.0
    assert arr.balance(5 * 10**9 + 200 * MS)[0] == 20.0


def test_set_rate_keeps_debt_and_capacity_follows_rate_unless_given():
    arr = TokenBucketArray(np.array([100.0, 100.0]), now_ns=T0)
    arr.consume(np.array([150.0, 0.0]), T0)
    arr.set_rate(np.array([1000.0, 10.0]), T0 + 100 * MS)  # -40 kept; 100 cut to the new capacity 10
    np.testing.assert_array_equal(arr.capacity, [1000.0, 10.0])
    np.testing.assert_allclose(arr.balance(T0 + 100 * MS), [-40.0, 10.0])
    np.testing.assert_allclose(arr.balance(T0 + 200 * MS), [60.0, 10.0])
    arr.set_rate(np.array([1000.0, 10.0]), T0 + 200 * MS, capacity=np.array([5000.0, 40.0]))
    np.testing.assert_array_equal(arr.capacity, [5000.0, 40.0])
    np.testing.assert_allclose(arr.balance(T0 + 200 * MS), [60.0, 10.0])


def test_unlimited_groups_never_throttle_and_never_nan():
    arr = TokenBucketArray(np.array([np.inf, 100.0]), capacity=np.array([5.0, 100.0]), initial=0.0, now_ns=T0)
    with np.errstate(all="raise"):  # any inf - inf or inf * 0 would raise here
        assert arr.capacity[0] == np.inf
        np.testing.assert_array_equal(arr.available(T0), [np.inf, 0.0])
        ok = arr.consume(np.array([1e15, 0.0]), T0)
        np.testing.assert_array_equal(ok, [True, False])
        np.testing.assert_array_equal(arr.throttle_duration_s(T0), [0.0, 0.01])
        np.testing.assert_array_equal(arr.balance(T0 + MS), [np.inf, 0.1])
        arr.set_rate(np.array([100.0, np.inf]), T0 + MS)  # back to limited: full; to unlimited: filled
        np.testing.assert_array_equal(arr.balance(T0 + MS), [100.0, np.inf])
        np.testing.assert_array_equal(arr.throttle_duration_s(T0 + 2 * MS), [0.0, 0.0])
        arr.set_rate(np.array([np.inf, np.inf]), T0 + 3 * MS)
        np.testing.assert_array_equal(arr.available(T0 + 3 * MS), [np.inf, np.inf])


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((np.array([1.0, 0.0]),), {}),
        ((np.array([1.0, np.nan]),), {}),
        ((np.array([[1.0]]),), {}),
        ((np.array([1.0]),), {"capacity": 0.0}),
        ((np.array([1.0]),), {"initial": 2.0}),
        ((np.array([1.0]),), {"initial": np.nan}),
        ((np.array([1.0]),), {"initial": -np.inf}),
    ],
)
def test_invalid_construction(args, kwargs):
    with pytest.raises(ValueError, match="must"):
        TokenBucketArray(*args, **kwargs)


@pytest.mark.parametrize("amounts", [[-1.0, 0.0], [np.nan, 0.0], [np.inf, 0.0]])
def test_invalid_consume_changes_nothing(amounts):
    arr = TokenBucketArray(np.array([10.0, 10.0]), now_ns=T0)
    with pytest.raises(ValueError, match="amounts"):
        arr.consume(np.array(amounts), T0)
    np.testing.assert_array_equal(arr.balance(T0), [10.0, 10.0])


def test_invalid_set_rate():
    arr = TokenBucketArray(np.array([10.0, 10.0]), now_ns=T0)
    with pytest.raises(ValueError, match="expected 2 rates"):
        arr.set_rate(np.array([1.0]), T0)
    with pytest.raises(ValueError, match="rate"):
        arr.set_rate(np.array([1.0, -1.0]), T0)


def test_balance_is_a_copy_and_repr_summarises():
    arr = TokenBucketArray(np.array([10.0, np.inf, 5.0]), now_ns=T0)
    arr.balance(T0)[0] = -1e9
    arr.consume(np.array([0.0, 0.0, 8.0]), T0)
    assert arr.balance(T0)[0] == 10.0
    assert len(arr) == 3
    assert repr(arr) == f"TokenBucketArray(groups=3, unlimited=1, without_tokens=1, debt=3, last_ns={T0})"


# --- the array and the scalar bucket agree, step by step ----------------------------------------------------

G = 4
group_rates = st.one_of(st.floats(0.5, 1e5), st.just(math.inf))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.integers(0, 300 * MS)),
        st.tuples(st.just("consume"), st.lists(st.floats(0, 2e4), min_size=G, max_size=G)),
        st.tuples(st.just("set_rate"), st.lists(group_rates, min_size=G, max_size=G)),
        st.tuples(st.just("set_rate_cap"), st.lists(st.floats(0.5, 1e5), min_size=G, max_size=G)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    rates=st.lists(group_rates, min_size=G, max_size=G),
    spent=st.lists(st.floats(0, 2e4), min_size=G, max_size=G),
    elapsed_ns=st.integers(0, 300 * MS),
    seconds=st.floats(0.01, 100),
)
def test_hold_for_is_set_rate_with_the_same_rates(rates, spent, elapsed_ns, seconds):
    """`hold_for` (the limiter's per-round capacity, unchecked) is `set_rate` with the same rates and `seconds` of
    each as its capacity: the same capacities, the same balances, debt and unlimited groups included."""
    held, reset = (TokenBucketArray(np.array(rates), now_ns=T0) for _ in range(2))
    for bucket in (held, reset):
        bucket.consume(np.array(spent), T0)
    held.hold_for(seconds, T0 + elapsed_ns)
    reset.set_rate(np.array(rates), T0 + elapsed_ns, capacity=np.array(rates) * seconds)
    np.testing.assert_array_equal(held.capacity, reset.capacity)
    np.testing.assert_array_equal(held.balance(T0 + elapsed_ns), reset.balance(T0 + elapsed_ns))
    with pytest.raises(ValueError, match="seconds must be > 0"):
        held.hold_for(0.0, T0 + elapsed_ns)


@settings(max_examples=300, deadline=None)
@given(rates=st.lists(group_rates, min_size=G, max_size=G), steps=ops)
def test_array_and_scalar_buckets_agree(rates, steps):
    now = [T0]
    scalars = [TokenBucket(r, clock=lambda: now[0], resolution_ns=0) for r in rates]
    arr = TokenBucketArray(np.array(rates), now_ns=T0)
    for op, arg in steps:
        if op == "advance":
            now[0] += arg
        elif op == "consume":
            got = arr.consume(np.array(arg), now[0])
            want = [b.consume(n) for b, n in zip(scalars, arg, strict=True)]
            np.testing.assert_array_equal(got, want)
        elif op == "set_rate":
            arr.set_rate(np.array(arg), now[0])
            for b, r in zip(scalars, arg, strict=True):
                b.set_rate(r)
        else:  # explicit capacity: two seconds' worth
            arr.set_rate(np.array(arg), now[0], capacity=2 * np.array(arg))
            for b, r in zip(scalars, arg, strict=True):
                b.set_rate(r, capacity=2 * r)
        balance = arr.balance(now[0])
        np.testing.assert_array_equal(balance, [b.balance() for b in scalars])
        np.testing.assert_array_equal(arr.capacity, [b.capacity for b in scalars])
        assert np.all(balance <= arr.capacity)
        assert not np.isnan(balance).any()
        throttle = arr.throttle_duration_s(now[0])
        np.testing.assert_array_equal(throttle, [b.throttle_duration_s() for b in scalars])
        assert np.all(throttle >= 0)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(1, 1e4),
    steps=st.lists(st.tuples(st.integers(0, 40 * MS), st.floats(0, 100)), max_size=80),
)
def test_lazy_scalar_is_never_above_the_exact_array(rate, steps):
    """With a resolution, the scalar bucket is eventually consistent and conservative, never generous."""
    now = [T0]
    lazy = TokenBucket(rate, clock=lambda: now[0], resolution_ns=16 * MS)
    arr = TokenBucketArray(np.array([rate]), now_ns=T0)
    for dt, n in steps:
        now[0] += dt
        lazy.consume(n)
        arr.consume(np.array([n]), now[0])
    exact = arr.balance(now[0])[0]
    assert lazy.balance() <= exact + 1e-9 * max(1.0, abs(exact))
