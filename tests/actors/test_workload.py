"""Rate profiles: the numbers each kind gives per round, and the parameter checks next to them."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.workload import MAX_RATE, MAX_ROUNDS, PROFILES, Profile, ProfileError, check_profile, rate_at

RNG = np.random.default_rng(0)  # only poisson draws; the others ignore it


def test_constant_is_its_rate():
    assert rate_at(Profile("constant", {"rate": 42}), 7, RNG) == 42.0


def test_ramp_endpoints_midpoint_and_flat_ends():
    ramp = Profile("ramp", {"from": 10, "to": 90, "over_rounds": 20})
    assert [rate_at(ramp, r, RNG) for r in (-5, 0, 10, 20, 35)] == [10.0, 10.0, 50.0, 90.0, 90.0]


def test_ramp_start_and_since_round_shift_it():
    ramp = Profile("ramp", {"from": 0, "to": 100, "over_rounds": 10, "start": 5})
    assert rate_at(ramp, 5, RNG) == 0.0
    assert rate_at(ramp, 10, RNG) == 50.0
    assert rate_at(ramp, 30, RNG, since_round=20) == 50.0  # the workload started at round 20


def test_ramp_down():
    ramp = Profile("ramp", {"from": 80, "to": 20, "over_rounds": 3})
    assert [rate_at(ramp, r, RNG) for r in range(4)] == [80.0, 60.0, 40.0, 20.0]


def test_sine_averages_to_its_mean_over_a_period():
    sine = Profile("sine", {"mean": 50, "amplitude": 30, "period_rounds": 20})
    rates = [rate_at(sine, r, RNG) for r in range(20)]
    assert np.mean(rates) == pytest.approx(50.0)
    assert max(rates) == pytest.approx(80.0)
    assert min(rates) == pytest.approx(20.0)
    assert rate_at(sine, 5, RNG) == pytest.approx(80.0)  # a quarter period in


def test_sine_is_clipped_at_zero():
    sine = Profile("sine", {"mean": 10, "amplitude": 30, "period_rounds": 4})
    assert rate_at(sine, 3, RNG) == 0.0  # 10 - 30


def test_poisson_mean_and_repeatability():
    poisson = Profile("poisson", {"mean": 50})
    draws = [rate_at(poisson, r, np.random.default_rng(7)) for r in range(3)]
    assert draws[0] == draws[1] == draws[2]  # same seed, same draw
    rng = np.random.default_rng(7)
    rates = [rate_at(poisson, r, rng) for r in range(4000)]
    assert np.mean(rates) == pytest.approx(50.0, abs=0.5)  # standard error ~0.11
    assert all(rate == int(rate) for rate in rates)


def test_trace_steps():
    trace = Profile("trace", {"rounds": [2, 5, 9], "rates": [10.0, 30.0, 0.0]})
    got = [rate_at(trace, r, RNG) for r in range(11)]
    assert got == [0, 0, 10, 10, 10, 30, 30, 30, 30, 0, 0]
    assert rate_at(trace, 7, RNG, since_round=5) == 10.0


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("constant", {"rate": 0}),
        ("ramp", {"from": 0, "to": 5.5, "over_rounds": 1, "start": 3}),
        ("sine", {"mean": 1, "amplitude": 2, "period_rounds": 10}),
        ("poisson", {"mean": 0.5}),
        ("trace", {"rounds": [0], "rates": [1.0]}),
    ],
)
def test_valid_profiles_pass_the_check(kind, params):
    check_profile(kind, params)


@pytest.mark.parametrize(
    ("kind", "params", "param", "problem"),
    [
        ("constant", {"rate": -1}, "rate", "must be >= 0, got -1"),
        ("constant", {}, "rate", "required"),
        ("constant", {"rate": "fast"}, "rate", "must be a finite number, got 'fast'"),
        ("constant", {"rate": True}, "rate", "must be a finite number, got True"),
        ("constant", {"rate": math.inf}, "rate", "must be a finite number, got inf"),
        ("ramp", {"from": 1, "to": 2}, "over_rounds", "required"),
        ("ramp", {"from": 1, "to": 2, "over_rounds": 0}, "over_rounds", "must be >= 1, got 0"),
        ("ramp", {"from": 1, "to": 2, "over_rounds": 2.5}, "over_rounds", "must be an integer, got 2.5"),
        (
            "ramp",
            {"from": 1, "to": 2, "over_rounds": 2, "length": 3},
            "length",
            "unknown parameter (allowed: from, to, over_rounds, start)",
        ),
        ("sine", {"mean": 1, "amplitude": -2, "period_rounds": 3}, "amplitude", "must be >= 0, got -2"),
        ("poisson", {"mean": -3}, "mean", "must be >= 0, got -3"),
        ("trace", {"rounds": [], "rates": []}, "rounds", "must be a non-empty list"),
        ("trace", {"rounds": [0, 1], "rates": [1.0]}, "rates", "has 1 rows but rounds has 2"),
        ("trace", {"rounds": [0, 3, 3], "rates": [1, 2, 3]}, "rounds", "must increase strictly, got 3 then 3"),
        ("trace", {"rounds": [0, 1], "rates": [1, -2]}, "rates", "must be >= 0, got -2"),
        # upper bounds: numpy's Poisson draw and sin(2 pi r / period) break far below what Python accepts
        ("poisson", {"mean": 1e308}, "mean", "must be <= 1000000000000, got 1e+308"),
        ("constant", {"rate": 10**12 + 1}, "rate", "must be <= 1000000000000, got 1000000000001"),
        (
            "sine",
            {"mean": 1, "amplitude": 1, "period_rounds": 10**400},
            "period_rounds",
            f"must be <= 10000000, got {10**400}",
        ),
        (
            "ramp",
            {"from": 1, "to": 2, "over_rounds": 2, "start": 10**7 + 1},
            "start",
            "must be <= 10000000, got 10000001",
        ),
        ("trace", {"rounds": [0, 10**30], "rates": [1, 2]}, "rounds", f"must be <= 10000000, got {10**30}"),
    ],
)
def test_bad_params_are_named(kind, params, param, problem):
    with pytest.raises(ProfileError) as caught:
        check_profile(kind, params)
    assert (caught.value.param, caught.value.problem) == (param, problem)
    assert str(caught.value) == f"{param}: {problem}"
    assert isinstance(caught.value, ValueError)


def test_profiles_at_their_bounds_evaluate():
    rng = np.random.default_rng(0)
    assert rate_at(Profile("poisson", {"mean": MAX_RATE}), 0, rng) > 0
    sine = Profile("sine", {"mean": MAX_RATE, "amplitude": MAX_RATE, "period_rounds": MAX_ROUNDS})
    assert 0 <= rate_at(sine, MAX_ROUNDS // 4, rng) <= 2 * MAX_RATE
    for profile in (sine, Profile("ramp", {"from": 0, "to": MAX_RATE, "over_rounds": MAX_ROUNDS, "start": MAX_ROUNDS})):
        check_profile(profile.kind, profile.params)


def test_unknown_kind():
    with pytest.raises(ProfileError, match="unknown profile 'square' \\(known: constant, ramp, sine"):
        check_profile("square", {})


def test_every_kind_has_a_check():
    for kind in PROFILES:
        with pytest.raises(ProfileError):
            check_profile(kind, {"bogus": 1})


non_negative = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(start=non_negative, end=non_negative, over=st.integers(1, 100), r=st.integers(-10, 200))
def test_ramp_stays_between_its_ends(start, end, over, r):
    rate = rate_at(Profile("ramp", {"from": start, "to": end, "over_rounds": over}), r, RNG)
    assert min(start, end) - 1e-6 <= rate <= max(start, end) + 1e-6


@given(mean=non_negative, amplitude=non_negative, period=st.integers(1, 100), r=st.integers(0, 1000))
def test_sine_is_never_negative(mean, amplitude, period, r):
    rate = rate_at(Profile("sine", {"mean": mean, "amplitude": amplitude, "period_rounds": period}), r, RNG)
    assert 0.0 <= rate <= mean + amplitude + 1e-6
