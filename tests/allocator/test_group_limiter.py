"""`GroupLimiter`: the fluid model of a round's traffic through the buckets, on rounds that come late or early
(a realtime timer's lag), one group of one messages dimension at a limit of 20 msgs/s set once at t = 0."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.limiter.group_limiter import GroupLimiter

LIMIT_MSGS_PER_S = 20.0
INTERVAL_S = 0.2
MSG_BYTES = np.array([100.0])

round_lengths_s = st.lists(st.floats(0.5 * INTERVAL_S, 2.0 * INTERVAL_S), min_size=2, max_size=40)


def admitted_rates(lengths_s: list[float], demands_msgs_per_s: list[float]) -> list[float]:
    """The admitted rate of each round, the limiter's buckets full at t = 0."""
    limiter = GroupLimiter(1, np.array([False]))
    limiter.set_limits(np.array([[LIMIT_MSGS_PER_S]]), 0.0, INTERVAL_S)
    now_s, rates = 0.0, []
    for length_s, demand in zip(lengths_s, demands_msgs_per_s, strict=True):
        now_s += length_s
        rates.append(float(limiter.admit(np.array([demand]), MSG_BYTES, length_s, now_s).admitted[0, 0]))
    return rates


@settings(max_examples=200, deadline=None)
@given(round_lengths_s)
def test_a_saturated_group_is_admitted_at_its_limit_however_late_or_early_its_rounds(lengths_s):
    # after the first round, which spends the full bucket: a late round admits its whole length's tokens (with the
    # bucket capped at one interval it admitted 20 * 0.2 / 0.3 = 13.3 msgs/s in a round 0.3 s long)
    rates = admitted_rates(lengths_s, [10 * LIMIT_MSGS_PER_S] * len(lengths_s))
    assert rates[1:] == pytest.approx([LIMIT_MSGS_PER_S] * (len(lengths_s) - 1), rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(round_lengths_s, st.data())
def test_what_is_admitted_never_passes_the_token_bucket_bound(lengths_s, data):
    # whatever the demand and the rounds' lengths: at most one bucket (one interval) plus the limit over the time
    demands = data.draw(st.lists(st.sampled_from([0.0, 5.0, 19.0, 40.0, 1e6]), min_size=len(lengths_s),
                                 max_size=len(lengths_s)))  # fmt: skip
    admitted_msgs = np.cumsum(np.array(admitted_rates(lengths_s, demands)) * lengths_s)
    bound_msgs = LIMIT_MSGS_PER_S * (INTERVAL_S + np.cumsum(lengths_s))
    assert np.all(admitted_msgs <= bound_msgs * (1 + 1e-9))
