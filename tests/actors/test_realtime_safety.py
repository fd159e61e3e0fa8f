"""The recommended policy's promise in realtime: the limits of a group never add up above its quota (plus the floor
of 1 per broker), whatever the timers do; and a registry that comes back from an outage gives the brokers their
views back (its sessions did not age while it was down)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds

from allocator.node.broker_node import MIN_LIMIT
from experiments.run import run_scenario
from experiments.scenario import parse_scenario


def scenario(rounds: int, **changes: Any) -> dict[str, Any]:
    return {
        "name": "realtime-safety",
        "seed": 9,
        "rounds": rounds,
        "interval_s": 0.1,
        "mode": "realtime",
        "backend": "local",
        "policy": {"name": "fair-share-safe"},
        "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 100}}],
        "brokers": [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 40}]} for i in range(1, 5)],
    } | changes


def rounds_of(data: dict[str, Any], run_dir: Path) -> pd.DataFrame:
    run_scenario(parse_scenario(data), run_dir, progress=False)
    return ds.dataset(run_dir / "rounds", format="parquet").to_table().to_pandas()


def test_the_limits_of_a_group_never_add_up_above_its_quota_in_realtime(tmp_path):
    """A cold start, a join, a quota cut, a restart and 30% loss, on timers: in every round the limits the brokers
    hold add up to at most the quota (the larger one in a round where the cut lands) plus the floor of each."""
    data = scenario(
        24,
        channel={"loss": 0.3},
        events=[
            {"at": 10, "quota": {"group": "g", "publish_msgs_per_s": 60}},
            {"at": 14, "crash": "b2"},
            {"at": 18, "restart": "b2"},
        ],
    )
    data["brokers"].append({"name": "b5", "join_at": 6, "workload": [{"group": "g", "msgs_per_s": 40}]})
    rounds = rounds_of(data, tmp_path / "run")
    per_round = rounds.groupby("round").agg(limit=("limit", "sum"), quota=("quota", "max"), brokers=("broker", "size"))
    assert len(per_round) >= 20 and per_round.brokers.max() == 5
    excess = per_round.limit - (per_round.quota + MIN_LIMIT * per_round.brokers)
    assert (excess <= 1e-6).all(), per_round[excess > 1e-6]
    usage = rounds.groupby("round").usage.sum()
    assert (usage <= per_round.quota + MIN_LIMIT * per_round.brokers + 1e-6).all()


def test_views_come_back_when_the_registry_does(tmp_path):
    """The registry answers nobody for 6 rounds (longer than the session timeout): afterwards every broker hears
    every other again and the limits add up to the quota, not above it."""
    data = scenario(26, cleanup={"session_timeout_rounds": 3}, events=[{"at": 8, "registry_outage": {"rounds": 6}}])
    rounds = rounds_of(data, tmp_path / "run")
    after = rounds[rounds["round"] >= 20]
    assert (after.view_brokers == 4).all(), after.groupby("broker").view_brokers.min().to_dict()
    assert (after.groupby("round").limit.sum() <= 100 + 4 * MIN_LIMIT + 1e-6).all()
