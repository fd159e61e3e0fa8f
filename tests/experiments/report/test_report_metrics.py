"""Each report metric on small hand-built tables whose answers are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from allocator.policies.waterfill import max_min_fair
from experiments.report import metrics

from .tables import event_row, events_frame, messages_frame, messages_row, rounds_frame, rounds_row

pytestmark = pytest.mark.spark


def by_key(frame, *key_columns):
    """Collect a small DataFrame into {key: row dict}."""
    return {tuple(row[c] for c in key_columns): row.asDict() for row in frame.collect()}


def group_rounds_of(spark, rows):
    return metrics.group_rounds(metrics.round_cells(rounds_frame(spark, rows)))


def broker_rounds(spark, rows):
    """Each broker's cell of each round (`round_cells`' arrays, one row each), with its round's keys and its fair
    share `fair`."""
    cells = metrics.round_cells(rounds_frame(spark, rows))
    each = cells.select(*metrics.GROUP_ROUND, metrics.FAIR_LEVEL, F.inline("cells"))
    return each.withColumn("fair", metrics.fair_share(F.col("demand")))


def test_water_filling_gives_the_max_min_fair_split_round_by_round(spark):
    rows = [
        # round 0: Q=100 over demands 80/80/10 -> 45/45/10
        rounds_row(0, "a", usage=45, demand=80),
        rounds_row(0, "b", usage=45, demand=80),
        rounds_row(0, "c", usage=10, demand=10),
        # round 1: c is gone; 80/80 -> 50/50
        rounds_row(1, "a", usage=50, demand=80),
        rounds_row(1, "b", usage=50, demand=80),
        # round 2: demands under the quota -> everyone gets its demand
        rounds_row(2, "a", usage=20, demand=20),
        rounds_row(2, "b", usage=30, demand=30),
        # unlimited quota -> the demands
        rounds_row(0, "a", usage=5, demand=70, quota=math.inf, group="free"),
        rounds_row(0, "b", usage=5, demand=500, quota=math.inf, group="free"),
    ]
    fair = by_key(broker_rounds(spark, rows), "group", "round", "broker")
    assert {key: row["fair"] for key, row in fair.items()} == pytest.approx(
        {
            ("g", 0, "a"): 45.0,
            ("g", 0, "b"): 45.0,
            ("g", 0, "c"): 10.0,
            ("g", 1, "a"): 50.0,
            ("g", 1, "b"): 50.0,
            ("g", 2, "a"): 20.0,
            ("g", 2, "b"): 30.0,
            ("free", 0, "a"): 70.0,
            ("free", 0, "b"): 500.0,
        }
    )


def test_the_fair_reference_is_the_allocators_water_filling_on_random_rounds(spark):
    """The report's window-function water-filling against `max_min_fair`, on 400 random rounds of 1-9 brokers:
    ties, zero and negative wants, a quota of zero, an unlimited one, wants that fit and wants that do not."""
    rng = np.random.default_rng(7)
    rows, expected = [], {}
    for case in range(400):
        brokers = int(rng.integers(1, 10))
        wants = rng.choice([0.0, -1.0, 10.0, 25.0, *rng.uniform(0, 100, 6).round(1)], size=brokers)
        quota = float(rng.choice([0.0, math.inf, *rng.uniform(1, 400, 4).round(1)]))
        group = f"case-{case}"
        shares = max_min_fair(np.array([quota]), wants[None, :])[0]
        for b, (want, share) in enumerate(zip(wants.tolist(), shares.tolist(), strict=True)):
            rows.append(rounds_row(0, f"b{b}", usage=0.0, demand=want, quota=quota, group=group))
            expected[(group, f"b{b}")] = share
    fair = by_key(broker_rounds(spark, rows), "group", "broker")
    assert {key: row["fair"] for key, row in fair.items()} == pytest.approx(expected, rel=1e-12, abs=1e-9)


def test_rounds_that_share_the_sort_keys_low_bits_stay_apart(spark):
    """Rounds 3 and 3 + 2**ROUND_BITS give the same `ROUND_KEY` (the round wraps around in its low bits): each
    is still its own round, with its own sums and fair split, as are the rounds around them."""
    wrapped = 3 + 2**metrics.ROUND_BITS
    rows = [
        rounds_row(3, "a", usage=10, demand=80),
        rounds_row(3, "b", usage=20, demand=10),
        rounds_row(wrapped, "a", usage=40, demand=30),
        rounds_row(wrapped, "b", usage=50, demand=90),
        rounds_row(wrapped + 1, "a", usage=1, demand=1),
    ]
    per_round = by_key(group_rounds_of(spark, rows), "round")
    assert {r: (row["usage"], row["demand"], row["brokers"]) for (r,), row in per_round.items()} == {
        3: (30.0, 90.0, 2),
        wrapped: (90.0, 120.0, 2),
        wrapped + 1: (1.0, 1.0, 1),
    }
    fair = by_key(broker_rounds(spark, rows), "round", "broker")
    assert {key: row["fair"] for key, row in fair.items()} == {
        (3, "a"): 80.0,  # Q = 100 over 80/10: 80 and 10 (both fit below the level)
        (3, "b"): 10.0,
        (wrapped, "a"): 30.0,  # over 30/90: 30 and 70
        (wrapped, "b"): 70.0,
        (wrapped + 1, "a"): 1.0,
    }


def test_every_dimension_keeps_its_name_and_its_own_rounds(spark):
    """The rows travel with a known dimension's code (`DIMENSION_CODE`) and any other name as it is: each
    dimension is its own round, named as it was written."""
    rows = [
        rounds_row(0, "a", usage=10, demand=80),
        rounds_row(0, "b", usage=20, demand=10),
        rounds_row(0, "a", usage=1, demand=2, dimension="dispatch_bytes_per_s"),
        rounds_row(0, "a", usage=3, demand=4, dimension="storage_bytes"),  # not a quota dimension the allocator has
        rounds_row(0, "b", usage=5, demand=6, dimension="storage_bytes"),
    ]
    per_round = by_key(group_rounds_of(spark, rows), "dimension")
    assert {dim: (row["usage"], row["demand"], row["brokers"]) for (dim,), row in per_round.items()} == {
        "publish_msgs_per_s": (30.0, 90.0, 2),
        "dispatch_bytes_per_s": (1.0, 2.0, 1),
        "storage_bytes": (8.0, 10.0, 2),
    }


def test_a_duplicated_row_is_summed_not_an_error(spark):
    rows = [rounds_row(0, "a", usage=10, demand=30), rounds_row(0, "a", usage=10, demand=30)]
    [row] = broker_rounds(spark, rows).collect()
    assert (row["usage"], row["demand"], row["fair"]) == (20.0, 60.0, 60.0)


# Cases of one round each, computed in one Spark job (a group per case): name -> (quota, usages, demands, expected).
ROUND_CASES = {
    # Jain of x_b = U_b / F_b and the fairness error sum |U_b - F_b| / Q
    "equal": (100, (50, 50), (50, 50), {"jain": 1.0, "fairness_error": 0.0}),
    "one takes all": (100, (100, 0), (50, 50), {"jain": 0.5, "fairness_error": 1.0}),  # x = 2, 0: Jain = 1/n
    "unequal": (100, (30, 10), (50, 50), {"jain": 0.8, "fairness_error": 0.6}),  # x = .6, .2: .64 / (2 * .4)
    "water-filled": (100, (45, 45, 10), (80, 80, 10), {"jain": 1.0, "fairness_error": 0.0}),  # F = 45/45/10
    "no fair share": (100, (50, 50, 5), (50, 50, 0), {"jain": 1.0, "fairness_error": 0.05}),  # F_c = 0: not in Jain
    "all idle": (100, (0, 0), (50, 50), {"jain": None, "fairness_error": 1.0}),  # every x = 0: undefined
    "nothing wanted": (100, (0, 0), (0, 0), {"jain": None, "fairness_error": 0.0}),  # no F_b > 0: undefined
    # target T = min(Q, D), overshoot max(0, U/Q - 1), utilization U / T
    "over": (100, (60, 60), (75, 75), {"target": 100, "overshoot": 0.2, "utilization": 1.2}),
    "under": (100, (20, 20), (25, 25), {"target": 50, "overshoot": 0.0, "utilization": 0.8}),
    "zero target": (100, (0, 0), (0, 0), {"target": 0, "overshoot": 0.0, "utilization": None}),
    "zero quota": (0, (5, 0), (5, 0), {"target": 0, "overshoot": None, "utilization": None}),
    # unlimited: T = D, no overshoot, F_b = D_b, no fairness error
    "unlimited": (
        math.inf,
        (30, 0),
        (40, 20),
        {"target": 60, "overshoot": 0.0, "utilization": 0.5, "fairness_error": None, "jain": 0.5},
    ),
}


@pytest.fixture(scope="module")
def round_results(spark):
    rows = [
        rounds_row(0, f"b{i}", usage=u, demand=d, quota=quota, group=name)
        for name, (quota, usages, demands, _) in ROUND_CASES.items()
        for i, (u, d) in enumerate(zip(usages, demands, strict=True))
    ]
    return {row["group"]: row.asDict() for row in group_rounds_of(spark, rows).collect()}


@pytest.mark.parametrize("name", ROUND_CASES)
def test_round_metrics(round_results, name):
    _, usages, demands, expected = ROUND_CASES[name]
    row = round_results[name]
    assert (row["usage"], row["demand"], row["brokers"]) == (sum(usages), sum(demands), len(usages))
    for metric, value in expected.items():
        assert row[metric] == (None if value is None else pytest.approx(value)), metric


def test_a_dimension_held_by_another_targets_what_the_tightest_admits(spark):
    """Messages of 2,000 bytes: 90 msgs/s wanted on a quota of 80 admit 8/9 of the demand, 160,000 B/s, under a
    bytes quota of 200,000 that alone would admit all 180,000. A group held at its messages quota uses all it
    can in bytes (utilization 1); the bytes target without the messages quota would leave it at 0.89 for ever."""
    bytes_dimension = {"dimension": "publish_bytes_per_s"}
    rows = [
        rounds_row(0, "a", usage=60, demand=60 * 9 / 8, quota=80),
        rounds_row(0, "b", usage=20, demand=20 * 9 / 8, quota=80),
        rounds_row(0, "a", usage=120_000, demand=135_000, quota=200_000, **bytes_dimension),
        rounds_row(0, "b", usage=40_000, demand=45_000, quota=200_000, **bytes_dimension),
        rounds_row(0, "a", usage=10, demand=10, quota=100, group="alone"),  # one dimension, under its quota
    ]
    result = by_key(group_rounds_of(spark, rows), "group", "dimension")
    messages, bytes_ = result[("g", "publish_msgs_per_s")], result[("g", "publish_bytes_per_s")]
    assert (messages["target"], messages["utilization"]) == (pytest.approx(80.0), pytest.approx(1.0))
    assert (bytes_["target"], bytes_["utilization"]) == (pytest.approx(160_000.0), pytest.approx(1.0))
    assert result[("alone", "publish_msgs_per_s")]["target"] == 10.0


GROUP_ROUNDS_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("group", T.StringType()),
        T.StructField("dimension", T.StringType()),
        T.StructField("round", T.IntegerType()),
        T.StructField("quota", T.DoubleType()),
        T.StructField("usage", T.DoubleType()),
        T.StructField("target", T.DoubleType()),
        T.StructField("jain", T.DoubleType()),
    ]
)


def series(group: str, pattern: str, quota: float = 100.0) -> list[tuple]:
    """One group's rounds from a pattern, a character per round from round 0: settled or not.

    `+` settled (U = T), `-` off target (U = T - 10 > 0.05 Q), `u` on target but unfair (Jain 0.9),
    `n` on target with an undefined Jain (counts as fair), `.` no row for that round.
    """
    target = 80.0
    usage = {"+": target, "-": target - 10, "u": target, "n": target}
    jain = {"+": 1.0, "-": 1.0, "u": 0.9, "n": None}
    return [
        ("r1", group, "publish_msgs_per_s", r, quota, usage[c], target, jain[c])
        for r, c in enumerate(pattern)
        if c != "."
    ]


def converge(spark, rows, events):
    """{(group, event round, kind): rounds_to_converge}."""
    group_rounds = spark.createDataFrame(rows, GROUP_ROUNDS_SCHEMA).withColumn(metrics.GROUP_KEY, metrics.group_key())
    result = metrics.convergence(group_rounds, events_frame(spark, events))
    return {(row["group"], row["round"], row["kind"]): row["rounds_to_converge"] for row in result.collect()}


def test_rounds_to_converge_counts_the_first_settled_window_and_ignores_a_relapse(spark):
    rows = series("relapse", "+++--++++++") + series("late", "-++-+++-++--")
    events = [event_row(3, "crash", "broker-1"), event_row(8, "channel")]
    assert converge(spark, rows, events) == {
        ("relapse", 0, "start"): 0,  # rounds 0-2 settled; the relapse at 3-4 does not undo it
        ("relapse", 3, "crash"): 2,  # 5-7
        ("relapse", 8, "channel"): 0,  # 8-10
        ("late", 0, "start"): 4,  # 1-2 is only two rounds; 4-6 is the first window of three
        ("late", 3, "crash"): 1,
        ("late", 8, "channel"): None,  # 8-9 then off target: never converged before the end
    }


def test_an_unfair_round_breaks_the_window_and_an_undefined_jain_does_not(spark):
    rows = series("unfair", "+u++++") + series("idle", "nnn")
    assert converge(spark, rows, []) == {("unfair", 0, "start"): 2, ("idle", 0, "start"): 0}


def test_a_missing_round_breaks_the_window(spark):
    rows = series("gap", "++.+++")
    assert converge(spark, rows, []) == {("gap", 0, "start"): 3}


def test_an_event_after_the_last_window_never_converges(spark):
    rows = series("g", "++++++")
    events = [event_row(4, "leave", "broker-2"), event_row(99, "channel")]
    assert converge(spark, rows, events) == {("g", 0, "start"): 0, ("g", 4, "leave"): None, ("g", 99, "channel"): None}


def test_quota_and_demand_events_apply_only_to_the_group_they_name(spark):
    rows = series("a", "++++") + series("b", "++++")
    events = [
        event_row(0, "start"),  # logged by the runtime: not doubled
        event_row(1, "quota", "a", {"publish_msgs_per_s": 150}),
        event_row(1, "demand", "broker-2", {"group": "b", "msgs_per_s": 20}),
        event_row(2, "crash", "broker-1"),
    ]
    assert converge(spark, rows, events) == {
        ("a", 0, "start"): 0,
        ("b", 0, "start"): 0,
        ("a", 1, "quota"): 0,
        ("b", 1, "demand"): 0,
        ("a", 2, "crash"): None,
        ("b", 2, "crash"): None,
    }


def test_unlimited_group_converges_on_demand(spark):
    rows = series("free", "+++", quota=math.inf) + series("starved", "---", quota=math.inf)
    assert converge(spark, rows, []) == {("free", 0, "start"): 0, ("starved", 0, "start"): None}


def test_group_summary_peak_and_last_quarter_means(spark):
    # 8 rounds: the last quarter is rounds 6 and 7. Usage 120, 100, ..., then 40 and 60 of a target 100.
    usages = [120, 100, 100, 100, 100, 100, 40, 60]
    rows = [rounds_row(r, "a", usage=u, demand=100) for r, u in enumerate(usages)]
    [summary] = metrics.group_summary(group_rounds_of(spark, rows)).collect()
    assert summary["peak_overshoot"] == pytest.approx(0.2)
    assert summary["rounds_over_quota"] == pytest.approx(1 / 8)  # 120 > 105; 100 is not over
    assert summary["utilization"] == pytest.approx(0.5)
    assert summary["jain"] == pytest.approx(1.0)
    assert summary["fairness_error"] == pytest.approx(0.5)  # |40-100| and |60-100| over Q = 100
    assert summary["report_bytes_per_round"] == 10.0 and summary["rounds"] == 8


def test_each_run_has_its_own_last_quarter(spark):
    # r1: rounds 0-7 (last quarter 6-7), usage 40 there; r2: rounds 10-13 (last quarter 13 alone), usage 80
    # there. A quarter taken over both runs (rounds 0-13: from round 10) would mix them.
    rows = [rounds_row(r, "a", usage=40 if r >= 6 else 100, demand=100) for r in range(8)]
    rows += [rounds_row(r, "a", usage=80 if r == 13 else 100, demand=100, run_id="r2") for r in range(10, 14)]
    summary = by_key(metrics.group_summary(group_rounds_of(spark, rows)), "run_id")
    assert summary[("r1",)]["utilization"] == pytest.approx(0.4) and summary[("r1",)]["rounds"] == 8
    assert summary[("r2",)]["utilization"] == pytest.approx(0.8) and summary[("r2",)]["rounds"] == 4


def test_rounds_over_quota_counts_only_rounds_more_than_5_percent_over(spark):
    # 10 rounds at Q = 100: three over by more than 5% (106, 120, 150), one over by exactly 5% (105, not
    # counted), one just under the quota, five well under -> 3 of 10.
    usages = [106, 120, 150, 105, 99, 50, 50, 50, 50, 50]
    rows = [rounds_row(r, "a", usage=u / 2, demand=80) for r, u in enumerate(usages)]
    rows += [rounds_row(r, "b", usage=u / 2, demand=80) for r, u in enumerate(usages)]
    # an unlimited group is never over, however much it uses; a quota of 0 with usage is
    rows += [rounds_row(r, "a", usage=1e6, demand=1e6, quota=math.inf, group="free") for r in range(4)]
    rows += [rounds_row(r, "a", usage=1 if r == 0 else 0, demand=1, quota=0, group="closed") for r in range(4)]
    group_rounds = group_rounds_of(spark, rows)
    over = by_key(group_rounds.filter("group = 'g'"), "round")
    assert [over[(r,)]["over_quota"] for r in range(10)] == [True, True, True, False, False, *[False] * 5]
    summary = by_key(metrics.group_summary(group_rounds), "group")
    assert summary[("g",)]["rounds_over_quota"] == pytest.approx(0.3)
    assert summary[("free",)]["rounds_over_quota"] == 0.0
    assert summary[("closed",)]["rounds_over_quota"] == pytest.approx(0.25)


def test_starvation_counts_brokers_under_half_their_fair_share_in_the_last_quarter(spark):
    # 8 rounds, Q = 100, demands 80/80/0 -> F = 50/50/0; the last quarter is rounds 6-7.
    # Broker b gets 10 (< 25) in rounds 0-6 and 30 in round 7; c asks for nothing and is never counted.
    rows = []
    for r in range(8):
        rows.append(rounds_row(r, "a", usage=50, demand=80))
        rows.append(rounds_row(r, "b", usage=30 if r == 7 else 10, demand=80))
        rows.append(rounds_row(r, "c", usage=0, demand=0))
    [row] = metrics.group_summary(group_rounds_of(spark, rows)).collect()
    assert (row["fair_share_broker_rounds"], row["starved_broker_rounds"]) == (4, 1)  # a, b x rounds 6-7; b@6


def test_bandwidth_per_round_per_broker_and_per_run(spark):
    rows = [
        messages_row(0, "a", 100, 90, reports_suppressed=2, deliveries_dropped=1),
        messages_row(0, "b", 200, 180, deliveries_lost_transport=2),
        messages_row(1, "a", 300, 270, reports_sent=0, reports_suppressed=4, deliveries_lost_transport=3),
    ]
    messages = messages_frame(spark, rows)
    per_round = by_key(metrics.bandwidth_per_round(messages), "round")
    assert per_round[(0,)]["bytes_published"] == 300 and per_round[(0,)]["bytes_delivered"] == 270
    assert per_round[(1,)]["reports_suppressed"] == 4 and per_round[(0,)]["brokers"] == 2
    per_broker = by_key(metrics.bandwidth_per_broker(messages), "broker")
    assert per_broker[("a",)]["bytes_published_per_round"] == 200.0 and per_broker[("a",)]["reports_suppressed"] == 6
    [run] = metrics.run_bandwidth(metrics.bandwidth_per_round(messages)).collect()
    assert run["bytes_published_per_round"] == 300.0 and run["reports_suppressed_per_round"] == 3.0
    assert (run["deliveries_dropped"], run["deliveries_lost_transport"]) == (1, 5)  # injected, transport: apart
