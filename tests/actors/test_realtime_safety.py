"""The recommended policy's promise in realtime: the limits of a group never add up above its quota (plus the floor
of 1 per broker), whatever the timers do, even for a broker whose session ended while it was up; and a registry
that comes back from an outage gives the brokers their views back (its sessions did not age while it was down)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds

from actors.registry.membership import Membership
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
    assert rounds.groupby("round").broker.size().max() == 5
    assert_within_the_quota(rounds)


def test_a_broker_whose_heartbeats_are_lost_fences_itself_before_its_peers_take_its_room(tmp_path, monkeypatch):
    """b2's heartbeats are lost for a second (five session timeouts, at 0.2 s rounds: a heartbeat period is 67 ms)
    while it keeps ticking. Its lease runs out (no heartbeat taken for two thirds of the timeout) before the
    registry ends its session, so it drops to a newcomer's floor as a new incarnation before any peer takes its
    room: at no instant do the limits in force add up above the quota plus the floors. Once its heartbeats get
    through it has its share again."""
    heartbeat = Membership.heartbeat

    def lost_for_b2(self: Membership, broker: str, incarnation: int, now_s: float) -> bool:
        if broker == "b2" and 2.0 <= now_s < 3.0:
            return False
        return heartbeat(self, broker, incarnation, now_s)

    monkeypatch.setattr(Membership, "heartbeat", lost_for_b2)
    rounds = rounds_of(scenario(24, interval_s=0.2), tmp_path / "run")
    events = ds.dataset(tmp_path / "run" / "events", format="parquet").to_table().to_pandas()
    fences = events[events.kind == "fenced"]
    assert set(fences.target) == {"b2"} and fences.t_s.between(2.0, 3.4).all(), fences
    b2 = rounds[rounds.broker == "b2"]
    assert b2.incarnation.max() == len(fences)  # each fence a new incarnation
    assert [json.loads(detail)["incarnation"] for detail in fences.detail] == list(range(1, len(fences) + 1))
    assert (b2[b2.t_s < 2.0].incarnation == 0).all()
    in_force = limits_in_force(rounds, fences)
    assert (in_force <= 100 + 4 * MIN_LIMIT + 1e-6).all(), in_force[in_force > 100 + 4 * MIN_LIMIT + 1e-6]
    assert_within_the_quota(rounds)
    last = rounds[rounds["round"] == rounds["round"].max()]
    assert len(last) == 4 and (last.limit - 25.0).abs().max() < 1e-6, last[["broker", "limit"]]


def limits_in_force(rounds: pd.DataFrame, fences: pd.DataFrame) -> pd.Series:
    """The limits in force added up, at each change: a broker's limit from each of its ticks, and a fenced
    broker's floor from its fence (a fence at a tick comes before the tick's allocation)."""
    changes = pd.concat(
        [
            fences.assign(broker=fences.target, limit=MIN_LIMIT)[["t_s", "broker", "limit"]],
            rounds[["t_s", "broker", "limit"]],
        ]
    ).sort_values("t_s", kind="stable")
    held: dict[str, float] = {}
    sums = []
    for broker, limit in zip(changes.broker, changes.limit, strict=True):
        held[broker] = limit
        sums.append(sum(held.values()))
    return pd.Series(sums, index=changes.t_s)


def assert_within_the_quota(rounds: pd.DataFrame) -> None:
    """In every round the limits, and the traffic admitted, add up to at most the quota (the larger one in a
    round where a cut lands) plus the floor of each broker."""
    per_round = rounds.groupby("round").agg(
        limit=("limit", "sum"), usage=("usage", "sum"), quota=("quota", "max"), brokers=("broker", "size")
    )
    assert len(per_round) >= 20
    ceiling = per_round.quota + MIN_LIMIT * per_round.brokers + 1e-6
    assert (per_round.limit <= ceiling).all(), per_round[per_round.limit > ceiling]
    assert (per_round.usage <= ceiling).all(), per_round[per_round.usage > ceiling]


def test_views_come_back_when_the_registry_does(tmp_path):
    """The registry answers nobody for 6 rounds (longer than the session timeout): afterwards every broker hears
    every other again and the limits add up to the quota, not above it."""
    data = scenario(26, cleanup={"session_timeout_rounds": 3}, events=[{"at": 8, "registry_outage": {"rounds": 6}}])
    rounds = rounds_of(data, tmp_path / "run")
    after = rounds[rounds["round"] >= 20]
    assert (after.view_brokers == 4).all(), after.groupby("broker").view_brokers.min().to_dict()
    assert (after.groupby("round").limit.sum() <= 100 + 4 * MIN_LIMIT + 1e-6).all()
