"""A Ray node lost mid-run and mid-sweep, on a `ray.cluster_utils.Cluster` on this machine (a head, with no CPU
for trials, and two workers of 1 CPU each).

The cluster cannot share the session's Ray instance, so one helper process (`HELPER`) holds it for the module:
it starts the cluster, joins it as the runs' driver, and runs what each test asks (a JSON line on its stdin; the
answer a `RESULT` line on its stdout), adding a worker back first when an earlier test removed one. Each test
loses a node after something it observed, never after a sleep: the realtime run after its driver's round
`LOSE_AFTER_ROUND`; the sweep once a trial has stored the first run of its candidate (the store keeps that
trial waiting in its call until the node is gone, so the trial is lost with its candidate's other runs to go).
A node is removed as a machine dies: without a goodbye (`allow_graceful=False`), and with every worker process it
started killed at once (left alone, a worker may go on ticking and heartbeating until it notices its raylet is
gone, later on a loaded machine, and its peers rightly keep its room meanwhile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from allocator.node.broker_node import MIN_LIMIT
from tests.experiments.sweep.sweeps import write_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

HELPER = textwrap.dedent(
    """
    import json, os, signal, sys, threading, time
    from pathlib import Path

    import ray
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from actors.drivers import realtime as realtime_driver
    from actors.hosts.backends import RayBackend, placement_here
    from experiments import run as run_module
    from experiments.scenario import parse_scenario
    from experiments.sweep import run_sweep
    from experiments.sweep.expand import plan_sweep
    from experiments.sweep import tuning
    from experiments.sweep.store import RunStore, this_node
    from experiments.sweep.sweep_file import load_sweep

    STORE = 100 * 1024**2
    # the GCS declares a node dead after 4 missed health checks 0.5 s apart (Ray's default: 5 x 3 s)
    SYSTEM = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0, "object_store_memory": STORE, "include_dashboard": False, "_system_config": SYSTEM
        },
    )

    def workers():
        while len(cluster.worker_nodes) < 2:
            cluster.add_node(num_cpus=1, object_store_memory=STORE)
        cluster.wait_for_nodes()
        return sorted(cluster.worker_nodes, key=lambda node: node.node_id)

    def lose(node_id):
        # every process of the node at once: its raylet, and the workers it started
        (node,) = [node for node in cluster.worker_nodes if node.node_id == node_id]
        (raylet,) = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET]
        workers_of_node = descendants(raylet.process.pid)
        cluster.remove_node(node, allow_graceful=False)
        for pid in workers_of_node:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def descendants(pid):
        parents = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        found, todo = [], [pid]
        while todo:
            children = parents.get(todo.pop(), [])
            found += children
            todo += children
        return found

    class Backend(RayBackend):
        # the first hosts pinned to the nodes in turn (SPREAD is best effort); hosts created later (restarts)
        # placed as a run places them; the services it creates remembered
        def __init__(self, nodes, pinned):
            super().__init__()
            self.nodes, self.pinned, self.created, self.services = nodes, pinned, 0, []

        def host_strategy(self, cls):
            self.created += 1
            if self.created > self.pinned:
                return super().host_strategy(cls)
            return NodeAffinitySchedulingStrategy(self.nodes[(self.created - 1) % len(self.nodes)], soft=False)

        def create_service(self, cls, *args):
            handle = super().create_service(cls, *args)
            self.services.append(handle)
            return handle

    def realtime(scenario, out, lose_after_round):
        nodes = [cluster.head_node.node_id] + [node.node_id for node in workers()]
        victim = nodes[1]
        backend = Backend(nodes, len(scenario["brokers"]))
        run_module.make_backend = lambda name, address=None: backend
        original = realtime_driver.run_realtime

        def run_realtime(plan, backend_, writer, on_round):
            def observed(round_index):  # the driver's round done: the node goes before the next one
                on_round(round_index)
                if round_index == lose_after_round:
                    lose(victim)

            return original(plan, backend_, writer, on_round=observed)

        realtime_driver.run_realtime = run_realtime  # run_scenario imports it when it runs
        try:
            run_dir = run_module.run_scenario(parse_scenario(scenario), Path(out), progress=False)
        finally:
            realtime_driver.run_realtime = original
        services = ray.get([handle.__ray_call__.remote(placement_here) for handle in backend.services])
        return {
            "run_dir": str(run_dir),
            "head": nodes[0],
            "lost": victim,
            "services_nodes": [service.node_id for service in services],
            "alive": sorted(node["NodeID"] for node in ray.nodes() if node["Alive"]),
            "addresses": {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()},
        }

    class GatedStore(RunStore):
        # the sweep's store, but the first run stored keeps its trial waiting (in `put`) until `release`: the
        # trial is still at work, its candidate's other runs to go, when its node is lost
        def __init__(self, *args):
            super().__init__(*args)
            self.gate, self.first = threading.Event(), True

        def put(self, *args):
            super().put(*args)
            with self._lock:
                first, self.first = self.first, False
            if first:
                self.gate.wait(timeout=600)

        def release(self):
            self.gate.set()

    def sweep(path, out):
        plan = plan_sweep(load_sweep(path))
        runs_dir = Path(out) / "runs"
        stores, lost = [], []
        workers()

        def gated_store_actor(runs_dir_, spark_jobs):
            options = {"num_cpus": 0, "max_concurrency": 8, "scheduling_strategy": this_node()}
            stores.append(ray.remote(GatedStore).options(**options).remote(Path(runs_dir_).resolve(), spark_jobs))
            return stores[-1]

        def watch():
            # the first run stored (its trial waits in the store): lose the node that trial runs on
            while not (records := list(runs_dir.glob("*/sweep-run.json"))):
                time.sleep(0.02)
            found = json.loads(records[0].read_text())
            lose(found["ran_on"]["node_id"])
            lost.append((found["config_id"], found["ran_on"]["node_id"]))
            # the trial stays held until Tune's retry has stored a run of its candidate on another node: a
            # process of the node removed can outlive it for a moment, and a trial let go then runs on there
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not retried_elsewhere(found):
                time.sleep(0.05)
            ray.get(stores[0].release.remote())

        def retried_elsewhere(found):
            for path in runs_dir.glob("*/sweep-run.json"):
                record = json.loads(path.read_text())
                if record["config_id"] == found["config_id"] and record["ran_on"] != found["ran_on"]:
                    return True
            return False

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        original, tuning.store_actor = tuning.store_actor, gated_store_actor
        try:
            outcome = run_sweep(plan, Path(out), master="local[1]", progress=False)
        finally:
            tuning.store_actor = original
        watcher.join(timeout=1)
        execution = outcome.execution
        return {
            "lost": lost,
            "ran": list(execution.ran),
            "skipped": list(execution.skipped),
            "failed": execution.failed,
            "repeated": execution.repeated,
            "complete": outcome.results.summary["runs"]["complete"],
            "planned": plan.planned_runs,
            "runs": {config.config_id: [run.run_id for run in plan.runs(config)] for config in plan.configurations},
        }

    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        print("RESULT " + json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            answer = {"realtime": realtime, "sweep": sweep}[command.pop("command")](**command)
            print("RESULT " + json.dumps(answer), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    """
)


class Helper:
    """The helper process: `ask` sends a command and returns its answer."""

    def __init__(self, folder: Path) -> None:
        script = folder / "lost_node_helper.py"
        script.write_text(HELPER)
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        env["RAY_DEDUP_LOGS"] = "0"
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])  # this checkout
        self.stderr = (folder / "helper.stderr").open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.folder = folder
        assert self._answer() == {"ready": True}

    def ask(self, command: str, **args: Any) -> dict[str, Any]:
        self.process.stdin.write(json.dumps({"command": command, **args}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        for line in self.process.stdout:
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        self.stderr.flush()
        raise AssertionError("the helper ended: " + (self.folder / "helper.stderr").read_text()[-3000:])

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.stderr.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    helper = Helper(tmp_path_factory.mktemp("lost-node"))
    yield helper
    helper.close()


ROUNDS, LOSE_AFTER_ROUND, RESTART_AFTER_ROUNDS = 45, 10, 12
SESSION_TIMEOUT_ROUNDS = 2
# the rounds from a lost broker's last tick until the survivors' usage is back: its session ends a timeout after
# its last heartbeat (which may follow that tick by a round), the survivors see the end at their next tick, and
# their usage follows their limits a round later; plus 3 rounds for timers running late on a loaded machine
RECOVERY_ROUNDS = SESSION_TIMEOUT_ROUNDS + 1 + 1 + 1 + 3
QUOTA = 120.0


def realtime_scenario() -> dict[str, Any]:
    """Six brokers, each wanting 40 of a quota of 120: held at the quota, the room a lost broker leaves is taken."""
    return {
        "name": "lost-node",
        "seed": 3,
        "rounds": ROUNDS,
        "interval_s": 0.25,
        "mode": "realtime",
        "backend": "ray",
        "brokers_per_actor": 1,
        "restart_lost_after_rounds": RESTART_AFTER_ROUNDS,
        "policy": {"name": "fair-share-safe"},
        "cleanup": {
            "stale_after_rounds": 20,
            "max_report_age_rounds": 2,
            "session_timeout_rounds": SESSION_TIMEOUT_ROUNDS,
        },
        "groups": [{"name": "g1", "quota": {"publish_msgs_per_s": QUOTA}}],
        "brokers": [{"name": f"b{i}", "workload": [{"group": "g1", "msgs_per_s": 40}]} for i in range(1, 7)],
    }


def test_a_run_that_loses_a_worker_node_holds_the_quota_and_takes_up_the_room(cluster, tmp_path):
    answer = cluster.ask(
        "realtime", scenario=realtime_scenario(), out=str(tmp_path / "run"), lose_after_round=LOSE_AFTER_ROUND
    )
    run_dir = Path(answer["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # the registry and the channel on the driver's node, the head (the node lost is a worker)
    assert answer["services_nodes"] and set(answer["services_nodes"]) == {answer["head"]}
    assert manifest["services_node"]["node_id"] == answer["head"] and answer["lost"] not in answer["alive"]

    rounds, events = (ds.dataset(run_dir / t, format="parquet").to_table().to_pandas() for t in ("rounds", "events"))
    # hosts pinned head, worker 1, worker 2 in turn: b2 and b5 were on the worker lost
    crashes = events[events["kind"] == "crash"]
    assert sorted(crashes["target"]) == ["b2", "b5"]
    for crash in crashes.itertuples():
        detail = json.loads(crash.detail)
        assert detail["node_id"] == answer["lost"] and detail["node_address"] == answer["addresses"][answer["lost"]]
        assert "died" in detail["cause"] or "unavailable" in detail["cause"].lower()
    assert (crashes["round"] > LOSE_AFTER_ROUND).all()

    # the quota is held at every tick, the loss's and the restarts' included
    worst, in_force_then = worst_excess_in_force(rounds, crashes)
    assert worst <= 1e-6, (in_force_then, events[["round", "t_s", "kind", "target"]].to_string())

    # utilization: the survivors take up the room within a few rounds of the last round a lost broker ticked
    restarts = events[events["kind"] == "restart"]
    assert sorted(restarts["target"]) == ["b2", "b5"]
    lost_rows = rounds[rounds["broker"].isin(["b2", "b5"])]
    before = lost_rows[lost_rows["round"] < restarts["round"].min()]
    last_tick = int(before["round"].max())
    assert last_tick >= LOSE_AFTER_ROUND - 1  # the ticks of the round the node went in may be lost
    usage = rounds.groupby("round")["usage"].sum() / QUOTA
    assert usage.loc[5 : LOSE_AFTER_ROUND - 1].min() > 0.9  # held at the quota before (round 10: a tick may be lost)
    survivors = rounds[~rounds["broker"].isin(["b2", "b5"])].groupby("round")["usage"].sum() / QUOTA
    back = survivors.loc[last_tick + 1 :]
    recovered = back[back > 0.9]
    assert not recovered.empty and recovered.index[0] <= last_tick + RECOVERY_ROUNDS, back.head(10)

    # restarted on the nodes still up, as new incarnations, up to the end of the run
    for restart in restarts.itertuples():
        crash_round = int(crashes.loc[crashes["target"] == restart.target, "round"].iloc[0])
        assert restart.round == crash_round + RESTART_AFTER_ROUNDS
        assert json.loads(restart.detail)["node_id"] in set(answer["alive"]) - {answer["lost"]}
        own = lost_rows[lost_rows["broker"] == restart.target]
        again = own[own["round"] >= restart.round]
        assert again["incarnation"].min() > own.loc[own["round"] < restart.round, "incarnation"].max()
        assert again["round"].max() == ROUNDS - 1


def worst_excess_in_force(rounds: pd.DataFrame, crashes: pd.DataFrame) -> tuple[float, dict[str, Any]]:
    """The most the limits in force at any tick added up to above the quota plus a floor per broker (the
    policy's promise: a newcomer starts at its floor), and what was in force then (for a failure's message: the
    tick, and each broker's limit with the round and incarnation of the tick that set it). A broker's limit is in
    force from its tick to its next; a lost broker's until its crash is logged or its last tick, whichever is later
    (the driver logs a crash at its round's time, and on a loaded machine its round starts late: a lost host may
    have ticked after that time, before its node went). On timers a round's rows are ticks at different instants (a
    lagging timer ticks a round late), so the sum is taken at each tick, not over a round's rows."""
    lost = []
    for crash in crashes.itertuples():
        own = rounds[rounds["broker"] == crash.target]
        incarnation = own.loc[own["t_s"] <= crash.t_s, "incarnation"].max()  # the one up when it was lost
        last_tick_s = own.loc[own["incarnation"] == incarnation, "t_s"].max()
        lost.append((max(crash.t_s, last_tick_s), crash.target))
    lost.sort()
    in_force: dict[str, Any] = {}  # broker -> the tick that set its limit
    worst, worst_in_force = -np.inf, {}
    for tick in rounds.sort_values("t_s", kind="stable").itertuples():
        while lost and lost[0][0] < tick.t_s:
            in_force.pop(lost.pop(0)[1], None)
        in_force[tick.broker] = tick
        excess = sum(setter.limit for setter in in_force.values()) - QUOTA - MIN_LIMIT * len(in_force)
        if excess > worst:
            worst_in_force = {
                "t_s": tick.t_s,
                **{b: (t.limit, t.round, t.incarnation, t.t_s) for b, t in sorted(in_force.items())},
            }
            worst = excess
    return worst, worst_in_force


def test_a_sweep_that_loses_a_worker_node_completes_with_every_run_once(cluster, tmp_path):
    sweep = {
        "seeds": [1, 2],
        "fixed": {"rounds": 8},
        "conditions": {"channel.loss": [0.0, 0.3]},
        "grid": {"policy.params.steal_fraction": [0.25, 0.75]},
    }
    answer = cluster.ask("sweep", path=str(write_sweep(tmp_path, sweep)), out=str(tmp_path / "out"))
    [(config_id, lost_node)] = answer["lost"]
    assert answer["failed"] == {} and answer["repeated"] == {}
    assert answer["complete"] == answer["planned"] == 8 and sorted(answer["ran"]) == sorted(
        run_id for runs in answer["runs"].values() for run_id in runs
    )
    ran_on = {}
    for run_id in answer["runs"][config_id]:
        record = json.loads((tmp_path / "out" / "runs" / run_id / "sweep-run.json").read_text())
        assert record["metrics"]["jain"] is not None
        ran_on[run_id] = record["ran_on"]["node_id"]
    # the lost trial stored its first run on the node lost; Tune retried it on the other worker, which ran the rest
    assert lost_node in ran_on.values() and len(set(ran_on.values())) == 2
    assert not list((tmp_path / "out" / "runs").glob(".*.partial"))
