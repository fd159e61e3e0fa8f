"""TokenBucket: PIP-322 numbers on a fake clock, then properties with hypothesis."""

import math

import pytest
from fakes import MS, FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.limiter.token_bucket import TokenBucket, refill, throttle_duration, throttle_target


def bucket(rate=100.0, capacity=None, initial=None, resolution_ns=0):
    clock = FakeClock()
    return TokenBucket(rate, capacity, initial, clock=clock, resolution_ns=resolution_ns), clock


# --- numbers ------------------------------------------------------------------------------------------------


def test_defaults_one_second_of_tokens_and_full():
    b, _ = bucket(rate=100)
    assert (b.rate, b.capacity, b.resolution_ns) == (100.0, 100.0, 0)
    assert b.balance() == 100.0
    assert TokenBucket(5, clock=FakeClock()).resolution_ns == 16_000_000


def test_refill_after_250_ms_at_rate_100_adds_25():
    b, clock = bucket(rate=100, initial=0)
    clock.advance_ms(250)
    assert b.balance() == 25.0


def test_refill_is_capped_at_capacity():
    b, clock = bucket(rate=100, capacity=150, initial=0)
    clock.advance_ms(1000)
    assert b.balance() == 100.0
    clock.advance_ms(5000)
    assert b.balance() == 150.0


def test_consume_always_deducts_and_says_whether_tokens_remain():
    b, _ = bucket(rate=100)
    assert b.consume(99) is True  # 1 left
    assert b.consume(1) is False  # 0 left is no tokens
    assert b.consume(50) is False  # accepted anyway: debt
    assert b.balance() == -50.0
    assert b.consume(0) is False


def test_debt_after_over_consume_and_recovery_time():
    b, clock = bucket(rate=100)
    assert b.consume(150) is False
    assert b.balance() == -50.0
    assert b.throttle_duration_s() == pytest.approx(0.51)  # back to max(1, 1% of 100) = 1 token
    clock.advance_ms(500)
    assert b.balance() == pytest.approx(0.0)
    assert b.throttle_duration_s() == pytest.approx(0.01)
    clock.advance_ms(10)
    assert b.balance() == pytest.approx(1.0)
    assert b.throttle_duration_s() == 0.0
    assert b.has_tokens()


@pytest.mark.parametrize(
    ("rate", "capacity", "balance", "expected_s"),
    [
        (1000, None, -40, 0.05),  # target 10 (1% of 1000): 50 tokens at 1000/s
        (1000, None, 10, 0.0),  # at the target
        (1000, 5000, 0, 0.05),  # target 1% of 5000 = 50
        (50, None, -1, 0.04),  # target max(1, 0.5) = 1
        (0.5, None, -0.5, 2.0),  # capacity 0.5 < 1: the target is the capacity, not unreachable 1
    ],
)
def test_throttle_duration_table(rate, capacity, balance, expected_s):
    b, _ = bucket(rate=rate, capacity=capacity, initial=balance)
    assert b.throttle_duration_s() == pytest.approx(expected_s)
    assert throttle_duration(float(balance), float(rate), b.capacity) == pytest.approx(expected_s)


def test_set_rate_keeps_debt():
    b, clock = bucket(rate=100)
    b.consume(150)
    clock.advance_ms(100)  # -50 + 10
    b.set_rate(1000)
    assert (b.rate, b.capacity) == (1000.0, 1000.0)
    assert b.balance() == pytest.approx(-40.0)
    clock.advance_ms(100)
    assert b.balance() == pytest.approx(60.0)


def test_set_rate_refills_elapsed_time_at_the_old_rate_first():
    b, clock = bucket(rate=100, initial=0)
    clock.advance_ms(500)
    b.set_rate(1000)
    assert b.balance() == pytest.approx(50.0)  # not 500


def test_set_rate_cuts_a_balance_above_the_new_capacity_and_takes_an_explicit_capacity():
    b, _ = bucket(rate=100)
    b.set_rate(10)
    assert b.balance() == 10.0
    b.set_rate(10, capacity=40)
    assert b.capacity == 40.0
    assert b.balance() == 10.0  # a bigger capacity does not add tokens


def test_resolution_consumption_between_updates_is_accounted_exactly():
    b, clock = bucket(rate=1000, initial=0, resolution_ns=16 * MS)
    clock.advance_ms(10)
    # Between updates: answered from the last balance (0) minus the pending tokens, refill not counted yet.
    assert b.consume(1) is False
    assert "pending=1" in repr(b)
    clock.advance_ms(3)
    assert b.consume(2) is False
    clock.advance_ms(3)  # 16 ms after the last update: this call updates
    assert b.consume(1) is True
    assert "pending=0" in repr(b)
    assert b.balance() == pytest.approx(16 - 4)


def test_resolution_balance_forces_the_update():
    b, clock = bucket(rate=100, resolution_ns=16 * MS)
    for _ in range(30):
        clock.advance_ms(0.1)
        b.consume(5)
    assert b.balance() == pytest.approx(100 - 150)  # the bucket was full: the 0.3 ms of refill is capped
    clock.advance_ms(1)
    assert b.balance() == pytest.approx(-50 + 0.1)


def test_resolution_is_conservative_like_pulsar():
    """Refill is capped before the pending tokens are subtracted (Pulsar's order): never above exact."""
    exact, clock_a = bucket(rate=100, resolution_ns=0)
    lazy, clock_b = bucket(rate=100, resolution_ns=16 * MS)
    for b, clock in ((exact, clock_a), (lazy, clock_b)):
        clock.advance_ms(1)
        b.consume(10)
        clock.advance_ms(19)
    assert exact.balance() == pytest.approx(91.9)  # 100 - 10, then 19 ms of refill
    assert lazy.balance() == pytest.approx(90.0)


def test_unlimited_rate():
    b, clock = bucket(rate=math.inf, capacity=10)
    assert b.capacity == math.inf
    assert b.consume(1e15) is True
    assert b.balance() == math.inf
    assert b.throttle_duration_s() == 0.0
    clock.advance_ms(5)
    assert b.balance() == math.inf


def test_switching_to_unlimited_and_back():
    b, clock = bucket(rate=100)
    b.consume(500)
    b.set_rate(math.inf)
    assert b.consume(1) is True
    assert b.throttle_duration_s() == 0.0
    clock.advance_ms(1)
    b.set_rate(100)
    assert b.balance() == 100.0  # starts full, no NaN
    assert not math.isnan(b.throttle_duration_s())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0},
        {"rate": -5},
        {"rate": math.nan},
        {"rate": 10, "capacity": 0},
        {"rate": 10, "capacity": math.nan},
        {"rate": 10, "initial": 11},
        {"rate": 10, "initial": math.nan},
        {"rate": 10, "resolution_ns": -1},
    ],
)
def test_invalid_construction_fails_with_a_plain_message(kwargs):
    with pytest.raises(ValueError, match="must"):
        TokenBucket(clock=FakeClock(), **kwargs)


@pytest.mark.parametrize("n", [-1, math.nan, math.inf])
def test_invalid_consume(n):
    b, _ = bucket()
    with pytest.raises(ValueError, match="cannot consume"):
        b.consume(n)
    assert b.balance() == 100.0


@pytest.mark.parametrize("rate", [0, -1, math.nan])
def test_invalid_set_rate_changes_nothing(rate):
    b, _ = bucket()
    with pytest.raises(ValueError, match="rate must be > 0"):
        b.set_rate(rate)
    assert b.rate == 100.0


def test_repr_shows_live_state_without_updating():
    b, clock = bucket(rate=100, resolution_ns=16 * MS)
    b.consume(30)
    clock.advance_ms(5)
    text = repr(b)
    assert "rate=100/s" in text and "balance=70" in text and "pending=30" in text
    assert "pending=30" in repr(b)  # repr did not flush


def test_refill_on_floats_and_clock_going_backwards():
    assert refill(-10.0, 100.0, 100.0, 250 * MS) == 15.0
    assert refill(5.0, 100.0, 100.0, -MS) == 5.0
    assert refill(500.0, 100.0, 100.0, 0) == 100.0
    assert refill(math.inf, math.inf, math.inf, 0) == math.inf
    assert throttle_target(100.0) == 1.0 and throttle_target(1e4) == 100.0 and throttle_target(0.25) == 0.25


# --- properties ---------------------------------------------------------------------------------------------

rates = st.floats(min_value=0.5, max_value=1e6)
steps = st.lists(
    st.tuples(
        st.sampled_from(["consume", "consume", "advance", "set_rate", "balance"]),
        st.floats(min_value=0, max_value=1e6),
        st.integers(min_value=0, max_value=200 * MS),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(rate=rates, burst_s=st.floats(0.01, 10), resolution_ns=st.sampled_from([0, MS, 16 * MS]), ops=steps)
def test_balance_never_exceeds_capacity(rate, burst_s, resolution_ns, ops):
    clock = FakeClock()
    b = TokenBucket(rate, rate * burst_s, clock=clock, resolution_ns=resolution_ns)
    for op, x, dt in ops:
        clock.now_ns += dt
        if op == "consume":
            b.consume(x)
        elif op == "set_rate":
            b.set_rate(max(x, 0.5))
        assert b.balance() <= b.capacity
        assert not math.isnan(b.throttle_duration_s())


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(1, 1000),
    capacity_s=st.floats(0.01, 5),
    resolution_ns=st.sampled_from([0, 16 * MS]),
    demands=st.lists(st.tuples(st.floats(0, 50), st.integers(0, 30 * MS)), min_size=1, max_size=300),
)
def test_admitted_over_a_long_horizon_is_bounded(rate, capacity_s, resolution_ns, demands):
    """A client that sends only while the bucket says it has tokens never gets more than initial + rate*T,
    plus the one consume that was accepted last (accepted work cannot be rejected)."""
    clock = FakeClock()
    start = clock.now_ns
    b = TokenBucket(rate, rate * capacity_s, clock=clock, resolution_ns=resolution_ns)
    admitted, allowed, biggest = 0.0, True, 0.0
    for n, dt in demands:
        clock.now_ns += dt
        if not allowed:
            allowed = b.has_tokens()
        if allowed:
            allowed = b.consume(n)
            admitted += n
            biggest = max(biggest, n)
    horizon_s = (clock.now_ns - start) / 1e9
    assert admitted <= b.capacity + rate * horizon_s + biggest + 1e-6 * (1 + admitted)
