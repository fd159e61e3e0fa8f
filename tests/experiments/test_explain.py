"""`quotalab explain`: a lockstep run replayed and a realtime run's recorded decisions give explanations whose last
step is the `rounds` table's limit, exactly; recording changes no limit; a name or round the run does not have is
one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocator.policies import POLICIES
from experiments.cli import main
from experiments.explain.run_limits import Limit, chosen_limit, read_run
from experiments.explain.sources import explain_limits

A, B = "tenant-a/ns-1", "tenant-b/ns-1"
SCENARIO = {
    "name": "explain",
    "rounds": 12,
    "backend": "local",
    "policy": {"name": "fair-share-safe"},
    "channel": {"loss": 0.2},
    "groups": [
        {"name": A, "quota": {"publish_msgs_per_s": 100, "publish_bytes_per_s": 50000}},
        {"name": B, "quota": {"publish_msgs_per_s": 50}},
    ],
    "brokers": [
        {"name": "broker-1", "workload": [{"group": A, "msgs_per_s": 80, "msg_bytes": 500}]},
        {"name": "broker-2", "workload": [{"group": A, "msgs_per_s": 40}, {"group": B, "msgs_per_s": 20}]},
        {"name": "broker-3", "join_at": 5, "workload": [{"group": A, "msgs_per_s": 60}]},
    ],
    "events": [{"at": 8, "quota": {"group": A, "publish_msgs_per_s": 60}}],
}


def run(tmp_path: Path, name: str, scenario: dict, *options: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    out = tmp_path / name
    assert main(["run", str(path), "--out", str(out), *options]) == 0
    return out


@pytest.fixture(scope="module")
def lockstep(tmp_path_factory) -> Path:
    return run(tmp_path_factory.mktemp("explain"), "lockstep", SCENARIO)


def rounds(run_dir: Path):
    return pq.read_table(run_dir / "rounds").drop(["run_id"]).to_pandas()


def test_every_limit_of_a_replay_is_the_rounds_tables(lockstep):
    """One replay explains every row of three rounds (the join, the quota cut, the last): each explanation ends
    at the `rounds` table's limit, exactly, and names its quota, peers and steps."""
    table = rounds(lockstep)
    picked = table[table["round"].isin([5, 8, 11])]
    limits = [Limit(int(r["round"]), r["broker"], r["group"], r["dimension"]) for _, r in picked.iterrows()]
    explained = explain_limits(read_run(lockstep), limits, progress=False)
    assert len(explained) == len(limits) == len(picked)
    for (_, row), limit in zip(picked.iterrows(), limits, strict=True):
        explanation = explained[limit]
        assert explanation["steps"][-1]["limit"] == explanation["limit"] == row["limit"]
        assert explanation["quota"] == row["quota"] and explanation["steps"][0]["step"] == "rule"
        assert explanation["peers"][0] == {
            "broker": limit.broker,
            "counted": explanation["peers"][0]["counted"],
            "as": "itself: its own usage",
            "age_rounds": None,
        }
    joined = explained[Limit(5, "broker-3", A, "publish_msgs_per_s")]
    assert joined["previous_limit"]["why"].startswith("it started serving the group this round")
    cut = explained[Limit(8, "broker-1", A, "publish_msgs_per_s")]
    assert cut["quota"] == 60.0 and cut["previous_limit"]["why"].startswith("the quota changed this round")


def test_json_has_the_issues_fields_and_defaults_to_the_worst_peak(lockstep, capsys):
    assert main(["explain", str(lockstep), "--group", A, "--json"]) == 0
    explanation = json.loads(capsys.readouterr().out)
    fields = {"run_id", "round", "broker", "group", "dimension", "policy", "quota", "limit", "loss_measured"}
    assert fields | {"peers", "steps"} <= set(explanation)
    assert all(set(peer) == {"broker", "counted", "as", "age_rounds"} for peer in explanation["peers"])
    assert all(set(step) == {"step", "limit", "why"} for step in explanation["steps"])
    table = rounds(lockstep)
    mine = table[(table["group"] == A) & (table["dimension"] == explanation["dimension"])]
    peak = mine.groupby("round").agg(usage=("usage", "sum"), quota=("quota", "max"))
    assert explanation["round"] == int((peak["usage"] / peak["quota"]).idxmax())
    at_peak = mine[mine["round"] == explanation["round"]]
    assert explanation["broker"] == at_peak.loc[at_peak["limit"].idxmax(), "broker"]
    assert explanation["limit"] == at_peak["limit"].max()


def test_text_names_the_peers_and_the_steps(lockstep, capsys):
    assert main(["explain", str(lockstep), "--group", A, "--broker", "broker-2", "--round", "6",
                 "--dimension", "publish_bytes_per_s"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert text.startswith("run lockstep, round 6: broker broker-2, group tenant-a/ns-1, publish_bytes_per_s")
    assert "peers counted:" in text and "steps:" in text and "\n  rule " in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--group", "nope"], "--group nope: run lockstep has no such group (it has tenant-a/ns-1, tenant-b/ns-1)"),
        (["--group", A, "--broker", "broker-9"], "--broker broker-9: not a broker of group tenant-a/ns-1"),
        (["--group", A, "--broker", "broker-3", "--round", "2"], "--broker broker-3: has no limit of group"),
        (["--group", A, "--round", "99"], "--round 99: run lockstep has rounds 0 to 11 of group tenant-a/ns-1"),
        (["--group", B, "--dimension", "publish_bytes_per_s"], "--dimension publish_bytes_per_s: group tenant-b"),
    ],
)
def test_what_the_run_does_not_have_is_one_line(lockstep, capsys, options, message):
    assert main(["explain", str(lockstep), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"quotalab explain: {message}") and err.count("\n") == 1


def test_not_a_run_directory_is_one_line(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "missing"), "--group", A]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_recording_decisions_changes_no_limit(lockstep, tmp_path):
    """The same lockstep run with every broker recording and explaining every limit: the same `rounds` table,
    and a `decisions` table `explain` reads without replaying, row for row the `rounds` table's limits."""
    recorded = run(tmp_path, "lockstep", SCENARIO, "--set", "telemetry.decisions=true")
    assert rounds(recorded).equals(rounds(lockstep))
    decisions = pq.read_table(recorded / "decisions").to_pandas()
    joined = decisions.merge(rounds(recorded), on=["round", "broker", "group", "dimension"], suffixes=("", "_r"))
    assert len(joined) == len(decisions) == len(rounds(recorded))
    assert np.array_equal(joined["limit"], joined["limit_r"])
    explained = [json.loads(text)["limit"] for text in joined["explanation"]]
    assert explained == joined["limit"].tolist()
    (recorded / "scenario_source.json").unlink()  # no replay possible: the table answers
    limit = chosen_limit(read_run(recorded), A, "broker-1", 9, None)
    assert explain_limits(read_run(recorded), [limit], progress=False)[limit]["round"] == 9


def test_a_realtime_run_needs_its_decisions_recorded(tmp_path, capsys):
    realtime = {**SCENARIO, "mode": "realtime", "interval_s": 0.2, "rounds": 6, "events": []}
    bare = run(tmp_path, "bare", realtime)
    assert main(["explain", str(bare), "--group", A]) == 2
    assert "a realtime run cannot be replayed" in capsys.readouterr().err
    recorded = run(tmp_path, "recorded", {**realtime, "telemetry": {"decisions": True}})
    capsys.readouterr()
    assert main(["explain", str(recorded), "--group", A, "--json"]) == 0
    explanation = json.loads(capsys.readouterr().out)
    table = rounds(recorded)
    row = table[
        (table["round"] == explanation["round"])
        & (table["broker"] == explanation["broker"])
        & (table["group"] == A)
        & (table["dimension"] == explanation["dimension"])
    ]
    assert explanation["limit"] == row["limit"].item() == explanation["steps"][-1]["limit"]


def test_a_run_without_its_scenario_is_not_replayed(lockstep, tmp_path, capsys):
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in ("manifest.json", "rounds"):
        source = lockstep / part
        if source.is_dir():
            (copy / part).mkdir()
            for file in source.iterdir():
                (copy / part / file.name).write_bytes(file.read_bytes())
        else:
            (copy / part).write_bytes(source.read_bytes())
    assert main(["explain", str(copy), "--group", A]) == 2
    assert "scenario_source.json: missing" in capsys.readouterr().err


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    policy=st.sampled_from(sorted(POLICIES)),
    loss=st.sampled_from([0.0, 0.3]),
    demands=st.tuples(st.sampled_from([10, 60, 200]), st.sampled_from([0, 10, 60, 200]), st.sampled_from([0, 60])),
    join_at=st.integers(0, 4),
    seed=st.integers(0, 1000),
)
def test_the_steps_always_end_at_the_telemetrys_limit(tmp_path_factory, policy, loss, demands, join_at, seed):
    """Any policy, loss, demands and join: every row of the `decisions` table ends at its `rounds` row's limit."""
    scenario = {
        "name": "property",
        "rounds": 8,
        "seed": seed,
        "backend": "local",
        "policy": {"name": policy},
        "channel": {"loss": loss},
        "groups": [{"name": A, "quota": {"publish_msgs_per_s": 100}}],
        "brokers": [
            {"name": f"broker-{index}", "join_at": join_at if index == 2 else 0,
             "workload": [{"group": A, "msgs_per_s": demand}] if demand else []}
            for index, demand in enumerate(demands)
        ],
    }  # fmt: skip
    recorded = run(tmp_path_factory.mktemp("property"), "recorded", {**scenario, "telemetry": {"decisions": True}})
    decisions = pq.read_table(recorded / "decisions").to_pandas()
    joined = decisions.merge(rounds(recorded), on=["round", "broker", "group", "dimension"], suffixes=("", "_r"))
    assert len(joined) == len(rounds(recorded))
    for text, limit in zip(joined["explanation"], joined["limit_r"], strict=True):
        steps = json.loads(text)["steps"]
        assert steps[-1]["limit"] == limit
