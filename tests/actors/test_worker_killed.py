"""A host actor whose Ray worker process is killed from outside (SIGKILL, not the scenario's `crash` event): the
run sees it on the round's call, logs a `crash` event, the others expire the lost broker through the
membership registry, and the run goes on to its last round. Uses the session's Ray instance (`ray_session`)."""

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

from actors.backends import RayBackend
from actors.broker_host import BrokerHost
from actors.lockstep import run_lockstep
from actors.realtime import run_realtime
from actors.telemetry import TelemetryWriter
from experiments.plan import build_plan
from experiments.scenario import parse_scenario

pytestmark = pytest.mark.ray
ROUNDS, KILL_AFTER_ROUND, VICTIM = 30, 8, "b2"


class HostRecordingRayBackend(RayBackend):
    """The Ray backend, remembering every host actor it created with the brokers it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[str, Any] = {}

    def create(self, cls: type, *args: Any) -> Any:
        handle = super().create(cls, *args)
        if issubclass(cls, BrokerHost):
            self.hosts.update(dict.fromkeys(args[0].brokers, handle))
        return handle


def scenario(mode: str) -> dict[str, Any]:
    return {
        "name": f"worker-killed-{mode}",
        "seed": 5,
        "rounds": ROUNDS,
        "interval_s": 0.2 if mode == "realtime" else 1.0,
        "mode": mode,
        "backend": "ray",
        "brokers_per_actor": 1,
        "policy": {"name": "fair-share-safe"},
        "cleanup": {"stale_after_rounds": 20, "max_report_age_rounds": 2, "session_timeout_rounds": 3},
        "groups": [{"name": "g1", "quota": {"publish_msgs_per_s": 120}}],
        "brokers": [{"name": name, "workload": [{"group": "g1", "msgs_per_s": 60}]} for name in ("b1", "b2", "b3")],
    }


def run_and_kill(mode: str, run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the scenario, SIGKILL the victim's worker process after round KILL_AFTER_ROUND; rounds and events."""
    import ray

    plan = build_plan(parse_scenario(scenario(mode)))
    backend = HostRecordingRayBackend()
    names = {"broker": [b.name for b in plan.brokers], "group": plan.group_names, "dimension": plan.dimensions}
    writer = TelemetryWriter(run_dir, run_dir.name, {}, names)
    killed: list[int] = []

    def on_round(round_index: int) -> None:
        if round_index == KILL_AFTER_ROUND:
            pid = ray.get(backend.hosts[VICTIM].pid.remote())
            assert pid != os.getpid()
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    driver = run_realtime if mode == "realtime" else run_lockstep
    try:
        driver(plan, backend, writer, on_round=on_round)
    finally:
        writer.close("complete")
    assert killed
    tables = [ds.dataset(run_dir / name, format="parquet").to_table().to_pandas() for name in ("rounds", "events")]
    return tables[0], tables[1]


@pytest.mark.parametrize("mode", ["lockstep", "realtime"])
def test_a_killed_host_worker_is_a_crash_and_the_run_goes_on(ray_session, mode):
    with tempfile.TemporaryDirectory(prefix="quotalab-killed-") as directory:
        rounds, events = run_and_kill(mode, Path(directory) / "run")
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
