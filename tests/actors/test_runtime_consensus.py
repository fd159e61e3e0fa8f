"""The pool-size consensus in runs: lockstep on the memory store, realtime on a real Redis, and a Redis that
dies mid-run (the run neither hangs nor fails; the events say when the store went and came back)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
import redis

from actors.drivers.realtime import RealtimeHost
from actors.hosts.broker_host import BrokerState, LogicalBroker
from experiments.planner import build_plan
from experiments.run import run_scenario
from experiments.scenario import parse_scenario


def scenario(mode: str, rounds: int, interval_s: float, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": f"consensus-{mode}",
        "seed": 3,
        "rounds": rounds,
        "interval_s": interval_s,
        "mode": mode,
        "backend": "local",
        "policy": {"name": "numaflow-equal"},
        "cleanup": {"membership": True, "session_timeout_rounds": 3},
        "groups": [{"name": "g", "quota": {"publish_msgs_per_s": 90}}],
        "brokers": [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 50}]} for i in (1, 2, 3)],
    }
    data.update(changes)
    return data


def run(data: dict[str, Any], run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    run_scenario(parse_scenario(data), run_dir, progress=False)
    rounds = ds.dataset(run_dir / "rounds", format="parquet").to_table().to_pandas()
    events = ds.dataset(run_dir / "events", format="parquet").to_table().to_pandas()
    return rounds, events, json.loads((run_dir / "manifest.json").read_text())


def pool_sizes(rounds: pd.DataFrame) -> pd.DataFrame:
    return rounds.pivot_table(index="round", columns="broker", values="agreed_pool_size")


def test_lockstep_agrees_after_a_join_a_leave_and_a_crash(tmp_path):
    data = scenario("lockstep", 40, 1.0)
    data["brokers"].append({"name": "b4", "join_at": 5, "workload": [{"group": "g", "msgs_per_s": 50}]})
    data["events"] = [{"at": 15, "leave": "b1"}, {"at": 25, "crash": "b2"}]
    rounds, _, _ = run(data, tmp_path / "run")
    sizes = pool_sizes(rounds)
    assert (sizes.loc[2:4, ["b1", "b2", "b3"]] == 3).all().all()
    assert sizes.loc[5, "b4"] == 0  # the newcomer waits for agreement, at the broker floor
    assert rounds.set_index(["round", "broker"]).loc[(5, "b4"), "limit"] == 1.0
    assert (sizes.loc[5, ["b1", "b2", "b3"]] == 4).all()  # the others take the larger size at once
    assert (sizes.loc[6:14] == 4).all().all()
    assert (sizes.loc[17:24, ["b2", "b3", "b4"]] == 3).all().all()  # a clean leave: agreed within 2 rounds
    assert (sizes.loc[25:28, ["b3", "b4"]] == 3).all().all()  # a crash: the session timeout first
    assert (sizes.loc[31:, ["b3", "b4"]] == 2).all().all()
    limits = rounds.groupby("round")["limit"].sum()
    assert limits.loc[31:].round(9).eq(90.0).all()  # N shrank: the survivors hold the whole quota
    serving = rounds.groupby("round")["broker"].transform("size")  # the brokers serving the group that round
    split_by = np.minimum(rounds["agreed_pool_size"].clip(lower=1), serving)
    assert (rounds["limit"] <= rounds["quota"] / split_by + 1.0).all()


@pytest.mark.ray
def test_lockstep_consensus_is_identical_on_local_and_ray(ray_session, tmp_path):
    """The consensus as a Ray actor gives the same pool sizes, limits and events as in-process."""
    tables = {}
    for backend in ("local", "ray"):
        data = scenario("lockstep", 16, 1.0, backend=backend, channel={"loss": 0.2})
        data["brokers"].append({"name": "b4", "join_at": 3, "workload": [{"group": "g", "msgs_per_s": 50}]})
        data["events"] = [{"at": 6, "leave": "b1"}, {"at": 9, "crash": "b2"}]
        rounds, events, _ = run(data, tmp_path / backend)
        key = ["round", "broker", "group", "dimension"]
        tables[backend] = (
            rounds.drop(columns="run_id").sort_values(key).reset_index(drop=True),
            events.drop(columns="run_id").sort_values(["round", "kind", "target"]).reset_index(drop=True),
        )
    assert tables["local"][0]["agreed_pool_size"].nunique() > 2  # 3, 4, 3, 2 and waiting
    for local, on_ray in zip(tables["local"], tables["ray"], strict=True):
        pd.testing.assert_frame_equal(local, on_ray, check_exact=True)


def test_realtime_brokers_join_the_pool_before_their_timers_tick(tmp_path, monkeypatch):
    """A started broker is ticked by its host's timer at once (b1-b3 at round 0 and b4 at round 2 start after
    the clock): a tick that synced the pool size before the broker joined the pool failed the run. Each host
    start here is followed by 0.15 s (over a round) in which the timer ticks the broker."""
    start = RealtimeHost.start

    def start_then_wait(self: RealtimeHost, *args: Any) -> None:
        start(self, *args)
        time.sleep(0.15)

    monkeypatch.setattr(RealtimeHost, "start", start_then_wait)
    data = scenario("realtime", 20, 0.1)
    data["brokers"].append({"name": "b4", "join_at": 2, "workload": [{"group": "g", "msgs_per_s": 50}]})
    data["events"] = [{"at": 6, "leave": "b1"}]
    rounds, _, manifest = run(data, tmp_path / "run")
    assert manifest["status"] == "complete"
    assert set(rounds["broker"]) == {"b1", "b2", "b3", "b4"}
    b1_gone_t_s = rounds.loc[rounds.broker == "b1", "t_s"].max()  # its last tick: the leave came after it
    check_agreement_after(rounds[rounds.t_s > b1_gone_t_s], ["b2", "b3", "b4"], pool_size=3)


def check_agreement_after(rounds: pd.DataFrame, brokers: list[str], pool_size: int) -> None:
    """Measured from events, not round numbers (a loaded machine's timers run late): each broker comes to agree
    on `pool_size` in `rounds` and never splits by more after its first agreement; where it agreed and that
    many brokers serve the group, its limit is the quota (90) split that many ways."""
    for broker in brokers:
        mine = rounds[rounds.broker == broker].sort_values("round")
        agreed = mine["round"][mine.agreed_pool_size == pool_size]
        assert len(agreed) > 0, (broker, pool_sizes(rounds))
        assert (mine[mine["round"] >= agreed.min()].agreed_pool_size <= pool_size).all(), pool_sizes(rounds)
    serving = rounds.groupby("round")["broker"].transform("size")
    settled = rounds[(rounds.agreed_pool_size == pool_size) & (serving == pool_size)]
    assert len(settled) > 0 and (settled.limit == 90.0 / pool_size).all(), settled.limit.to_dict()


def test_realtime_on_redis_agrees_on_the_pool_size(tmp_path, redis_server):
    data = scenario("realtime", 20, 0.1, membership={"store": "redis", "url": redis_server.url})
    rounds, events, manifest = run(data, tmp_path / "run")
    assert manifest["status"] == "complete"
    check_agreement_after(rounds, ["b1", "b2", "b3"], pool_size=3)
    assert not events["kind"].str.startswith("registry_").any()
    client = redis.Redis.from_url(redis_server.url)
    assert client.keys("quotalab:consensus-realtime:*") == []  # the run deleted its pool's keys
    client.close()


def test_a_redis_that_dies_mid_run_neither_hangs_nor_fails_the_run(tmp_path, own_redis_server):
    """Redis is killed 1.2 s into a 3.5 s run and started again (empty) 1 s later: the brokers keep the last
    agreed size meanwhile, the events say when the store went and came back, and they agree again."""
    data = scenario("realtime", 35, 0.1, membership={"store": "redis", "url": own_redis_server.url})
    kill = threading.Timer(1.5, own_redis_server.stop)  # the clock starts 0.3 s after the run
    restart = threading.Timer(2.5, own_redis_server.start)
    kill.start()
    restart.start()
    try:
        rounds, events, manifest = run(data, tmp_path / "run")
    finally:
        kill.cancel()
        restart.join()
    assert manifest["status"] == "complete"
    kinds = events[events["kind"].str.startswith("registry_")].sort_values("t_s")
    assert kinds["kind"].tolist() == ["registry_unreachable", "registry_reachable"], events
    down_s, up_s = kinds["t_s"].tolist()
    during = rounds[(rounds["t_s"] > down_s) & (rounds["t_s"] < up_s)]
    assert len(during) and (during["agreed_pool_size"] == 3).all()  # the last agreed size is kept
    assert (rounds[rounds["round"] >= 32]["agreed_pool_size"] == 3).all(), pool_sizes(rounds)


def test_a_broker_is_told_when_the_store_stops_and_starts_answering():
    """The host hands the reachability to `BrokerNode.set_registry_reachable` when the node has it (the
    fallbacks), only on a change, and the node keeps the last pool size it was given."""
    plan = build_plan(parse_scenario(scenario("lockstep", 5, 1.0)))
    host = plan.host_plans()[0]
    name, broker_plan = next(iter(host.brokers.items()))
    state = BrokerState(incarnation=0, workload=broker_plan.workload, clock_offset_s=0.0)
    logical = LogicalBroker(broker_plan, host, state, plan.quota, plan.limited)
    told: list[bool] = []
    logical.node.set_registry_reachable = told.append
    for pool_size, reachable in [(3, True), (3, False), (3, False), (3, True)]:
        logical.apply_pool_size(pool_size, reachable)
    assert told == [False, True]
    assert logical.node.agreed_pool_size == 3 and logical.pool_size_column() == 3
