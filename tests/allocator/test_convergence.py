"""Convergence of the cooperative allocation: 2-5 in-process BrokerNodes sharing one group's quota.

Every round each node admits its demand, publishes its report, receives the others' reports (all of them
over a perfect channel, or each delivery dropped with probability `loss` by a seeded numpy RNG), cleans up
and allocates: the lockstep order. Unless a test says otherwise reports use `threshold_pct=0` (every change
is reported), so what is measured is the policy and not the suppression threshold's dead band; the other
settings are NodeSettings' defaults (force_every 5, stale after 10 rounds, max report age 2 rounds).

The reference is the max-min fair split `F` of the quota over the demands (`waterfill.max_min_fair`), and
"settled within tol" means every broker's usage is within `tol` of `F` in every round from then to the end.
The rounds-to-settle bounds are what was measured (in the comments) plus a margin.

What converges to what (measured, quota 100):
- `fair-share` reaches the max-min split from any start; with demand in the reports in 1-2 rounds, without
  it a throttled broker may only ask for `limit * (1 + headroom)`, so a climb takes several rounds.
- `pip82-steal` reaches it from these starts, but is not max-min fair by construction: a broker only steals
  from its paired broker (k-th lowest with k-th highest usage), so the unpaired median of an odd count, or
  throttled brokers paired with each other, can stay short of their share (see the last tests).
- `pip82-proportional` keeps every broker's usage share once everybody is throttled: any split of the whole
  quota among throttled brokers is a fixed point. From an equal start (everybody throttled at the equal
  share) it reaches max-min; from a cold start (everybody at the full quota) it keeps the split of the
  first round, proportional to min(demand, quota); from PIP-82's 80/20 with broker-2 wanting more it
  stays at 80/20 forever, which is the flaw PIP-82's stealing is there to fix.
"""

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import policies
from allocator.node.broker_node import MIN_LIMIT, BrokerNode
from allocator.node.node_settings import NodeSettings
from allocator.policies.waterfill import max_min_fair

QUOTA = 100.0
T0 = 1000.0
HEADROOM = 0.1  # fair-share's default `headroom`


@dataclass(frozen=True)
class Run:
    usage: np.ndarray  # [rounds, brokers]: admitted rate of each round
    limit: np.ndarray  # [rounds, brokers]: the limit after that round's allocation
    expired: int  # entries expired over the run, all nodes together


def simulate(policy, phases, *, quota=QUOTA, loss=0.0, seed=0, **settings_kw) -> Run:
    """Run `phases` = [(rounds, demand per broker), ...] in lockstep; one group, one dimension."""
    n_brokers = len(phases[0][1])
    node_settings = NodeSettings(
        dimensions=("publish_msgs_per_s",), policy=policies.bind(policy), **({"threshold_pct": 0.0} | settings_kw)
    )
    nodes = [BrokerNode(f"b{i}", np.array([1]), np.array([[quota]]), node_settings) for i in range(n_brokers)]
    rng = np.random.default_rng(seed)
    usage, limit, expired, now = [], [], 0, T0
    for rounds, demand in phases:
        for _ in range(rounds):
            outboxes = []
            for node, wanted in zip(nodes, demand, strict=True):
                traffic = node.admit(np.array([wanted], dtype=float), np.array([100.0]), now)
                outboxes.append(node.build_reports(traffic, now))
            usage.append([node.table.usage[0, 0, 0] for node in nodes])
            for j, node in enumerate(nodes):
                sent = [payload for i, outbox in enumerate(outboxes) if i != j for _, payload in outbox.payloads]
                dropped = rng.random(len(sent)) < loss
                node.receive([payload for payload, drop in zip(sent, dropped, strict=True) if not drop], now)
                expired += node.cleanup(now)
                node.allocate()
            limit.append([node.limit[0, 0] for node in nodes])
            now += node_settings.interval_s
    return Run(np.array(usage), np.array(limit), expired)


def fair_split(demand, quota=QUOTA) -> np.ndarray:
    return max_min_fair(np.array([quota]), np.array([demand], dtype=float))[0]


def settled_at(usage: np.ndarray, target: np.ndarray, tol: float) -> int | None:
    """First round (of `usage`) from which every broker stays within `tol` of `target`; None if never."""
    bad = np.flatnonzero(np.abs(usage - target).max(axis=1) > tol)
    if len(bad) == 0:
        return 0
    return int(bad[-1]) + 1 if bad[-1] + 1 < len(usage) else None


def converged_at(usage: np.ndarray, target: np.ndarray, tol: float, window: int = 3) -> int | None:
    """The analysis' definition: first round from which `window` consecutive rounds are within `tol`."""
    ok = np.abs(usage - target).max(axis=1) <= tol
    return next((k for k in range(len(ok) - window + 1) if ok[k : k + window].all()), None)


# Each case: the warm-up phase (or None for a cold start, every broker at the full quota), then the demand.
CASES = {
    # PIP-82's example: limits settle at 80/20, then broker-2 wants as much as broker-1 -> 50/50
    "pip82-80/20-then-equal": ((10, (80.0, 20.0)), (80.0, 80.0)),
    "80/20-after-50/50": ((10, (100.0, 100.0)), (80.0, 20.0)),
    "10/50/30-under-100": ((10, (100.0, 100.0, 100.0)), (10.0, 50.0, 30.0)),
    "cold-200/10/30/60": (None, (200.0, 10.0, 30.0, 60.0)),
    "5-brokers-after-equal": ((10, (100.0,) * 5), (5.0, 100.0, 40.0, 40.0, 20.0)),
}
ROUNDS = 30  # after the shift


def phases_of(case: str) -> tuple[list, int]:
    warm, demand = CASES[case]
    phases = ([warm] if warm else []) + [(ROUNDS, demand)]
    return phases, (warm[0] if warm else 0)


MAX_MIN = "max-min"
# (policy, report_demand, case, what it converges to, rounds to settle within 1% of quota: bound)
SETTLES = [
    ("pip82-steal", False, "pip82-80/20-then-equal", MAX_MIN, 8),  # measured 5
    ("pip82-steal", False, "80/20-after-50/50", MAX_MIN, 5),  # 3
    ("pip82-steal", False, "10/50/30-under-100", MAX_MIN, 4),  # 2
    ("pip82-steal", False, "cold-200/10/30/60", MAX_MIN, 10),  # 7
    ("pip82-steal", False, "5-brokers-after-equal", MAX_MIN, 4),  # 2
    ("fair-share", False, "pip82-80/20-then-equal", MAX_MIN, 14),  # 10
    ("fair-share", False, "80/20-after-50/50", MAX_MIN, 8),  # 5
    ("fair-share", False, "10/50/30-under-100", MAX_MIN, 8),  # 5
    ("fair-share", False, "cold-200/10/30/60", MAX_MIN, 3),  # 1
    ("fair-share", False, "5-brokers-after-equal", MAX_MIN, 6),  # 4
    ("fair-share", True, "pip82-80/20-then-equal", MAX_MIN, 2),  # 1
    ("fair-share", True, "80/20-after-50/50", MAX_MIN, 2),  # 1
    ("fair-share", True, "10/50/30-under-100", MAX_MIN, 2),  # 1
    ("fair-share", True, "cold-200/10/30/60", MAX_MIN, 2),  # 1
    ("fair-share", True, "5-brokers-after-equal", MAX_MIN, 3),  # 2
    # stuck where PIP-82 starts: both throttled, residual 0, nothing moves (broker-2 wants 80, gets 20)
    ("pip82-proportional", False, "pip82-80/20-then-equal", (80.0, 20.0), 0),  # 0
    ("pip82-proportional", False, "80/20-after-50/50", MAX_MIN, 5),  # 3
    ("pip82-proportional", False, "10/50/30-under-100", MAX_MIN, 4),  # 2
    # cold start: round 1 admits min(demand, quota) = 100/10/30/60, the cut keeps those proportions
    ("pip82-proportional", False, "cold-200/10/30/60", (50.0, 5.0, 15.0, 30.0), 2),  # 1
    ("pip82-proportional", False, "5-brokers-after-equal", MAX_MIN, 4),  # 2
]


def _id(entry) -> str:
    policy, report_demand, case, *_ = entry
    return f"{policy}{'+demand' if report_demand else ''}:{case}"


@pytest.mark.parametrize("policy, report_demand, case, target, bound", SETTLES, ids=map(_id, SETTLES))
def test_perfect_channel_settles_on_the_expected_split(policy, report_demand, case, target, bound):
    phases, start = phases_of(case)
    run = simulate(policy, phases, report_demand=report_demand)
    expected = fair_split(phases[-1][1]) if target == MAX_MIN else np.array(target)
    usage, limit = run.usage[start:], run.limit[start:]
    settled = settled_at(usage, expected, tol=0.01 * QUOTA)
    assert settled is not None and settled <= bound, f"settled at {settled}, final usage {usage[-1]}"
    np.testing.assert_allclose(usage[-1], expected, atol=1e-6)
    assert (run.limit >= MIN_LIMIT).all()

    # once settled the group stays within its quota: usage always; the limits handed out, per policy
    after = slice(settled + 1, None)  # the first settled round's limits may still carry the last step
    # (pip82-steal approaches the quota from above: its overshoot halves every round, 100.47 at worst)
    assert usage[after].sum(axis=1).max() <= QUOTA * (1.01 if policy == "pip82-steal" else 1.0) + 1e-6
    limits_total = limit[after].sum(axis=1).max()
    if policy == "pip82-proportional" or report_demand:
        # every view is the same over a perfect channel, and these split exactly the quota
        assert limits_total <= QUOTA + 1e-6
    elif policy == "fair-share":
        # a broker at its own limit wants `limit * (1 + headroom)` (measured at most 102.5)
        assert limits_total <= QUOTA * (1 + HEADROOM)
    # pip82-steal is not conservative in its limits: a broker using exactly its limit cannot be told from
    # a throttled one, so at 80/20 broker-2 (wanting 20) steals up to 50 every other round and the limits
    # add up to 130 while usage stays at 100 (measured; rises of demand then overshoot by one steal).


def test_proportional_from_a_cold_start_keeps_the_demand_proportional_split():
    """Any split of the whole quota among throttled brokers is a fixed point of pip82-proportional."""
    demand = np.array([5.0, 100.0, 40.0, 40.0, 20.0])
    run = simulate("pip82-proportional", [(ROUNDS, tuple(demand))])
    proportional = QUOTA * demand / demand.sum()  # 2.44/48.78/19.51/19.51/9.76, max-min is 5/25/25/25/20
    assert settled_at(run.usage, proportional, tol=0.01 * QUOTA) <= 2  # measured 1
    assert np.abs(run.usage[-1] - fair_split(demand)).max() > 0.2 * QUOTA


def test_steal_from_a_cold_start_with_an_odd_count_stays_short_of_max_min_within_5_percent():
    """Five brokers at the full quota: after the first cut the median broker (wanting 100) is unpaired,
    so nothing lifts it to its max-min share of 25 (measured: 23.27, others 25.87/25.87)."""
    demand = (5.0, 100.0, 40.0, 40.0, 20.0)
    run = simulate("pip82-steal", [(40, demand)])
    fair = fair_split(demand)
    assert settled_at(run.usage, fair, tol=0.05 * QUOTA) <= 8  # measured 3
    assert run.usage[10:].sum(axis=1).max() <= QUOTA + 1e-6


def test_default_suppression_still_converges_within_5_percent():
    """With threshold_pct 10 a change under 10% is not reported, so views lag by up to that much."""
    phases, start = phases_of("pip82-80/20-then-equal")
    for policy, bound in (("pip82-steal", 5), ("fair-share", 12)):  # measured 3 and 9
        run = simulate(policy, phases, threshold_pct=10.0)
        settled = settled_at(run.usage[start:], fair_split(phases[-1][1]), tol=0.05 * QUOTA)
        assert settled is not None and settled <= bound, (policy, settled)


def test_without_demand_a_throttled_broker_climbs_at_most_headroom_per_round():
    """fair-share without demand: a broker held at 5.5 that now wants 100 grows by `headroom` (10%) a
    round, so reaching 49.5 (1% of 50) takes log(9) / log(1.1) = 23 rounds; with demand it takes 1."""
    phases = [(10, (100.0, 5.0)), (40, (100.0, 100.0))]
    without = simulate("fair-share", phases)
    with_demand = simulate("fair-share", phases, report_demand=True)
    growth = without.limit[11:20, 1] / without.limit[10:19, 1]
    np.testing.assert_allclose(growth, 1 + HEADROOM)
    assert settled_at(without.usage[10:], np.array([50.0, 50.0]), tol=1.0) == 24  # measured 24 (limits lead by 1)
    assert settled_at(with_demand.usage[10:], np.array([50.0, 50.0]), tol=1.0) == 1


# -- a lossy channel -------------------------------------------------------------------------------

LOSS = 0.2
SEEDS = range(5)
# (policy, case, bound on rounds to converge within 5% of quota, the analysis' W = 3 definition)
LOSSY = [
    ("pip82-steal", "pip82-80/20-then-equal", 20),  # measured max 14 over 30 seeds
    ("pip82-steal", "80/20-after-50/50", 7),  # 4
    ("pip82-steal", "10/50/30-under-100", 8),  # 5
    ("fair-share", "pip82-80/20-then-equal", 18),  # 12
    ("fair-share", "80/20-after-50/50", 10),  # 7
    ("fair-share", "10/50/30-under-100", 10),  # 7
    ("fair-share", "cold-200/10/30/60", 10),  # 7
]


@pytest.mark.parametrize("policy, case, bound", LOSSY, ids=[f"{p}:{c}" for p, c, _ in LOSSY])
def test_twenty_percent_loss_still_converges_within_5_percent(policy, case, bound):
    """force_every=2 here: with the default 5 and stale_after 10 rounds an entry gets two refreshes per
    stale window, so at 20% loss it expires with p = 4% per pair and window, and the broker that lost it
    takes the quota for itself (measured over 30 seeds: usage up to 130% of quota, and as few as 55% of the
    rounds after converging within 5%). With 2, five refreshes per window. pip82-steal is only tested with
    2-3 brokers: with 4-5 it can stall (next test)."""
    phases, start = phases_of(case)
    fair = fair_split(phases[-1][1])
    for seed in SEEDS:
        run = simulate(policy, phases, loss=LOSS, seed=seed, force_every=2)
        usage = run.usage[start:]
        converged = converged_at(usage, fair, tol=0.05 * QUOTA)
        assert converged is not None and converged <= bound, (seed, converged, usage[-1])
        within = np.abs(usage[converged:] - fair).max(axis=1) <= 0.05 * QUOTA
        assert within.mean() >= 0.9, (seed, within.mean())  # measured: 0.97 at worst over 30 seeds
        assert usage[converged:].sum(axis=1).max() <= 1.15 * QUOTA  # measured 106.6 at worst


def test_steal_under_loss_can_stall_where_throttled_brokers_are_paired_with_each_other():
    """Seed 2, cold 200/10/30/60 (max-min 30/10/30/30): the views diverge early and steal comes to rest at
    19.3/10/19.3/51.4 (measured). The dominant broker (wanting 60) is paired with the idle one (10) and
    yields only to `quota - others' usage`, which is what it has; the two throttled brokers are tied with
    each other, hence unpaired, and steal from nobody. A fixed point, not a slow convergence."""
    demand = CASES["cold-200/10/30/60"][1]
    fair = fair_split(demand)
    run = simulate("pip82-steal", [(40, demand)], loss=LOSS, seed=2, force_every=2)
    assert converged_at(run.usage, fair, tol=0.05 * QUOTA) is None
    rest = run.usage[-1]
    np.testing.assert_allclose(run.usage[-10:], np.broadcast_to(rest, (10, 4)), atol=1e-3)
    np.testing.assert_allclose(rest.sum(), QUOTA, atol=1e-3)
    dominant = int(np.argmax(rest))
    assert rest[dominant] > fair[dominant] + 0.05 * QUOTA
    starved = [b for b in range(4) if b != dominant and demand[b] > rest[b] and rest[b] < fair[b] - 0.05 * QUOTA]
    assert len(starved) == 2 and rest[starved[0]] == pytest.approx(rest[starved[1]])


# -- property: fair-share reaches the water-filling split ------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    quota=st.integers(10, 1000),
    fractions=st.lists(st.floats(0.01, 2.0), min_size=2, max_size=5),
    report_demand=st.booleans(),
    warm=st.lists(st.floats(0.05, 2.0), min_size=5, max_size=5),
)
def test_fair_share_converges_to_the_water_filling_split_within_30_rounds(quota, fractions, report_demand, warm):
    """From a cold start either way; after a shift of demand only with demand in the reports, since
    without it a broker grows by at most `headroom` a round (previous tests): from 0.05 to 2 of the quota
    that is 39 rounds."""
    quota = float(quota)
    demand = tuple(round(f * quota, 3) for f in fractions)
    phases = [(30, demand)]
    if report_demand:
        phases.insert(0, (5, tuple(round(f * quota, 3) for f in warm[: len(demand)])))
    run = simulate("fair-share", phases, quota=quota, report_demand=report_demand)
    error = np.abs(run.usage[-5:] - fair_split(demand, quota)).max()  # the last 5 of the 30 rounds
    assert error <= 0.02 * quota
