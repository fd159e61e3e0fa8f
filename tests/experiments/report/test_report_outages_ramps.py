"""The report's fallback comparison (silences from the events, overshoot, lost throughput, recovery) and its
ramped-quota view, on hand-built tables with known answers."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from experiments.report import groups
from experiments.report.outages import fallback_comparison, fallback_section, silences
from experiments.report.ramps import ramp_figure, ramp_rounds, ramped_groups
from experiments.report.summary import collect_tables

from .tables import rounds_frame, rounds_row

EVENT_COLUMNS = ["run_id", "round", "kind", "target", "detail"]


def _events(*rows: tuple[str, int, str, dict]) -> pd.DataFrame:
    table = [(run, at, kind, "", json.dumps(detail)) for run, at, kind, detail in rows]
    return pd.DataFrame(table, columns=EVENT_COLUMNS)


def test_silences_are_partitions_until_healed_and_registry_outages_for_their_rounds():
    events = _events(
        ("a", 5, "channel", {"partitions": [["b1"], ["b2"]]}),
        ("a", 9, "channel", {"loss": 0.1}),  # not about partitions: the partition goes on
        ("a", 12, "channel", {"partitions": []}),
        ("a", 20, "registry_outage", {"rounds": 50}),  # past the run's end
        ("b", 3, "channel", {"partitions": [["b1"], ["b2"]]}),  # never healed
    )
    found = silences(events, {"a": 30, "b": 10})
    assert found.values.tolist() == [
        ["a", "partition", 5, 12, "channel"],
        ["a", "registry outage", 20, 30, "registry_restored"],
        ["b", "partition", 3, 10, "channel"],
    ]


@pytest.mark.spark
def test_the_comparison_measures_overshoot_lost_throughput_and_recovery_per_silence(spark):
    # Quota 100, demand 120 (T = 100). During the outage (rounds 2-3) run "open" uses 120, run "closed" 10; an
    # unlimited group "free" takes no part (no target to hold back from, never over).
    usage = {"open": [100, 100, 120, 120, 100, 100], "closed": [100, 100, 10, 10, 60, 100]}
    per_round = spark.createDataFrame(
        [
            (run, group, "publish_msgs_per_s", r, quota, float(u), 120.0, 100.0, max(0.0, u / quota - 1), u > 105)
            for run, values in usage.items()
            for r, u in enumerate(values)
            for group, quota in (("g", 100.0), ("free", math.inf))
        ],
        "run_id string, group string, dimension string, round int, quota double, usage double, demand double, "
        "target double, overshoot double, over_quota boolean",
    )
    events = _events(*[(run, 2, "registry_outage", {"rounds": 2}) for run in usage])
    convergence = spark.createDataFrame(
        [("open", "g", "publish_msgs_per_s", 4, "registry_restored", 0)]
        + [("closed", "g", "publish_msgs_per_s", 4, "registry_restored", 1)]
        + [(run, "free", "publish_msgs_per_s", 4, "registry_restored", 0) for run in usage],
        "run_id string, group string, dimension string, round int, kind string, rounds_to_converge int",
    )
    manifests = {run: {"rounds_completed": 6, "scenario": {"fallback": {"mode": run}}} for run in usage}
    collected = collect_tables(
        {
            "run_rounds": (groups.run_rounds(per_round), ["run_id", "round"]),
            "events": (groups.event_convergence(convergence), ["run_id", "round", "kind"]),
        }
    )
    table = fallback_comparison(collected["run_rounds"], collected["events"], events, manifests).set_index("run_id")
    assert table.loc["open", "peak_overshoot"] == pytest.approx(0.2)
    assert table.loc["open", "lost_throughput"] == 0
    assert table.loc["closed", "peak_overshoot"] == 0
    assert table.loc["closed", "lost_throughput"] == pytest.approx(180 / 200)
    assert table.loc["closed", "rounds_to_recover"] == 1
    assert table.loc["closed", "fallback"] == "closed"
    section = fallback_section(table.reset_index())
    assert section.title == "Fallbacks: while reports stopped" and 'class="figure"' in section.body
    assert fallback_section(table.iloc[:0].reset_index()) is None


def test_ramped_groups_come_from_the_manifests():
    ramp = {"mode": "relaxed", "min": 1.0, "max": 9.0, "duration_s": 8.0, "usage_threshold_pct": 50.0}
    manifests = {
        "r1": {"scenario": {"groups": [{"name": "g", "ramp_up": {"publish_msgs_per_s": ramp}}, {"name": "h"}]}},
        "r2": {"scenario": {"groups": [{"name": "g", "ramp_up": {}}]}},
    }
    assert ramped_groups(manifests) == [("r1", "g", "publish_msgs_per_s", ramp)]


@pytest.mark.spark
def test_ramp_rounds_give_the_pools_range_and_the_sums_per_round(spark):
    rows = [
        rounds_row(0, "b1", usage=5, demand=10, pool=20.0, limit=10.0),
        rounds_row(0, "b2", usage=4, demand=10, pool=30.0, limit=12.0),
        rounds_row(0, "b1", usage=50, demand=50, group="other"),
    ]
    ramp = {"mode": "go-back-n", "min": 10.0, "max": 100.0, "duration_s": 9.0, "usage_threshold_pct": 80.0}
    ramped = [("r1", "g", "publish_msgs_per_s", ramp)]
    table = collect_tables({"ramps": ramp_rounds(rounds_frame(spark, rows), ramped)})["ramps"]
    assert table[["group", "pool_min", "pool_max", "usage", "limit", "demand"]].values.tolist() == [
        ["g", 20.0, 30.0, 9.0, 22.0, 20.0]
    ]
    figure = ramp_figure(table, ramped)
    pool = next(trace for trace in figure.data if trace["name"].startswith("pool (band"))
    assert pool["y"] == [30.0] and figure.layout["annotations"][0]["text"].startswith("g: go-back-n, 10 -> 100")
