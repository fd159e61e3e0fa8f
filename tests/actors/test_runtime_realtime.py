"""Realtime mode: every broker ticks on its own timer (scaled-down intervals), on both backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest

from experiments.run import run_scenario
from experiments.scenario import parse_scenario


def realtime_scenario(backend: str, rounds: int, interval_s: float, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": f"realtime-{backend}",
        "seed": 4,
        "rounds": rounds,
        "interval_s": interval_s,
        "mode": "realtime",
        "backend": backend,
        "policy": {"name": "pip82-proportional"},
        "reporting": {"threshold_pct": 10, "force_every": 2},
        "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 90}}],
        "brokers": [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 50}]} for i in (1, 2, 3)],
    }
    data.update(changes)
    return data


def read(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    rounds = ds.dataset(run_dir / "rounds", format="parquet").to_table().to_pandas()
    messages = ds.dataset(run_dir / "messages", format="parquet").to_table().to_pandas()
    return rounds, messages, json.loads((run_dir / "manifest.json").read_text())


def check_realtime_run(run_dir: Path, rounds_expected: int, brokers: list[str]) -> pd.DataFrame:
    """Every broker ticked every round once and never past the scenario's end. A broker whose timer lags
    on a busy machine may miss the very last round: the run ends on the driver's clock."""
    rounds, messages, manifest = read(run_dir)
    assert manifest["status"] == "complete" and manifest["mode"] == "realtime"
    assert manifest["rounds_completed"] == rounds_expected
    keys = list(rounds[["round", "broker", "group", "dimension"]].itertuples(index=False, name=None))
    assert len(keys) == len(set(keys))
    for broker in brokers:
        ticks = set(rounds[rounds.broker == broker]["round"])
        assert set(range(rounds_expected - 1)) <= ticks <= set(range(rounds_expected)), (broker, sorted(ticks))
    lag = manifest["realtime_lag"]
    assert lag["ticks"] == rounds.groupby(["round", "broker"]).ngroups
    assert lag["interval_s"] == manifest["scenario"]["interval_s"]
    assert 0 <= lag["p50_s"] <= lag["p99_s"] <= lag["max_s"]
    # reports flowed between the brokers' own timers; one messages row per round and broker
    assert messages.bytes_published.sum() > 0 and messages.bytes_delivered.sum() > 0
    assert not messages.duplicated(["round", "broker"]).any()
    assert messages["round"].max() <= rounds_expected - 1
    assert rounds.view_brokers.max() == rounds.broker.nunique()  # they heard each other
    return rounds


def test_realtime_on_the_local_backend(tmp_path):
    data = realtime_scenario("local", rounds=8, interval_s=0.1)
    run_dir = run_scenario(parse_scenario(data), tmp_path / "run", progress=False)
    rounds = check_realtime_run(run_dir, 8, ["b1", "b2", "b3"])
    # the brokers share the quota: once the views have merged, limits stay about the quota (90)
    late = rounds[rounds["round"] >= 5].groupby("round").limit.sum()
    assert late.between(60, 135).all(), late.to_dict()


def test_realtime_local_applies_events_at_their_time(tmp_path):
    data = realtime_scenario(
        "local", rounds=10, interval_s=0.1,
        events=[{"at": 4, "quota": {"group": "g", "publish_msgs_per_s": 150}}],
    )  # fmt: skip
    run_dir = run_scenario(parse_scenario(data), tmp_path / "run", progress=False)
    rounds = check_realtime_run(run_dir, 10, ["b1", "b2", "b3"])
    quota = rounds.groupby("round").quota.max()
    assert (quota.loc[:2] == 90).all() and (quota.loc[5:] == 150).all()
    limits = rounds[rounds["round"] >= 7].groupby("round").limit.sum()
    assert limits.between(100, 225).all(), limits.to_dict()  # the raised quota is handed out


def test_realtime_crash_is_seen_by_every_broker_through_membership(tmp_path):
    """b4 crashes at round 3 (its host's timer stops: no more reports nor heartbeats); the registry declares
    it dead after the session timeout, and each broker of the host holding b1-b3 must learn it, long before
    stale expiry (30 rounds) would remove it."""
    data = realtime_scenario(
        "local", rounds=12, interval_s=0.1, brokers_per_actor=3,
        cleanup={"stale_after_rounds": 30, "membership": True, "session_timeout_rounds": 3},
        events=[{"at": 3, "crash": "b4"}],
    )  # fmt: skip
    data["brokers"].append({"name": "b4", "workload": [{"group": "g", "msgs_per_s": 50}]})
    run_dir = run_scenario(parse_scenario(data), tmp_path / "run", progress=False)
    rounds = check_realtime_run(run_dir, 12, ["b1", "b2", "b3"])
    assert rounds[rounds.broker == "b4"]["round"].max() <= 3
    for broker in ("b1", "b2", "b3"):
        views = rounds[rounds.broker == broker].set_index("round").view_brokers
        assert views.loc[2] == 4 and (views.loc[9:] == 3).all(), (broker, views.to_dict())


@pytest.mark.ray
def test_realtime_on_ray(ray_session, tmp_path):
    data = realtime_scenario("ray", rounds=5, interval_s=0.2)
    run_dir = run_scenario(parse_scenario(data), tmp_path / "run", progress=False)
    check_realtime_run(run_dir, 5, ["b1", "b2", "b3"])
