"""Telemetry of whole runs (local backend): the tables' columns, one row per round x live broker x hosted
group x dimension, byte counters that add up, the manifest, and runs that end badly (Ctrl-C, a crash)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import experiments
from actors.telemetry.writer import TelemetryWriter
from experiments import run as run_module
from experiments.run import run_scenario
from experiments.scenario import load_scenario
from experiments.scenario.spec import Scenario

SCENARIOS = Path(experiments.__file__).parent / "scenarios"

# DESIGN.md, "Telemetry (Parquet)": `rounds` has at least these columns, `messages` these.
ROUNDS_COLUMNS = [
    "run_id", "round", "t_s", "broker", "group", "dimension", "quota", "limit", "usage", "demand",
    "throttled_s", "view_brokers", "reported",
]  # fmt: skip
MESSAGES_COLUMNS = [
    "bytes_published", "bytes_delivered", "reports_sent", "reports_suppressed", "deliveries_dropped",
    "reports_rejected", "deliveries_lost_transport",
]  # fmt: skip
MANIFEST_KEYS = {
    "run_id", "scenario_name", "policy", "seed", "backend", "mode", "scenario", "versions", "started_at",
    "ended_at", "status", "rounds_completed",
}  # fmt: skip


def table(run_dir: Path, name: str) -> pd.DataFrame:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pandas()


def shipped(name: str, **overrides) -> Scenario:
    return load_scenario(SCENARIOS / f"{name}.yaml", {"backend": "local", **overrides})


@pytest.fixture(scope="module")
def churn(tmp_path_factory) -> tuple[Scenario, Path]:
    """The demo scenario: 5 brokers, 3 groups (one with two dimensions), 15% loss, a join at 12, a crash
    at 25 and restart at 35, a demand shift at 42; every rate profile but trace."""
    scenario = shipped("churn-and-loss", rounds=45)
    return scenario, run_scenario(scenario, tmp_path_factory.mktemp("churn") / "run", progress=False)


def hosted_groups(scenario: Scenario) -> dict[str, list[str]]:
    """A broker hosts the groups of its workload and those a demand event gives it."""
    hosted = {b.name: [w.group for w in b.workload] for b in scenario.brokers}
    for event in scenario.events:
        if event.kind == "demand" and event.params["group"] not in hosted[event.target]:
            hosted[event.target].append(event.params["group"])
    return hosted


def test_tables_have_the_design_columns_and_types(churn):
    _, run_dir = churn
    rounds_schema = pq.read_schema(next((run_dir / "rounds").glob("*.parquet")))
    assert rounds_schema.names[: len(ROUNDS_COLUMNS)] == ROUNDS_COLUMNS
    assert {"report_bytes", "incarnation"} <= set(rounds_schema.names)
    assert str(rounds_schema.field("round").type) == "int32" and str(rounds_schema.field("reported").type) == "bool"
    assert str(rounds_schema.field("view_brokers").type) == "int32"
    messages_schema = pq.read_schema(next((run_dir / "messages").glob("*.parquet")))
    assert messages_schema.names == ["run_id", "round", "t_s", "broker", *MESSAGES_COLUMNS]
    events_schema = pq.read_schema(next((run_dir / "events").glob("*.parquet")))
    assert events_schema.names == ["run_id", "round", "t_s", "kind", "target", "detail"]


def test_one_row_per_round_live_broker_hosted_group_and_dimension(churn):
    scenario, run_dir = churn
    rounds = table(run_dir, "rounds")
    hosted = hosted_groups(scenario)
    dims = scenario.dimensions()
    assert dims == ("publish_msgs_per_s", "publish_bytes_per_s")

    def up(broker: str, r: int) -> bool:
        if broker == "broker-5":
            return r >= 12
        if broker == "broker-2":
            return not 25 <= r < 35
        return True

    limits = {g.name: set(g.quota) for g in scenario.groups}  # rows only for the dimensions a group limits
    expected = {
        (r, b, g, d) for r in range(45) for b in hosted if up(b, r) for g in hosted[b] for d in dims if d in limits[g]
    }
    keys = list(rounds[["round", "broker", "group", "dimension"]].itertuples(index=False, name=None))
    assert len(keys) == len(set(keys)) == len(expected)
    assert set(keys) == expected
    assert (rounds.run_id == run_dir.name).all()
    assert (rounds.t_s == rounds["round"] * scenario.interval_s).all()
    quota = {(g.name, d): g.quota.get(d, float("inf")) for g in scenario.groups for d in dims}
    assert (rounds.quota == [quota[(g, d)] for g, d in zip(rounds.group, rounds.dimension, strict=True)]).all()
    # bytes are messages times their size: tenant-b/logs' producers send 2000-byte messages
    logs = rounds[rounds.group == "tenant-b/logs"].pivot_table(
        index=["round", "broker"], columns="dimension", values="usage"
    )
    assert logs.publish_bytes_per_s.to_numpy() == pytest.approx(2000 * logs.publish_msgs_per_s.to_numpy())


def test_byte_counters_add_up(churn):
    scenario, run_dir = churn
    rounds, messages = table(run_dir, "rounds"), table(run_dir, "messages")
    n_brokers = len(scenario.brokers)
    published, delivered = messages.bytes_published.sum(), messages.bytes_delivered.sum()
    assert 0 < delivered <= published * (n_brokers - 1)
    # 15% loss: about 85% of the copies offered arrive (copies per publish: the other live brokers)
    assert messages.deliveries_dropped.sum() > 0 and (messages.reports_rejected == 0).all()
    live = rounds.groupby("round").broker.nunique()
    offered = sum(row.bytes_published * (live[row.round] - 1) for row in messages.itertuples() if row.bytes_published)
    assert 0.75 < delivered / offered < 0.95
    # a broker's report bytes, shared out over the groups it reported, add up to what it published
    one_dim = rounds[rounds.dimension == "publish_msgs_per_s"]
    shares = one_dim.groupby(["round", "broker"]).report_bytes.sum()
    by_publisher = messages.set_index(["round", "broker"]).bytes_published
    assert shares.to_numpy() == pytest.approx(by_publisher.reindex(shares.index).to_numpy())
    assert (one_dim.reported == (one_dim.report_bytes > 0)).all()
    assert ((messages.reports_sent > 0) == (messages.bytes_published > 0)).all()
    assert messages.reports_suppressed.sum() > 0  # constant loads are left out under the threshold


def test_without_loss_every_copy_reaches_every_other_live_broker(tmp_path):
    scenario = shipped("join-leave")  # no loss; a join, a clean leave and a re-join
    run_dir = run_scenario(scenario, tmp_path / "run", progress=False)
    rounds, messages = table(run_dir, "rounds"), table(run_dir, "messages")
    subscribers = rounds.groupby("round").broker.unique().map(set)
    for r, frame in messages.groupby("round"):
        expected = sum(row.bytes_published * len(subscribers[r] - {row.broker}) for row in frame.itertuples())
        assert frame.bytes_delivered.sum() == expected, r
    assert (messages.deliveries_dropped == 0).all()
    # the clean leave at round 30 is a published zero report from a broker with no row that round
    leaver = messages[(messages["round"] == 30) & (messages.broker == "broker-2")]
    assert int(leaver.bytes_published.iloc[0]) > 0


def test_manifest_of_a_complete_run(churn):
    scenario, run_dir = churn
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert set(manifest) >= MANIFEST_KEYS
    assert manifest["status"] == "complete" and manifest["rounds_completed"] == 45
    assert manifest["run_id"] == run_dir.name and manifest["scenario_name"] == "churn-and-loss"
    assert (manifest["policy"], manifest["seed"], manifest["backend"], manifest["mode"]) == (
        "fair-share",
        42,
        "local",
        "lockstep",
    )
    assert manifest["scenario"]["rounds"] == 45 and len(manifest["scenario"]["brokers"]) == 5
    assert {"python", "numpy", "pyarrow"} <= set(manifest["versions"])
    assert manifest["ended_at"] >= manifest["started_at"]
    events = table(run_dir, "events").sort_values(["round", "kind"])
    assert events[["round", "kind", "target"]].values.tolist() == [
        [12, "join", "broker-5"], [25, "crash", "broker-2"], [35, "restart", "broker-2"],
        [42, "demand", "broker-1"], [42, "demand", "broker-4"],
    ]  # fmt: skip


# --- runs that end badly ---------------------------------------------------------------------------------------


def stop_at(monkeypatch, round_index: int, error: BaseException, seen: dict) -> None:
    """Make `run_scenario`'s lockstep driver raise `error` after round `round_index`, first recording what
    is on disk at that moment (what a kill -9 would leave)."""
    real = run_module.run_lockstep

    def driver(scenario, backend, writer, on_round=None, **driver_args):
        def hook(r: int) -> None:
            if on_round is not None:
                on_round(r)
            if r == round_index:
                seen["manifest"] = json.loads((writer.run_dir / "manifest.json").read_text())
                seen["rounds"] = table(writer.run_dir, "rounds")
                raise error

        real(scenario, backend, writer, on_round=hook, **driver_args)

    monkeypatch.setattr(run_module, "run_lockstep", driver)


def test_ctrl_c_leaves_readable_tables_and_an_interrupted_manifest(tmp_path, monkeypatch):
    seen: dict = {}
    stop_at(monkeypatch, 25, KeyboardInterrupt(), seen)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(shipped("steal-under-loss"), tmp_path / "run", progress=False)
    run_dir = tmp_path / "run"

    # before the interrupt was handled (what a kill -9 would leave): batches are written in the background, the
    # one of rounds 0-9 before the flush at round 19 hands over the next; the manifest counts what is on disk
    on_disk = seen["manifest"]["rounds_completed"]
    assert seen["manifest"]["status"] == "running" and on_disk in (10, 20)
    written = sorted(seen["rounds"]["round"].unique())  # read just after the manifest: a batch may land between
    assert written == list(range(len(written))) and on_disk <= len(written) <= 20  # never behind the count

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["rounds_completed"] == 26
    assert manifest["ended_at"] is not None
    rounds = table(run_dir, "rounds")
    assert sorted(rounds["round"].unique()) == list(range(26))
    assert len(rounds) == 26 * 2 + 6  # broker-1 and broker-2, and broker-3 from round 20; one group, one dimension
    assert sorted(table(run_dir, "messages")["round"].unique()) == list(range(26))
    events = table(run_dir, "events")
    assert events[["round", "kind"]].values.tolist() == [[10, "demand"], [20, "join"]]
    for name in ("rounds", "messages", "events"):
        for part in (run_dir / name).glob("*.parquet"):
            pq.read_table(part)  # every part is a complete Parquet file


def test_a_driver_failure_is_recorded_as_failed(tmp_path, monkeypatch):
    seen: dict = {}
    stop_at(monkeypatch, 3, RuntimeError("driver crashed"), seen)
    with pytest.raises(RuntimeError, match="driver crashed"):
        run_scenario(shipped("crash-restart"), tmp_path / "run", progress=False)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["rounds_completed"] == 4
    assert sorted(table(tmp_path / "run", "rounds")["round"].unique()) == [0, 1, 2, 3]
    assert table(tmp_path / "run", "events").empty  # an empty table is still readable, with its schema


def test_a_run_directory_is_never_reused(tmp_path):
    scenario = shipped("pip82-equal-example", rounds=2)
    run_scenario(scenario, tmp_path / "run", progress=False)
    from experiments.errors import UserError

    with pytest.raises(UserError, match="already holds a run"):
        run_scenario(scenario, tmp_path / "run", progress=False)


def test_the_writer_thread_yields_the_cpu_to_the_timers(tmp_path):
    """Parts are written on a thread of lower priority (a higher nice value) than the driver's."""
    writer = TelemetryWriter(tmp_path / "run", "run", {})
    try:
        niceness = writer._background.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        assert niceness.result() >= os.getpriority(os.PRIO_PROCESS, 0) + 10 or niceness.result() == 19
    finally:
        writer.close("complete")
