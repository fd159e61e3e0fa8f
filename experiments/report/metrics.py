"""The report's metrics as Spark transforms: each takes DataFrames and returns one, its final `select` the contract.

Definitions (DESIGN.md, "Analysis (Spark)"), per run, group, quota dimension and round: `Q` quota, `U` sum of
the brokers' usage, `D` sum of their demand, target `T = min(Q, D)`, scaled down to the share of the demand the
group's tightest dimension admits (a group held at its messages quota sends fewer bytes than its bytes quota allows:
`T = D * min over the dimensions of min(1, Q/D)`);
overshoot `max(0, U/Q - 1)`; over quota when `U > 1.05 Q` (an unlimited quota never is), and `rounds_over_quota` the
share of a group's rounds that are; utilization `U / T`; fair reference `F_b` the max-min fair split of `Q` over the
brokers' demands; Jain's index of `x_b = U_b / F_b` over the brokers with `F_b > 0`, `(sum x)^2 / (n sum x^2)`;
fairness error `sum_b |U_b - F_b| / Q`.

Choices where DESIGN.md is silent:

- An unlimited quota (`+inf` in the tables) gives `T = D`, overshoot 0, `F_b = D_b` (so Jain still measures
  whether each broker gets what it asks for), and a null fairness error (there is no quota to normalise by).
  Its convergence tolerance is `0.05 T`, since the literal `0.05 Q` would be infinite.
- A ratio with a zero denominator is null: utilization when `T = 0`, overshoot when `Q = 0`, Jain when no broker
  has `F_b > 0` or every `U_b` is 0. For convergence an undefined Jain counts as fair: there is nothing to share
  and `|U - T|` decides.
- Events: the `events` rows plus a `start` event at round 0 for every run (unless the run logged one). An event
  applies to every group of its run, except `quota` (target: the group) and `demand` (detail: `{"group": ...}`)
  events, which apply only to the group they name.
- Rounds to converge after an event at round `e`: `k = s - e`, where `s >= e` is the first round that starts
  `W = 3` consecutive rounds (all present) each with `|U - T| <= 0.05 Q` and Jain >= 0.95. It may lie after a
  later event (the first settled run of rounds counts, relapses afterwards do not); null when there is none
  before the end of the run.
- Starvation (used by the quality benchmark): in the last quarter of the run, among the (broker, round) rows
  with `F_b > 0` (a broker with demand), those with `U_b < 0.5 F_b`: it gets less than half its fair share.
- Bandwidth per group: `report_bytes` is the group's share of a broker's report, written on each dimension's
  row; per (group, dimension, round) it is summed over brokers, so it is the bytes spent on that group.
"""

from __future__ import annotations

import functools
import math
import operator

from pyspark.sql import Column, DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F

from allocator.wire.report_fields import DIMENSIONS

GROUP = ["run_id", "group", "dimension"]
GROUP_ROUND = [*GROUP, "round"]
BROKER_ROUND = [*GROUP_ROUND, "broker"]
# A 64-bit hash of (run_id, group), the key the per-round rows are partitioned by (`round_cells`).
GROUP_KEY = "group_key"
# The first key they are sorted by: `GROUP_KEY` with its low `ROUND_BITS` bits the round's. Spark's sort compares
# a long prefix of the first key and only on a tie the whole row (strings and all): a group's rows in a run tie
# on `GROUP_KEY` by the hundred, on this key only a round's few brokers do (7.5 million rows: the sort's CPU time
# 15-19 s -> 11-12 s). A round past 2**ROUND_BITS wraps around: the sort is slower, never wrong, since the rows
# are then sorted by the run, group and round themselves.
ROUND_KEY = "round_key"
ROUND_BITS = 20
# A known quota dimension's position in `DIMENSIONS` (from 1; 0 for any other name, which travels as it is): the
# `rounds` rows are shuffled and sorted with it instead of the name: 24 bytes less of each row as Spark holds it (22
# fields, about 250 bytes), though not on disk (LZ4 squeezes the repeated name: 57 bytes a row either way). pip82,
# 7.5 million rows, one report each: the per-round stage's task CPU 30.8 -> 29.1 s.
DIMENSION_CODE = "dimension_code"
FAIR_LEVEL = "fair_level"  # a round's water level: F_b = min(max(0, D_b), level) (`with_fair_share`)

CONVERGENCE_WINDOW = 3  # W: consecutive rounds that must all be settled
TARGET_TOLERANCE = 0.05  # |U - T| <= 0.05 Q
MIN_JAIN = 0.95
STARVED_BELOW = 0.5  # a broker is starved in a round when U_b < 0.5 F_b
OVER_QUOTA_TOLERANCE = 0.05  # a round is over quota when U > (1 + 0.05) Q: the report tolerance Pulsar allows

# a group's scores over a run (`group_summary`), in the order of its table
GROUP_SCORES = (
    "peak_overshoot",
    "rounds_over_quota",
    "utilization",
    "jain",
    "fairness_error",
    "report_bytes_per_round",
    "rounds",
)
STARVATION_COUNTS = ("fair_share_broker_rounds", "starved_broker_rounds")  # `group_summary`'s, after the scores
_SUMMED = ["usage", "demand", "limit", "throttled_s", "report_bytes"]  # summed over a round's rows
_CELL = ["usage", "demand"]  # a broker's measures in a round's array (`round_cells`)


def round_cells(
    rounds: DataFrame, more: list[Column] | tuple[Column, ...] = (), partitions: int | None = None
) -> DataFrame:
    """Per run, group, dimension and round: `cells`, its brokers' rows as an array of (broker, usage, demand) in the
    brokers' order, with a broker's duplicated rows summed into one, and `fair_level` (`FAIR_LEVEL`), the level of the
    max-min fair split that gives each broker its fair reference F_b (`fair_share`); the round's `t_s` and `quota` (the
    largest a broker logged: in realtime a change reaches brokers a tick apart); `usage`, `demand`, `limit`,
    `throttled_s` and `report_bytes` summed over its rows; the aggregates `more` (the quota telemetry's) over its rows;
    and `group_key` (`GROUP_KEY`), which the rows are partitioned by, into `partitions` (default: the session's shuffle
    partitions), and `round_key` (`ROUND_KEY`), which they are sorted by.

    One aggregation of the `rounds` rows, keyed by the round, and arithmetic on each round's small array: the
    brokers of a group are a handful, its rounds hundreds of thousands at PIP-82's size. The rows are shuffled
    once, by group (`GROUP_KEY`), sorted, and aggregated as they stream past (`spark.sql.execution.
    replaceHashWithSortAgg`, set by `session.spark_session`): an array per key in a hash map fell back to sorting
    every row anyway, with spills, and then needed a second shuffle for each window by group (7.5 million rows:
    57 s for the aggregation alone against 28 s so). The later windows and aggregations by group
    (`group_rounds`) reuse this partitioning and order instead of shuffling again.
    """
    in_order = [ROUND_KEY, GROUP_KEY, "run_id", "group", "round", DIMENSION_CODE, "dimension"]
    known_dimensions = F.array(*(F.lit(name) for name in DIMENSIONS))
    mask = (1 << ROUND_BITS) - 1
    keyed = (
        rounds.withColumn(GROUP_KEY, group_key())
        .withColumn(
            ROUND_KEY,
            F.col(GROUP_KEY).bitwiseAND(F.lit(~mask)).bitwiseOR(F.col("round").cast("long").bitwiseAND(mask)),
        )
        .withColumn(DIMENSION_CODE, F.array_position(known_dimensions, F.col("dimension")).cast("int"))
        .withColumn("dimension", F.when(F.col(DIMENSION_CODE) == 0, F.col("dimension")))
    )
    rows = (
        (keyed.repartition(partitions, GROUP_KEY) if partitions else keyed.repartition(GROUP_KEY))
        .sortWithinPartitions(*in_order, "broker")
        .groupBy(*in_order)
        .agg(
            F.collect_list(F.struct("broker", *_CELL)).alias("broker_rows"),
            F.max("t_s").alias("t_s"),
            F.max("quota").alias("quota"),
            *(F.sum(name).alias(name) for name in _SUMMED),
            *more,
        )
    )
    brokers = F.array_distinct(F.col("broker_rows")["broker"])  # a field of each struct: no lambda

    def summed(broker: Column) -> Column:
        mine = F.filter("broker_rows", lambda row: row["broker"] == broker)
        return F.struct(broker.alias("broker"), *(_array_sum(mine, name).alias(name) for name in _CELL))

    unique = F.when(F.size(brokers) == F.size("broker_rows"), F.col("broker_rows")).otherwise(
        F.transform(brokers, summed)
    )
    named = F.when(F.col(DIMENSION_CODE) > 0, F.element_at(known_dimensions, F.col(DIMENSION_CODE))).otherwise(
        F.col("dimension")
    )
    kept = [F.col(name) for name in rows.columns if name not in ("broker_rows", DIMENSION_CODE, "dimension")]
    return with_fair_share(rows.select(*kept, named.alias("dimension"), unique.alias("cells")))


def _array_sum(cells: Column | str, name: str) -> Column:
    """The sum of field `name` over an array of structs."""
    return F.aggregate(cells, F.lit(0.0), lambda total, cell: total + cell[name])


def with_fair_share(rounds: DataFrame) -> DataFrame:
    """`rounds` (one row per round, its brokers in `cells`) with `fair_level` (`FAIR_LEVEL`): the level of
    `allocator.policies.waterfill.max_min_fair` on the round's array, so that F_b is `fair_share` of a cell's
    demand. A column, not a field written into each cell: Spark evaluates an array function's lambda element by
    element, and a pass that rebuilt every cell cost more than the few comparisons `fair_share` repeats.

    `max_min_fair` gives `min(want, level)`, the level being the first candidate a want reaches, with the wants
    in ascending order `w_0 <= ... <= w_{B-1}` and the candidate at position i
    `(Q - w_0 - ... - w_{i-1}) / (B - i)`. The candidates rise up to that position and fall after it, so the
    level is also their maximum: one fold over the sorted wants (when no want reaches its candidate, every want
    is below the maximum, and `min` leaves it whole as the unlimited level would). A test checks the two agree
    on random rounds.
    """
    # The demands in ascending order, a null first (as the 0 it counts for), each counted as `max(0, demand)` as
    # the fold reads it: clamping after sorting gives the order of sorting the clamped wants, without a lambda.
    demands = F.sort_array(F.col("cells")["demand"])
    count = F.size("cells")
    start = F.struct(F.lit(0.0).alias("below"), F.lit(0).alias("index"), F.lit(-math.inf).alias("level"))

    def step(state: Column, demand: Column) -> Column:
        candidate = (F.col("quota") - state["below"]) / (count - state["index"])
        return F.struct(
            (state["below"] + F.greatest(demand, F.lit(0.0))).alias("below"),
            (state["index"] + 1).alias("index"),
            F.greatest(state["level"], candidate).alias("level"),
        )

    return rounds.withColumn(FAIR_LEVEL, F.greatest(F.aggregate(demands, start, step)["level"], F.lit(0.0)))


def fair_share(demand: Column) -> Column:
    """F_b of a broker with `demand` in its round (`with_fair_share`'s level): its demand, up to the level."""
    return F.least(F.greatest(demand, F.lit(0.0)), F.col(FAIR_LEVEL))


def group_rounds(cells: DataFrame, keep: tuple[str, ...] = ()) -> DataFrame:
    """Per run, group, dimension and round (`round_cells`): Q, U, D, T, overshoot, over quota, utilization, Jain,
    fairness error, and the brokers with a fair share (`F_b > 0`) and those starved among them (`U_b < 0.5 F_b`);
    then the columns `keep` of `cells` as they are, and `GROUP_KEY`: the aggregations by group that follow
    (`group_summary`, the convergence's windows) group by it too, and so reuse the partitioning `round_cells` left."""

    def over_fair(cell: Column) -> Column:  # x_b = U_b / F_b, null where F_b = 0: only brokers with F_b > 0 count
        return F.try_divide(cell["usage"], fair_share(cell["demand"]))

    def counted(condition: Column) -> Column:
        return F.when(condition, 1).otherwise(0)

    # One fold over the round's brokers for the five: Spark evaluates an array function's lambda element by
    # element, and a pass each cost five (the sums add in the brokers' order either way).
    start = F.struct(
        F.lit(0).alias("fair_share_brokers"),
        F.lit(0).alias("starved_brokers"),
        *(F.lit(0.0).alias(name) for name in ("sum_x", "sum_x2", "fair_gap")),
    )

    def step(state: Column, cell: Column) -> Column:
        fair = fair_share(cell["demand"])
        starved = (fair > 0) & (cell["usage"] < STARVED_BELOW * fair)
        return F.struct(
            (state["fair_share_brokers"] + counted(over_fair(cell).isNotNull())).alias("fair_share_brokers"),
            (state["starved_brokers"] + counted(starved)).alias("starved_brokers"),
            (state["sum_x"] + F.coalesce(over_fair(cell), F.lit(0.0))).alias("sum_x"),
            (state["sum_x2"] + F.coalesce(over_fair(cell) ** 2, F.lit(0.0))).alias("sum_x2"),
            (state["fair_gap"] + F.abs(cell["usage"] - fair)).alias("fair_gap"),
        )

    folded = cells.select(
        ROUND_KEY,
        GROUP_KEY,
        *GROUP_ROUND,
        "t_s",
        F.size("cells").alias("brokers"),
        "quota",
        *_SUMMED,
        F.aggregate("cells", start, step).alias("folded"),
        *keep,
    )
    counts = [  # never null, as the sizes of the filtered arrays they replace were not
        F.coalesce(F.col("folded")[name], F.lit(0)).alias(name) for name in ("fair_share_brokers", "starved_brokers")
    ]
    totals = folded.select(
        "*", *counts, *(F.col("folded")[name].alias(name) for name in ("sum_x", "sum_x2", "fair_gap"))
    )
    Q, U, D = F.col("quota"), F.col("usage"), F.col("demand")
    limited = F.col("quota") < math.inf
    own_share = F.when(D > 0, F.least(F.lit(1.0), Q / D)).otherwise(1.0)  # of the demand, this quota admits
    # the tightest dimension's, over the partitioning and order `round_cells` left (no shuffle, no sort)
    with_share = totals.withColumn(
        "group_share", F.min(own_share).over(W.partitionBy(ROUND_KEY, GROUP_KEY, "run_id", "group", "round"))
    )  # a column, computed once: each use of the window expression would be a window function of its own
    group_share = F.col("group_share")
    target = F.when(group_share < own_share, D * group_share).otherwise(F.least(Q, D))
    over_quota = limited & (U > (1 + OVER_QUOTA_TOLERANCE) * Q)
    return with_share.select(
        *GROUP_ROUND,
        "t_s",
        "brokers",
        "quota",
        "usage",
        "demand",
        target.alias("target"),
        "limit",
        F.when(Q > 0, F.greatest(F.lit(0.0), F.try_divide(U, Q) - 1)).alias("overshoot"),
        over_quota.alias("over_quota"),
        F.try_divide(U, target).alias("utilization"),
        F.try_divide(F.col("sum_x") * F.col("sum_x"), F.col("fair_share_brokers") * F.col("sum_x2")).alias("jain"),
        F.when(limited, F.try_divide("fair_gap", Q)).alias("fairness_error"),
        "throttled_s",
        "report_bytes",
        "fair_share_brokers",
        "starved_brokers",
        *keep,
        GROUP_KEY,
    )


def group_key() -> Column:
    """`GROUP_KEY`'s value: a hash of the run and group, which the `rounds` rows are partitioned by."""
    return F.xxhash64("run_id", "group")


def group_events(events: DataFrame, groups: DataFrame) -> DataFrame:
    """Each event of a run once per group it applies to, plus the run's `start` at round 0 (see module doc):
    a row of `groups` (distinct rows with `GROUP`'s columns, and any others) per event, with its `round`, `kind`
    and `target`. The events are few: they are broadcast, and the rows keep the partitioning of `groups`."""
    run_starts = groups.select(
        "run_id",
        F.lit(0).alias("round"),
        F.lit("start").alias("kind"),
        F.lit("").alias("target"),
        F.lit(None).cast("string").alias("detail"),
    ).distinct()
    logged_starts = events.filter(F.col("kind") == "start")
    all_events = events.select("run_id", "round", "kind", "target", "detail").unionByName(
        run_starts.join(logged_starts, on="run_id", how="left_anti")
    )
    named_group = F.when(F.col("kind") == "quota", F.col("target")).when(
        F.col("kind") == "demand", F.get_json_object("detail", "$.group")
    )
    applies = named_group.isNull() | (named_group == F.col("group"))
    return (
        groups.join(F.broadcast(all_events), on="run_id", how="inner")
        .filter(applies)
        .select(*groups.columns, "round", "kind", "target")
    )


def convergence(group_rounds: DataFrame, events: DataFrame) -> DataFrame:
    """Per run, group, dimension and event: `rounds_to_converge` (null: never settled after it), from the table of
    `group_rounds` (with its `GROUP_KEY`, partitioned by it as `round_cells` left it)."""
    Q, U, target, jain = F.col("quota"), F.col("usage"), F.col("target"), F.col("jain")
    limited = F.col("quota") < math.inf
    tolerance = F.when(limited, TARGET_TOLERANCE * Q).otherwise(TARGET_TOLERANCE * target)
    on_target = F.abs(U - target) <= tolerance
    fair_enough = jain.isNull() | (jain >= MIN_JAIN)
    # By `GROUP_KEY` too: the per-round table is partitioned by it (`round_cells`), so no window shuffles its
    # rows. Latest round first: "at or after" becomes a running minimum (a frame from the partition's start, one
    # pass), where a frame to its end re-aggregates the rest of the partition at every row.
    latest_first = W.partitionBy(GROUP_KEY, *GROUP).orderBy(F.col("round").desc())
    # The W - 1 rows before a round in this order are rounds r+1 .. r+W-1 when none is missing (one row a round)
    last = CONVERGENCE_WINDOW - 1
    window_complete = F.lag("round", last).over(latest_first) == F.col("round") + last
    window_settled = functools.reduce(
        operator.and_, (F.lag("settled", offset).over(latest_first) for offset in range(1, last + 1)), F.col("settled")
    )
    no_event = F.lit(None).cast("string")
    settled_starts = (
        group_rounds.select(GROUP_KEY, *GROUP_ROUND, F.coalesce(on_target & fair_enough, F.lit(False)).alias("settled"))
        .select(GROUP_KEY, *GROUP_ROUND, F.when(window_complete & window_settled, F.col("round")).alias("settled_from"))
        .select(GROUP_KEY, *GROUP_ROUND, "settled_from", no_event.alias("kind"), no_event.alias("target"))
    )
    # The event rows partitioned as the rounds are (the groups taken from them: by `GROUP_KEY` too, no shuffle),
    # so their union keeps that partitioning (`spark.sql.unionOutputPartitioning`): no row is shuffled again.
    groups = group_rounds.select(GROUP_KEY, *GROUP).distinct()
    markers = group_events(events, groups).select(
        GROUP_KEY, *GROUP_ROUND, F.lit(None).cast("int").alias("settled_from"), "kind", "target"
    )
    from_here_on = latest_first.rangeBetween(W.unboundedPreceding, 0)  # this round (events too) and every later
    is_event = F.col("kind").isNotNull()
    return (
        settled_starts.unionByName(markers)
        .select(*GROUP_ROUND, "kind", "target", F.min("settled_from").over(from_here_on).alias("first_settled"))
        .filter(is_event)
        .select(*GROUP_ROUND, "kind", "target", (F.col("first_settled") - F.col("round")).alias("rounds_to_converge"))
    )


def group_summary(group_rounds: DataFrame, more: list[Column] | tuple[Column, ...] = ()) -> DataFrame:
    """Per run, group and dimension (of `group_rounds`, with its `GROUP_KEY`): peak overshoot, the share of
    rounds over quota, means over the last quarter of the run's rounds (`GROUP_SCORES`); the starvation counts
    (`STARVATION_COUNTS`): over the last quarter, the (broker, round) rows of brokers with a fair share
    (`F_b > 0`) and those starved among them (`U_b < 0.5 F_b`), summed from the per-round counts so that the
    per-broker rows need not be kept for it; then the aggregates `more` (the quota telemetry's).

    One aggregation for all of them: grouped by `GROUP_KEY` too, it reuses the partitioning `round_cells` left.
    """
    in_last_quarter = F.col("round") >= F.col("last_quarter_from")

    def last_quarter_count(name: str) -> Column:
        return F.coalesce(F.sum(F.when(in_last_quarter, F.col(name))), F.lit(0)).cast("long")

    return (
        _with_last_quarter_from(group_rounds)
        .groupBy(GROUP_KEY, *GROUP)
        .agg(
            F.max("overshoot").alias("peak_overshoot"),
            F.avg(F.col("over_quota").cast("double")).alias("rounds_over_quota"),
            F.avg(F.when(in_last_quarter, F.col("utilization"))).alias("utilization"),
            F.avg(F.when(in_last_quarter, F.col("jain"))).alias("jain"),
            F.avg(F.when(in_last_quarter, F.col("fairness_error"))).alias("fairness_error"),
            F.avg("report_bytes").alias("report_bytes_per_round"),
            F.count("round").alias("rounds"),
            last_quarter_count("fair_share_brokers").alias("fair_share_broker_rounds"),
            last_quarter_count("starved_brokers").alias("starved_broker_rounds"),
            *more,
        )
        .drop(GROUP_KEY)
    )


def _with_last_quarter_from(frame: DataFrame) -> DataFrame:
    """`frame` with `last_quarter_from`, the first round of the last quarter of each row's run:
    `first + floor(rounds * 3 / 4)`.

    From a per-run aggregate joined back, not a window over the run: a window partitioned by run alone puts a
    whole run's rows (a million broker rows) in one task.
    """
    first_round, last_round = F.col("first_round"), F.col("last_round")
    per_run = (
        frame.groupBy("run_id")
        .agg(F.min("round").alias("first_round"), F.max("round").alias("last_round"))
        .select("run_id", (first_round + F.floor((last_round - first_round + 1) * 3 / 4)).alias("last_quarter_from"))
    )
    return frame.join(F.broadcast(per_run), on="run_id")


_MESSAGE_COUNTS = [
    "reports_sent",
    "reports_suppressed",
    "deliveries_dropped",  # copies lost to the injected faults
    "reports_rejected",
    "deliveries_lost_transport",  # copies a real transport (Redis) lost: sequence gaps per sender
]


def bandwidth_per_round(messages: DataFrame) -> DataFrame:
    """Per run and round: bytes and reports summed over the publishing brokers."""
    return (
        messages.groupBy("run_id", "round")
        .agg(
            F.max("t_s").alias("t_s"),
            F.count("broker").alias("brokers"),
            F.sum("bytes_published").alias("bytes_published"),
            F.sum("bytes_delivered").alias("bytes_delivered"),
            *[F.sum(name).alias(name) for name in _MESSAGE_COUNTS],
        )
        .select("run_id", "round", "t_s", "brokers", "bytes_published", "bytes_delivered", *_MESSAGE_COUNTS)
    )


def bandwidth_per_broker(messages: DataFrame) -> DataFrame:
    """Per run and broker: bytes per round (mean over the rounds it published in) and report counts."""
    return (
        messages.groupBy("run_id", "broker")
        .agg(
            F.count("round").alias("rounds"),
            F.avg("bytes_published").alias("bytes_published_per_round"),
            F.avg("bytes_delivered").alias("bytes_delivered_per_round"),
            *[F.sum(name).alias(name) for name in _MESSAGE_COUNTS],
        )
        .select(
            "run_id", "broker", "rounds", "bytes_published_per_round", "bytes_delivered_per_round", *_MESSAGE_COUNTS
        )
    )


def run_bandwidth(bandwidth_per_round: DataFrame) -> DataFrame:
    """Per run: the means per round of bytes published and delivered and of reports sent and suppressed; the
    report copies lost, to the injected faults and to the transport."""
    return (
        bandwidth_per_round.groupBy("run_id")
        .agg(
            F.avg("bytes_published").alias("bytes_published_per_round"),
            F.avg("bytes_delivered").alias("bytes_delivered_per_round"),
            F.avg("reports_sent").alias("reports_sent_per_round"),
            F.avg("reports_suppressed").alias("reports_suppressed_per_round"),
            F.sum("deliveries_dropped").alias("deliveries_dropped"),
            F.sum("deliveries_lost_transport").alias("deliveries_lost_transport"),
        )
        .select(
            "run_id",
            "bytes_published_per_round",
            "bytes_delivered_per_round",
            "reports_sent_per_round",
            "reports_suppressed_per_round",
            "deliveries_dropped",
            "deliveries_lost_transport",
        )
    )
