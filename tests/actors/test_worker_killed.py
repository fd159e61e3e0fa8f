"""A host actor whose Ray worker process is killed from outside (SIGKILL, not the scenario's `crash` event): the
run sees it on the round's call, logs a `crash` event, the others expire the lost broker through the
membership registry, and the run goes on to its last round. On Ray a real worker is killed (the session's
`ray_session`); locally, a backend whose killed host answers every call with `Lost` (its timer stopped) runs
the same drivers without Ray."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest

from actors.drivers.lockstep import run_lockstep
from actors.drivers.realtime import run_realtime
from actors.hosts.backends import LocalBackend, Lost, RayBackend
from actors.hosts.broker_host import BrokerHost
from actors.telemetry.writer import TelemetryWriter
from experiments.planner import build_plan
from experiments.scenario import parse_scenario

ROUNDS, KILL_AFTER_ROUND, VICTIM = 30, 8, "b2"


class KillingRayBackend(RayBackend):
    """The Ray backend, remembering every host actor it created, that kills a host's worker process from
    outside: SIGKILL to the PID the actor reports, as an operator or the OOM killer would."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[str, Any] = {}

    def create(self, cls: type, *args: Any) -> Any:
        handle = super().create(cls, *args)
        if issubclass(cls, BrokerHost):
            self.hosts.update(dict.fromkeys(args[0].brokers, handle))
        return handle

    def kill_host_of(self, broker: str) -> None:
        import ray

        pid = ray.get(self.hosts[broker].pid.remote())
        assert pid != os.getpid()
        os.kill(pid, signal.SIGKILL)


class KillableLocalBackend(LocalBackend):
    """The local backend, with hosts that can die as a process would: timer stopped, every call `Lost`."""

    def __init__(self) -> None:
        self.hosts: dict[str, Any] = {}
        self.dead: list[Any] = []

    def create(self, cls: type, *args: Any) -> Any:
        handle = super().create(cls, *args)
        if issubclass(cls, BrokerHost):
            self.hosts.update(dict.fromkeys(args[0].brokers, handle))
        return handle

    def call(self, handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        if any(handle is dead for dead in self.dead):
            return Lost("the host actor's process died (killed by the test)")
        return super().call(handle, method, *args, **kwargs)

    def kill_host_of(self, broker: str) -> None:
        handle = self.hosts[broker]
        super().kill(handle)  # a realtime host's timer stops with its process
        self.dead.append(handle)


def scenario(mode: str, backend: str = "ray", restart_after_rounds: int = 0) -> dict[str, Any]:
    return {
        "name": f"worker-killed-{mode}",
        "seed": 5,
        "rounds": ROUNDS,
        "interval_s": 0.2 if mode == "realtime" else 1.0,
        "mode": mode,
        "backend": backend,
        "brokers_per_actor": 1,
        "restart_lost_after_rounds": restart_after_rounds,
        "policy": {"name": "fair-share-safe"},
        "cleanup": {"stale_after_rounds": 20, "max_report_age_rounds": 2, "session_timeout_rounds": 3},
        "groups": [{"name": "g1", "quota": {"publish_msgs_per_s": 120}}],
        "brokers": [{"name": name, "workload": [{"group": "g1", "msgs_per_s": 60}]} for name in ("b1", "b2", "b3")],
    }


def run_and_kill(
    mode: str, run_dir: Path, backend: Any, restart_after_rounds: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the scenario, kill the victim's host after round KILL_AFTER_ROUND; the rounds and events tables."""
    plan = build_plan(parse_scenario(scenario(mode, backend.name, restart_after_rounds)))
    names = {"broker": [b.name for b in plan.brokers], "group": plan.group_names, "dimension": plan.dimensions}
    writer = TelemetryWriter(run_dir, run_dir.name, {}, names)
    killed: list[bool] = []

    def on_round(round_index: int) -> None:
        if round_index == KILL_AFTER_ROUND:
            backend.kill_host_of(VICTIM)
            killed.append(True)

    driver = run_realtime if mode == "realtime" else run_lockstep
    try:
        driver(plan, backend, writer, on_round=on_round)
    finally:
        writer.close("complete")
    assert killed
    tables = [ds.dataset(run_dir / name, format="parquet").to_table().to_pandas() for name in ("rounds", "events")]
    return tables[0], tables[1]


def check_crash_recorded_and_run_went_on(rounds: pd.DataFrame, events: pd.DataFrame) -> None:
    (crash,) = events[events["kind"] == "crash"].itertuples()
    assert crash.target == VICTIM and "process died" in json.loads(crash.detail)["cause"]
    assert KILL_AFTER_ROUND < crash.round <= KILL_AFTER_ROUND + 2
    victim, others = rounds[rounds["broker"] == VICTIM], rounds[rounds["broker"] != VICTIM]
    assert victim["round"].max() <= crash.round  # no rows from a dead process
    last = ROUNDS - 1
    assert set(others.loc[others["round"] >= last - 1, "broker"]) == {"b1", "b3"}  # the others run to the end
    # Before the kill every broker sees three; at the end the registry has expired b2 and the others see two.
    assert set(others.loc[others["round"] == KILL_AFTER_ROUND - 2, "view_brokers"]) == {3}
    assert set(others.loc[others["round"] >= last - 1, "view_brokers"]) == {2}


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_a_lost_local_host_is_a_crash_and_the_run_goes_on(mode, tmp_path):
    check_crash_recorded_and_run_went_on(*run_and_kill(mode, tmp_path / "run", KillableLocalBackend()))


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_a_killed_ray_host_worker_is_a_crash_and_the_run_goes_on(ray_session, mode):
    with tempfile.TemporaryDirectory(prefix="quotalab-killed-") as directory:
        check_crash_recorded_and_run_went_on(*run_and_kill(mode, Path(directory) / "run", KillingRayBackend()))


RESTART_AFTER_ROUNDS = 4


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_a_lost_broker_restarts_after_the_rounds_the_scenario_asks(mode, tmp_path):
    """`restart_lost_after_rounds`: the lost broker starts again on a new host, as a new incarnation, that many
    rounds after the round that saw it lost, and its peers count it again."""
    rounds, events = run_and_kill(mode, tmp_path / "run", KillableLocalBackend(), RESTART_AFTER_ROUNDS)
    (crash,) = events[events["kind"] == "crash"].itertuples()
    (restart,) = events[events["kind"] == "restart"].itertuples()
    assert restart.target == VICTIM and restart.round == crash.round + RESTART_AFTER_ROUNDS
    assert json.loads(restart.detail)["cause"] == "its host was lost"
    victim = rounds[rounds["broker"] == VICTIM]
    down = victim[(victim["round"] > crash.round) & (victim["round"] < restart.round)]
    assert down.empty  # no rows while it is down
    back = victim[victim["round"] >= restart.round]
    assert set(back["incarnation"]) == {1} and back["round"].max() == ROUNDS - 1
    others = rounds[rounds["broker"] != VICTIM]
    assert set(others.loc[others["round"] == ROUNDS - 1, "view_brokers"]) == {3}  # counted again
    limits = rounds.groupby(["round", "group", "dimension"]).agg(limit=("limit", "sum"), quota=("quota", "first"))
    assert (limits["limit"] <= limits["quota"] * (1 + 1e-9)).all()  # the quota held in every round
