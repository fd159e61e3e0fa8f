"""End to end on the local backend, lockstep: every scenario event kind and membership expiry.

Each test runs a small scenario (or a shipped one) through `experiments.run.run_scenario` and reads the
Parquet telemetry back, so what is checked is what a user gets: the `rounds`, `messages` and `events`
tables. Round numbers are exact where the design makes them exact (lockstep, no delay): a report
published in round r is received in round r, the driver heartbeats every live broker each round, an
entry expires once `now - refreshed > stale_after_rounds`, a session once `now - heartbeat >= timeout`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest

import experiments
from experiments.run import run_scenario
from experiments.scenario import load_scenario, parse_scenario

SCENARIOS = Path(experiments.__file__).parent / "scenarios"
MSGS = "publish_msgs_per_s"


class Run:
    """The telemetry of one finished run as pandas frames."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        self.rounds = _table(run_dir, "rounds")
        self.messages = _table(run_dir, "messages")
        self.events = _table(run_dir, "events")
        self.manifest = json.loads((run_dir / "manifest.json").read_text())

    def series(self, column: str, broker: str, group: str = "g", dimension: str = MSGS) -> pd.Series:
        """`column` per round for one broker, group and dimension (rounds where it is down are absent)."""
        rows = self.rounds[
            (self.rounds.broker == broker) & (self.rounds.group == group) & (self.rounds.dimension == dimension)
        ]
        return rows.set_index("round")[column].sort_index()

    def total(self, column: str, group: str = "g", dimension: str = MSGS) -> pd.Series:
        rows = self.rounds[(self.rounds.group == group) & (self.rounds.dimension == dimension)]
        return rows.groupby("round")[column].sum()


def _table(run_dir: Path, name: str) -> pd.DataFrame:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pandas()


def run_local(tmp_path: Path, scenario: Any, name: str = "run") -> Run:
    """Run a Scenario, a raw mapping (parsed here) or a shipped scenario's name, on the local backend."""
    if isinstance(scenario, str):
        scenario = load_scenario(SCENARIOS / f"{scenario}.yaml", {"backend": "local"})
    elif isinstance(scenario, dict):
        scenario = parse_scenario(scenario)
    assert scenario.backend == "local"
    return Run(run_scenario(scenario, tmp_path / name, progress=False))


def three_brokers(**changes: Any) -> dict[str, Any]:
    """Quota 90 over three brokers wanting 50 each (over quota: 30 each), every round reported."""
    data: dict[str, Any] = {
        "name": "events",
        "seed": 3,
        "rounds": 30,
        "backend": "local",
        "policy": {"name": "pip82-proportional"},
        "reporting": {"threshold_pct": 10, "force_every": 1},
        "cleanup": {
            "stale_after_rounds": 6,
            "max_report_age_rounds": 2,
            "membership": True,
            "session_timeout_rounds": 3,
        },
        "groups": [{"name": "g", "quota": {MSGS: 90}}],
        "brokers": [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 50}]} for i in (1, 2, 3)],
    }
    data.update(changes)
    return data


def rounds_where(series: pd.Series, value: Any) -> list[int]:
    return [int(r) for r in series.index[series == value]]


# --- PIP-82's examples ---------------------------------------------------------------------------------------


def test_pip82_equal_example_settles_at_20_60_40_after_round_0(tmp_path):
    run = run_local(tmp_path, "pip82-equal-example")
    for broker, limit in (("broker-1", 20.0), ("broker-2", 60.0), ("broker-3", 40.0)):
        limits = run.series("limit", broker, "tenant-a/ns-1")
        assert len(limits) == 20
        assert limits.to_numpy() == pytest.approx([limit] * 20)
    assert run.total("usage", "tenant-a/ns-1").to_numpy() == pytest.approx([90.0] * 20)  # demand is under quota


def test_pip82_proportional_example_splits_the_residual_by_usage(tmp_path):
    run = run_local(tmp_path, "pip82-proportional-example")
    last = {b: run.series("limit", b, "tenant-a/ns-1").iloc[-1] for b in ("broker-1", "broker-2", "broker-3")}
    assert last == pytest.approx({"broker-1": 100 / 9, "broker-2": 500 / 9, "broker-3": 300 / 9})
    assert run.rounds.groupby("round")["limit"].sum().max() <= 100.0 + 1e-9  # never above quota


# --- crash, membership expiry and restart --------------------------------------------------------------------


@pytest.mark.parametrize("membership", [True, False])
def test_a_crashed_broker_leaves_the_views_after_the_session_timeout_or_stale_expiry(tmp_path, membership):
    data = three_brokers(events=[{"at": 10, "crash": "b1"}, {"at": 20, "restart": "b1"}])
    data["cleanup"]["membership"] = membership
    run = run_local(tmp_path, data)

    # b1 is gone: no rows while it is down, and no goodbye (nothing published in its name)
    assert set(run.series("limit", "b1").index) == set(range(10)) | set(range(20, 30))
    assert not ((run.messages.broker == "b1") & run.messages["round"].between(10, 19)).any()

    # Last heartbeat and last report of b1: round 9. Session timeout 3 -> dead at round 12;
    # without membership the entry lasts until 9 < now - 6, i.e. round 16.
    gone = 12 if membership else 16
    for other in ("b2", "b3"):
        views = run.series("view_brokers", other)
        assert (views.loc[0 : gone - 1] == 3).all(), views.loc[8:gone].to_dict()
        assert (views.loc[gone:19] == 2).all(), views.loc[8:20].to_dict()
        limits = run.series("limit", other)
        assert limits.loc[gone - 1] == pytest.approx(30.0)  # still sharing with the dead broker
        assert limits.loc[gone] == pytest.approx(45.0)  # its share handed out: 90 over two brokers

    # restart: a new incarnation, heard at once; the quota is shared by three again
    incarnations = run.series("incarnation", "b1")
    assert (incarnations.loc[:9] == 0).all() and (incarnations.loc[20:] == 1).all()
    for other in ("b2", "b3"):
        assert (run.series("view_brokers", other).loc[20:] == 3).all()
    assert run.total("limit").loc[21:].to_numpy() == pytest.approx([90.0] * 9)
    assert run.total("usage").loc[21:].to_numpy() == pytest.approx([90.0] * 9)
    kinds = run.events[["round", "kind", "target"]].values.tolist()
    assert kinds == [[10, "crash", "b1"], [20, "restart", "b1"]]


def test_shipped_crash_restart_scenario(tmp_path):
    run = run_local(tmp_path, "crash-restart")
    group = "tenant-a/ns-1"
    assert not (run.rounds.broker == "broker-1").loc[run.rounds["round"].between(15, 29)].any()
    views = run.series("view_brokers", "broker-2", group)
    assert views.loc[16] == 3 and views.loc[17] == 2  # session timeout 3: last heartbeat at round 14
    assert run.series("limit", "broker-2", group).loc[20:29].to_numpy() == pytest.approx([50.0] * 10)
    assert (run.series("incarnation", "broker-1", group).loc[30:] == 1).all()
    assert run.total("usage", group).loc[45:].to_numpy() == pytest.approx([100.0] * 5, rel=0.05)


# --- join and clean leave ------------------------------------------------------------------------------------


def test_join_and_clean_leave_zero_report_drops_the_broker_at_once(tmp_path):
    scenario = load_scenario(
        SCENARIOS / "join-leave.yaml", {"backend": "local", "cleanup.membership": False}
    )  # no membership registry: only the leaving broker's zero report can tell the others
    run = run_local(tmp_path, scenario)
    group = "tenant-a/ns-1"

    # broker-4 joins at round 15 (its join_at): no rows before, heard by the others the same round
    assert run.series("limit", "broker-4", group).index.min() == 15
    for other in ("broker-1", "broker-3"):
        views = run.series("view_brokers", other, group)
        assert views.loc[14] == 3 and views.loc[15] == 4

    # broker-2 leaves cleanly at round 30: its zero report reaches the others that very round
    assert set(run.series("limit", "broker-2", group).index) == set(range(30)) | set(range(45, 60))
    leave_round = run.messages[(run.messages["round"] == 30) & (run.messages.broker == "broker-2")]
    assert int(leave_round.reports_sent.iloc[0]) >= 1 and int(leave_round.bytes_published.iloc[0]) > 0
    for other in ("broker-1", "broker-3", "broker-4"):
        views = run.series("view_brokers", other, group)
        assert views.loc[29] == 4 and views.loc[30] == 3, views.loc[28:31].to_dict()

    # ... and joins again at 45 as a new incarnation
    assert (run.series("incarnation", "broker-2", group).loc[45:] == 1).all()
    assert (run.series("view_brokers", "broker-1", group).loc[46:] == 4).all()
    events = run.events.sort_values("round")[["round", "kind", "target"]].values.tolist()
    assert events == [[15, "join", "broker-4"], [30, "leave", "broker-2"], [45, "join", "broker-2"]]
    # Steal pairs brokers by rank of usage, and usages tie (a broker held at a limit equal to another's demand),
    # so how it settles after the re-join depends on the last bit of a sum over brokers: with one summation
    # order it is within 5% from round 50, with another from round 53 (and 5.3% over at most). Ten rounds on:
    assert (run.total("usage", group).loc[55:] <= 120.0 * 1.06).all()


# --- demand and quota ------------------------------------------------------------------------------------------


def test_demand_event_moves_usage_up_to_the_quota(tmp_path):
    data = three_brokers(rounds=20, events=[{"at": 8, "demand": {"broker": "b1", "group": "g", "msgs_per_s": 80}}])
    for broker in data["brokers"]:
        broker["workload"][0]["msgs_per_s"] = 20  # 60 under a quota of 90
    run = run_local(tmp_path, data)
    demand = run.series("demand", "b1")
    assert (demand.loc[:7] == 20).all() and (demand.loc[8:] == 80).all()
    usage = run.total("usage")
    assert usage.loc[:7].to_numpy() == pytest.approx([60.0] * 8)
    assert usage.loc[12:].min() >= 0.95 * 90  # within 4 rounds of the shift the quota is in use
    assert usage.max() <= 90 * 1.001
    assert run.series("usage", "b1").iloc[-1] == pytest.approx(50.0, abs=0.5)  # 90 - 20 - 20
    assert json.loads(run.events.detail.iloc[0])["group"] == "g"


def test_quota_raise_and_reduce_limits_follow(tmp_path):
    run = run_local(tmp_path, "quota-raise-reduce")  # demand 90 + 60 + 30 = 180 throughout
    group = "tenant-a/ns-1"
    quota = run.series("quota", "broker-1", group)
    assert quota.loc[14] == 100 and quota.loc[15] == 160 and quota.loc[30] == 60
    assert quota.loc[40] == float("inf") and quota.loc[50] == 100
    limits, usage = run.total("limit", group), run.total("usage", group)
    # raise 100 -> 160 at round 15: limits add up to the new quota, usage reaches it the next round
    assert limits.loc[15:29].to_numpy() == pytest.approx([160.0] * 15)
    assert usage.loc[16:29].min() >= 0.95 * 160 and usage.loc[16:29].max() <= 160 * 1.001
    # cut to 60 (below the usage) at round 30: everyone shrinks, usage is under 60 (+5%) from round 31
    assert limits.loc[30:39].to_numpy() == pytest.approx([60.0] * 10)
    assert usage.loc[31:39].to_numpy() == pytest.approx([60.0] * 9, rel=0.05)
    # unlimited at 40: limits are +inf and usage is the whole demand
    assert (run.rounds[run.rounds["round"].between(40, 49)]["limit"] == float("inf")).all()
    assert usage.loc[41:49].to_numpy() == pytest.approx([180.0] * 9)
    # back to 100 at 50
    assert usage.loc[51:].to_numpy() == pytest.approx([100.0] * 9, rel=0.05)


# --- the channel -----------------------------------------------------------------------------------------------


def test_channel_events_loss_and_delay(tmp_path):
    events = [
        {"at": 5, "channel": {"loss": 1.0}},
        {"at": 15, "channel": {"loss": 0.0, "delay_rounds": 1}},
        {"at": 20, "channel": {"delay_rounds": 3}},  # older than max_report_age_rounds (2) on arrival
    ]
    run = run_local(tmp_path, three_brokers(events=events))
    delivered = run.messages.groupby("round").bytes_delivered.sum()
    dropped = run.messages.groupby("round").deliveries_dropped.sum()
    published = run.messages.groupby("round").bytes_published.sum()

    # total loss from round 5: nothing delivered, every copy (3 senders x 2 subscribers) dropped
    assert (delivered.loc[5:14] == 0).all() and (dropped.loc[5:14] == 6).all()
    assert (delivered.loc[:4] == 2 * published.loc[:4]).all() and (dropped.loc[:4] == 0).all()
    # last report heard in round 4, stale after 6 rounds: the others vanish from the views at round 11,
    # although the membership registry still has them alive (the views are built from reports)
    views = run.series("view_brokers", "b1")
    assert (views.loc[:10] == 3).all() and (views.loc[11:15] == 1).all()
    assert run.series("limit", "b1").loc[11:15].to_numpy() == pytest.approx([90.0] * 5)

    # one round of delay from round 15: nothing arrives in round 15, round 14's nothing... then one round late
    assert delivered.loc[15] == 0
    assert (delivered.loc[16:20] == 2 * published.loc[15:19].to_numpy()).all()
    assert (views.loc[16:26] == 3).all()

    # three rounds of delay from round 20: the reports arrive too old and are discarded; the last accepted
    # one (published 19, received 20) expires at round 27
    assert delivered.loc[21] == 0 and delivered.loc[22] == 0 and delivered.loc[23] > 0
    assert (views.loc[27:] == 1).all()


def test_channel_partition_splits_and_heals_the_views(tmp_path):
    run = run_local(tmp_path, "partition")  # 2+2 split at round 20, healed at 40; quota 200, demand 230
    group = "tenant-a/ns-1"
    views = {b: run.series("view_brokers", b, group) for b in ("broker-1", "broker-2", "broker-3", "broker-4")}
    limits = run.total("limit", group)
    assert all((v.loc[:19] == 4).all() for v in views.values())
    assert limits.loc[:19].to_numpy() == pytest.approx([200.0] * 20)
    # each side forgets the other after stale_after_rounds (10) without its reports
    assert all((v.loc[31:40] == 2).all() for v in views.values())
    # then each half hands out the whole quota: the group overshoots while split
    assert limits.loc[31:40].min() == pytest.approx(400.0)
    assert run.total("usage", group).loc[32:40].min() == pytest.approx(230.0)  # all the demand gets through
    dropped = run.messages.groupby("round").deliveries_dropped.sum()
    assert dropped.loc[20:39].sum() > 0 and dropped.loc[:19].sum() == 0 and dropped.loc[40:].sum() == 0
    # healed: the views merge at the next forced report and the limits come back to the quota
    assert all((v.loc[50:] == 4).all() for v in views.values())
    assert limits.loc[50:].to_numpy() == pytest.approx([200.0] * 10)
    assert run.total("usage", group).loc[50:].to_numpy() == pytest.approx([200.0] * 10)


# --- clock skew ------------------------------------------------------------------------------------------------


def test_clock_skew_makes_a_brokers_reports_too_old_for_the_others(tmp_path):
    events = [
        {"at": 5, "clock_skew": {"broker": "b3", "offset_s": -5.0}},  # b3's clock is 5 s behind
        {"at": 16, "clock_skew": {"broker": "b3", "offset_s": 0.0}},
    ]
    run = run_local(tmp_path, three_brokers(rounds=24, events=events))
    # b3's reports carry a publish time 5 s in the past (> max_report_age_rounds 2): the others discard
    # them; its last good one was received in round 4, so it expires from their views at round 11
    for other in ("b1", "b2"):
        views = run.series("view_brokers", other)
        assert (views.loc[:10] == 3).all() and (views.loc[11:15] == 2).all(), views.to_dict()
        assert (views.loc[16:] == 3).all()  # clock fixed at round 16: heard again that round
    # b3 still hears the others (reports from its future are not too old)
    assert (run.series("view_brokers", "b3") == 3).all()
    # its producers do not notice the skew: the token buckets run on the monotonic clock, so b3 keeps
    # admitting exactly its previous limit (demand 50 is above it) through both clock jumps
    usage, limit = run.series("usage", "b3"), run.series("limit", "b3")
    assert usage.loc[5:17].to_numpy() == pytest.approx(limit.loc[4:16].to_numpy())
    assert usage.loc[5:12].to_numpy() == pytest.approx([30.0] * 8)
    detail = [json.loads(d)["offset_s"] for d in run.events.sort_values("round").detail]
    assert run.events.kind.tolist() == ["clock_skew", "clock_skew"] and detail == [-5.0, 0.0]


@pytest.mark.parametrize("joins_at", [0, 5])
def test_a_broker_registers_with_its_groups_and_an_idle_one_is_unlisted_at_once(tmp_path, joins_at):
    """A broker is listed for the groups it hosts from its registration; one it hosts without demand is unlisted
    in its first round, so the busy brokers (fair-share-safe reserves room for every listed peer) share the
    whole quota: 45 each of 90, not 30 with room kept for the idle one."""
    brokers = [{"name": f"b{i}", "workload": [{"group": "g", "msgs_per_s": 50}]} for i in (1, 2)]
    idle = {"name": "b3", "join_at": joins_at, "workload": [{"group": "g", "msgs_per_s": 0}]}
    run = run_local(tmp_path, three_brokers(rounds=12, policy={"name": "fair-share-safe"}, brokers=[*brokers, idle]))
    for broker in ("b1", "b2"):
        assert run.series("limit", broker).loc[joins_at + 2 :].to_numpy() == pytest.approx([45.0] * (10 - joins_at))
