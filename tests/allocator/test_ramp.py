"""Ramp: the seed's modes as tables of pools, then invariants with hypothesis, then Numaflow's known faults."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.ramps.ramp import MODES, Ramp, split

# What these check is the pool, not the time: a long ramp takes thousands of epochs, and the suite shares 2 busy
# cores (hypothesis's default 200 ms deadline failed under load).
NO_DEADLINE = settings(deadline=None)


def pools(ramp: Ramp, calls: list[tuple[int, float | None]]) -> list[float]:
    """The pools `ramp` returns for `(epoch, used)` calls, in order."""
    return [ramp.next_pool(epoch, used) for epoch, used in calls]


def full_use(ramp: Ramp, epochs: list[int]) -> list[float]:
    """Pools when every epoch with requests uses its whole pool (`used` = the previous pool)."""
    result = [ramp.next_pool(epochs[0], None)]
    for epoch in epochs[1:]:
        result.append(ramp.next_pool(epoch, result[-1]))
    return result


def seed_ramp(mode: str, usage_threshold_pct: float = 100) -> Ramp:
    """10 -> 110 tokens over 10 s: one slope is 10 tokens. The seed's charts use a threshold of 100%."""
    return Ramp(mode, max_tokens=110, min_tokens=10, ramp_duration_s=10, usage_threshold_pct=usage_threshold_pct)


# --- tables from the seed -----------------------------------------------------------------------------------


def test_interface_example_from_the_issue():
    ramp = seed_ramp("go-back-n")
    assert ramp.next_pool(epoch=1, used=None) == 10.0
    assert ramp.next_pool(epoch=2, used=10) == 20.0
    assert ramp.next_pool(epoch=5, used=20) == 10.0  # full use: + 1 slope; 2 idle epochs: - 2 slopes


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_ramps_one_slope_per_epoch_under_full_use_and_stops_at_max(mode):
    assert full_use(seed_ramp(mode), list(range(1, 14))) == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 110, 110]


# Each case: mode, threshold %, calls (epoch, used), expected pools. Used tokens are of the previous call's pool.
TABLE = [
    # scheduled: by the clock, whatever the usage ...
    ("scheduled", 100, [(1, None), (2, 0), (3, 0), (4, 1), (5, 0)], [10, 20, 30, 40, 50]),
    # ... and whatever the gaps: epochs 3-4 and 7-12 are idle, the ramp goes on.
    ("scheduled", 100, [(1, None), (2, 20), (5, 5), (6, 50), (13, 0)], [10, 20, 50, 60, 110]),
    # relaxed: one slope per epoch with requests, at any usage ...
    ("relaxed", 100, [(1, None), (2, 0), (3, 1), (4, 30), (5, 0)], [10, 20, 30, 40, 50]),
    # ... stalled by gaps, resuming where it left off.
    ("relaxed", 100, [(1, None), (2, 10), (3, 0), (10, 30), (11, 0), (30, 50)], [10, 20, 30, 40, 50, 60]),
    # only-if-used at 100%: stalls at epoch 4 (15 of 30 used), goes on at 5 and 6.
    ("only-if-used", 100, [(1, None), (2, 10), (3, 20), (4, 15), (5, 30), (6, 40)], [10, 20, 30, 30, 40, 50]),
    # overshoot (more than the pool: debt) is full use; 19.5 of 20 is not.
    ("only-if-used", 100, [(1, None), (2, 12), (3, 19.5), (4, 0)], [10, 20, 20, 20]),
    # at 50%: 5 of 10 is enough, 9 of 20 is not, 10 of 20 is.
    ("only-if-used", 50, [(1, None), (2, 5), (3, 9), (4, 10), (5, 14)], [10, 20, 20, 30, 30]),
    # and gaps stall it: the usage before a gap still counts, the gap itself takes nothing off.
    ("only-if-used", 100, [(1, None), (2, 10), (9, 20), (20, 10), (21, 30)], [10, 20, 30, 30, 40]),
    # go-back-n at 100%: down one slope after an under-used epoch (25 of 30), up again after full ones.
    ("go-back-n", 100, [(1, None), (2, 10), (3, 20), (4, 25), (5, 20), (6, 30), (7, 40)], [10, 20, 30, 20, 30, 40, 50]),
    # repeated under-use walks it down to min and no further.
    ("go-back-n", 100, [(1, None), (2, 10), (3, 20), (4, 0), (5, 0), (6, 0), (7, 0)], [10, 20, 30, 20, 10, 10, 10]),
    # the seed's gap chart: calls up to t=17 at 70, all used; none at t=18 and 19; at t=20 the step the full use
    # earned (+1 slope), then one slope off per idle epoch (-2): 60; then up one slope an epoch while fully used.
    (
        "go-back-n",
        100,
        [(11, None)]
        + [(e, 10 * (e - 11)) for e in range(12, 18)]
        + [(20, 70)]
        + [(e, 10 * (e - 14)) for e in range(21, 26)],
        [10, 20, 30, 40, 50, 60, 70, 60, 70, 80, 90, 100, 110],
    ),
    # ... under-used before a gap: -1, then -2; a long gap: back to min.
    ("go-back-n", 100, [(1, None), (2, 10), (3, 20), (6, 10), (40, 10), (41, 10)], [10, 20, 30, 10, 10, 20]),
    # at 50%, at max: full use holds it, 54 of 110 takes one slope off, 50 of 100 puts it back, a gap of 3 takes 3.
    (
        "go-back-n",
        50,
        [(1, None)] + [(e, 110) for e in range(2, 14)] + [(14, 54), (15, 50), (19, 100)],
        [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 110, 110, 100, 110, 80],
    ),
]


@pytest.mark.parametrize(("mode", "usage_threshold_pct", "calls", "expected"), TABLE)
def test_seed_table(mode, usage_threshold_pct, calls, expected):
    ramp = seed_ramp(mode, usage_threshold_pct)
    result = pools(ramp, calls)
    assert result == pytest.approx(expected)
    assert all(10 <= pool <= 110 for pool in result)


def test_fractional_slope_counts_slopes_so_max_is_reached_exactly():
    ramp = Ramp("relaxed", max_tokens=0.3, min_tokens=0.1, ramp_duration_s=3)  # slope 0.0666...
    assert full_use(ramp, [1, 2, 3, 4, 5]) == pytest.approx([0.1, 0.1 + 0.2 / 3, 0.1 + 0.4 / 3, 0.3, 0.3])
    assert full_use(Ramp("relaxed", max_tokens=1.0, min_tokens=0.0, ramp_duration_s=10), list(range(11)))[-1] == 1.0


def test_fractional_duration_tops_out_at_max_and_goes_down_one_whole_slope():
    ramp = Ramp("go-back-n", max_tokens=35, min_tokens=10, ramp_duration_s=2.5, usage_threshold_pct=100)  # slope 10
    calls = [(1, None), (2, 10), (3, 20), (4, 30), (5, 0), (6, 0)]
    assert pools(ramp, calls) == pytest.approx([10, 20, 30, 35, 25, 15])


def test_whole_token_consumers_pass_a_100_pct_threshold_on_a_fractional_pool():
    # min 10, max 20 over 60 s: slope 1/6. A consumer of whole tokens can use at most floor(pool) of 10.17.
    ramp = Ramp("only-if-used", max_tokens=20, min_tokens=10, ramp_duration_s=60, usage_threshold_pct=100)
    pool = ramp.next_pool(0, None)
    for epoch in range(1, 61):
        pool = ramp.next_pool(epoch, math.floor(pool))
    assert pool == 20.0
    # but one whole token short of floor(pool) is under 100%
    assert ramp.next_pool(61, 19) == 20.0
    stalled = Ramp("only-if-used", max_tokens=20, min_tokens=10, ramp_duration_s=60, usage_threshold_pct=100)
    assert pools(stalled, [(0, None), (1, 10), (2, 9)]) == pytest.approx([10, 10 + 1 / 6, 10 + 1 / 6])


def test_min_equal_to_max_is_a_flat_pool():
    ramp = Ramp("go-back-n", max_tokens=5, min_tokens=5, ramp_duration_s=1)
    assert pools(ramp, [(1, None), (2, 0), (9, 5)]) == [5, 5, 5]


def test_zero_min_pool_counts_as_used_when_asked_for():
    ramp = Ramp("only-if-used", max_tokens=2, min_tokens=0, ramp_duration_s=4, usage_threshold_pct=100)
    assert pools(ramp, [(1, None), (2, 0), (3, 0), (4, 1)]) == [0, 0.5, 1.0, 1.5]  # nothing to use in 0 or 0.5


# --- bad values ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"mode": "linear"}, "mode"),
        ({"mode": "GO_BACK_N"}, "mode"),
        ({"min_tokens": 120}, "min_tokens"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"max_tokens": math.inf}, "max_tokens"),
        ({"min_tokens": math.nan}, "min_tokens"),
        ({"max_tokens": "110"}, "max_tokens"),
        ({"ramp_duration_s": 0}, "ramp_duration_s"),
        ({"ramp_duration_s": -10}, "ramp_duration_s"),
        ({"ramp_duration_s": math.inf}, "ramp_duration_s"),
        ({"usage_threshold_pct": 0}, "usage_threshold_pct"),
        ({"usage_threshold_pct": 100.5}, "usage_threshold_pct"),
        ({"usage_threshold_pct": math.nan}, "usage_threshold_pct"),
    ],
)
def test_bad_construction_values_name_the_parameter(kwargs, named):
    settings = {"mode": "relaxed", "max_tokens": 110, "min_tokens": 10, "ramp_duration_s": 10} | kwargs
    with pytest.raises(ValueError, match=named):
        Ramp(**settings)


def test_defaults_and_settings_are_public():
    ramp = Ramp("only-if-used", max_tokens=110, min_tokens=10, ramp_duration_s=4)
    assert (ramp.mode, ramp.max_tokens, ramp.min_tokens, ramp.ramp_duration_s) == ("only-if-used", 110, 10, 4)
    assert (ramp.usage_threshold_pct, ramp.slope_tokens) == (50, 25)


def test_epochs_must_increase_and_used_must_be_a_count_after_the_first_call():
    ramp = seed_ramp("relaxed")
    with pytest.raises(ValueError, match="used"):
        ramp.next_pool(1, 10)  # nothing was used before the first epoch with requests
    ramp.next_pool(5, None)
    refused = [(5, 10, "epoch"), (4, 10, "epoch"), (6, None, "used"), (6, -1, "used"), (6, math.nan, "used")]
    for epoch, used, named in refused:
        with pytest.raises(ValueError, match=named):
            ramp.next_pool(epoch, used)
    with pytest.raises(TypeError):
        ramp.next_pool(6.5, 10)
    assert ramp.next_pool(6, 10) == 20  # the refused calls changed nothing


def test_repr_shows_live_state():
    ramp = seed_ramp("go-back-n")
    assert "pool=10" in repr(ramp) and "first_and_last_epoch=None" in repr(ramp)
    pools(ramp, [(1, None), (2, 10)])
    assert repr(ramp) == (
        "Ramp('go-back-n', max_tokens=110, min_tokens=10, ramp_duration_s=10, usage_threshold_pct=100; "
        "pool=20, slopes_above_min=1, first_and_last_epoch=(1, 2))"
    )


# --- Numaflow's known faults, which ours must not have ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_numaflow_fault_first_call_at_unix_time_starts_at_min_not_max(mode):
    # Numaflow's scheduled mode counts from epoch 0: its first refill at a Unix-time epoch is the maximum.
    # Its other modes add a slope on the first call. Ours start at min on the first epoch with requests.
    ramp = seed_ramp(mode)
    assert full_use(ramp, [1_700_000_000, 1_700_000_001, 1_700_000_002]) == [10, 20, 30]


def test_numaflow_fault_scheduled_counts_from_the_first_epoch_with_requests():
    ramp = seed_ramp("scheduled")
    assert pools(ramp, [(1_700_000_000, None), (1_700_000_004, 0), (1_700_000_300, 0)]) == [10, 50, 110]


@pytest.mark.parametrize(
    ("pool", "pool_size", "start", "parts"),
    [
        (2, 2, 0, [1, 1]),  # the smallest pool that gives every member a token
        (3, 2, 0, [2, 1]),  # Numaflow: [1, 1], a token never handed out
        (3, 2, 1, [1, 2]),  # the extra token rotates with `start`
        (1, 2, 0, [1, 0]),  # Numaflow: [0, 0], a whole pool never handed out
        (5, 4, 3, [1, 1, 1, 2]),
        (10, 3, 7, [3, 4, 3]),
        (2.9, 2, 0, [1, 1]),  # whole tokens only: the fraction stays with the ramp
        (0, 3, 0, [0, 0, 0]),
        (7, 1, 0, [7]),
    ],
)
def test_numaflow_fault_split_hands_out_the_remainder(pool, pool_size, start, parts):
    assert split(pool, pool_size, start) == parts


def test_split_refuses_bad_values():
    for pool, pool_size, named in [(3, 0, "pool_size"), (-1, 2, "pool"), (math.inf, 2, "pool"), (math.nan, 2, "pool")]:
        with pytest.raises(ValueError, match=named):
            split(pool, pool_size)


# --- properties ---------------------------------------------------------------------------------------------

TOLERANCE = 1e-9


@st.composite
def ramps(draw, modes=tuple(MODES)):
    min_tokens = draw(st.floats(0, 1e6))
    max_tokens = min_tokens + draw(st.floats(0, 1e6))
    return Ramp(
        draw(st.sampled_from(modes)),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ramp_duration_s=draw(st.floats(0.01, 1e4)),
        usage_threshold_pct=draw(st.floats(0.01, 100)),
    )


# A call: (idle epochs before it, tokens used in the previous epoch as a fraction of its pool)
calls = st.lists(st.tuples(st.integers(0, 30), st.floats(0, 1.5)), max_size=40)
first_epochs = st.integers(0, 2_000_000_000)


def run(ramp: Ramp, first_epoch: int, steps: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
    """(epoch, idle epochs before it, pool) for each call."""
    epoch, pool = first_epoch, ramp.next_pool(first_epoch, None)
    trace = [(epoch, 0, pool)]
    for idle_epochs, used_fraction in steps:
        epoch += idle_epochs + 1
        pool = ramp.next_pool(epoch, used_fraction * pool)
        trace.append((epoch, idle_epochs, pool))
    return trace


def close_to(a: float, b: float, ramp: Ramp) -> bool:
    return abs(a - b) <= TOLERANCE * (1 + ramp.max_tokens)


@NO_DEADLINE
@given(ramps(), first_epochs, calls)
def test_pool_stays_within_min_and_max(ramp, first_epoch, steps):
    trace = run(ramp, first_epoch, steps)
    assert trace[0][2] == ramp.min_tokens
    assert all(ramp.min_tokens <= pool <= ramp.max_tokens for _, _, pool in trace)


@NO_DEADLINE
@given(ramps(modes=("scheduled",)), first_epochs, calls, st.floats(0, 1.5))
def test_scheduled_is_independent_of_used_and_follows_the_clock(ramp, first_epoch, steps, other_fraction):
    twin = Ramp("scheduled", ramp.max_tokens, ramp.min_tokens, ramp.ramp_duration_s, ramp.usage_threshold_pct)
    trace = run(ramp, first_epoch, steps)
    assert trace == run(twin, first_epoch, [(idle, other_fraction) for idle, _ in steps])
    for epoch, _, pool in trace:
        expected = min(ramp.min_tokens + (epoch - first_epoch) * ramp.slope_tokens, ramp.max_tokens)
        assert close_to(pool, expected, ramp)


@NO_DEADLINE
@given(ramps(modes=("relaxed",)), first_epochs, calls)
def test_relaxed_never_moves_during_a_gap(ramp, first_epoch, steps):
    trace = run(ramp, first_epoch, steps)
    for (_, _, before), (_, _, after) in zip(trace, trace[1:], strict=False):
        assert close_to(after, min(before + ramp.slope_tokens, ramp.max_tokens), ramp)


@NO_DEADLINE
@given(ramps(modes=("only-if-used",)), first_epochs, calls)
def test_only_if_used_never_decreases(ramp, first_epoch, steps):
    trace = run(ramp, first_epoch, steps)
    assert all(after >= before for (_, _, before), (_, _, after) in zip(trace, trace[1:], strict=False))


@NO_DEADLINE
@given(ramps(modes=("go-back-n",)), first_epochs, calls)
def test_go_back_n_after_a_gap_of_n_is_at_most_n_minus_one_slopes_below(ramp, first_epoch, steps):
    trace = run(ramp, first_epoch, steps)
    for (_, _, before), (_, idle_epochs, after) in zip(trace, trace[1:], strict=False):
        if idle_epochs:
            bound = max(before - (idle_epochs - 1) * ramp.slope_tokens, ramp.min_tokens)
            assert after <= bound or close_to(after, bound, ramp)


@NO_DEADLINE
@given(ramps(), first_epochs)
def test_full_use_reaches_max_within_ceil_duration_epochs(ramp, first_epoch):
    epochs = list(range(first_epoch, first_epoch + math.ceil(ramp.ramp_duration_s) + 1))
    assert full_use(ramp, epochs)[-1] == ramp.max_tokens


@NO_DEADLINE
@given(st.floats(0, 1e9), st.integers(1, 1000), st.integers(0, 10**6))
def test_split_parts_are_whole_differ_by_at_most_one_and_sum_to_the_whole_tokens(pool, pool_size, start):
    parts = split(pool, pool_size, start)
    assert len(parts) == pool_size
    assert all(part == int(part) for part in parts)
    assert sum(parts) == math.floor(pool)
    assert max(parts) - min(parts) <= 1
    if pool >= pool_size:
        assert min(parts) >= 1


@NO_DEADLINE
@given(st.integers(0, 10**6), st.integers(1, 100))
def test_split_of_a_whole_pool_sums_exactly_to_it_and_rotation_is_fair(pool, pool_size):
    rounds = [split(pool, pool_size, start) for start in range(pool_size)]
    assert all(sum(parts) == pool for parts in rounds)
    totals = [sum(column) for column in zip(*rounds, strict=True)]
    assert max(totals) - min(totals) == 0  # over pool_size rotations, every member got the same
